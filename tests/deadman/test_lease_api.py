"""`lease_hours` through the API: as given, else the project's default, else 12; 0 turns it off;
validated 0..720; the instance shows it and how its cloud ends a machine's bill (`self_end`)."""

from __future__ import annotations

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from messages.allocation import AllocateRequest
from store import allocations
from store.models import Instance
from tests.api.conftest import (  # noqa: F401 (fixtures)
    FakeWorkflows,
    all_items,
    box,
    client,
    engine,
    fake_cloud,
    ssh_key,
    workflows,
)
from tests.api.test_planning import allocate, connect

URL = "/api/compute/defaults"


async def test_lease_hours_default_per_project_and_validated(client: httpx.AsyncClient,  # noqa: F811
                                                             workflows: FakeWorkflows,  # noqa: F811
                                                             ssh_key: str) -> None:  # noqa: F811
    await connect(client, "fakecloud")
    _, req = await allocate(client, workflows, ssh_key)
    assert req.lease_hours == 12  # neither the request nor the project gives one
    _, req = await allocate(client, workflows, ssh_key, lease_hours=0)
    assert req.lease_hours == 0  # off
    for bad in (-1, 721, "3"):
        r, _ = await allocate(client, workflows, ssh_key, lease_hours=bad)
        assert r.status_code == 422, r.text
    r = await client.put(URL, json={"cloud": "fakecloud", "lease_hours": 48})
    assert r.status_code == 200 and r.json()["lease_hours"] == 48, r.text
    _, req = await allocate(client, workflows, ssh_key)
    assert req.lease_hours == 48  # the project's default
    r, req = await allocate(client, workflows, ssh_key, lease_hours=2.5)
    assert req.lease_hours == 2.5  # the request's own wins
    shown = (await client.get(f"/api/compute/instances/{r.json()['id']}")).json()
    assert shown["lease_hours"] == 2.5
    assert shown["self_end"]["method"] in ("shutdown", "api", "none", "n/a")


async def test_the_clouds_page_shows_how_each_cloud_self_ends(client: httpx.AsyncClient) -> None:  # noqa: F811
    clouds = {c["id"]: c["capabilities"] for c in await all_items(client, "/api/compute/clouds")}
    assert clouds["aws"]["self_end"]["method"] == "shutdown"
    assert "InstanceInitiatedShutdownBehavior" in clouds["aws"]["self_end"]["how"]
    assert clouds["runpod"]["self_end"]["method"] == "api"
    assert clouds["lambda"]["self_end"]["method"] == "none" and clouds["lambda"]["self_end"]["source"]


def test_the_row_keeps_the_lease(engine: sa.Engine) -> None:  # noqa: F811
    req = AllocateRequest(allocation_id="a1", connection_id="c", cloud="fakecloud", ssh_public_keys=["k"],
                          lease_hours=6)
    allocations.record_started(engine, req, "wf-a1")
    with Session(engine) as s:
        row = s.get(Instance, "a1")
        assert row is not None and row.lease_hours == 6


@pytest.fixture(autouse=True)
def _uses_the_api_fake_cloud(fake_cloud: object) -> None:  # noqa: F811
    """The API tests' FAKE cloud is registered for these tests too."""


async def test_a_jobs_machine_gets_the_projects_lease(client: httpx.AsyncClient,  # noqa: F811
                                                      workflows: FakeWorkflows) -> None:  # noqa: F811
    """A managed job's machine is leased like a hand allocation's: the project's default, else 12 h."""
    await connect(client, "fakecloud")
    job = {"name": "j", "command": "true", "requested_by": "tests", "gpu": "A10", "type": "task"}

    async def leased() -> float | None:
        r = await client.post("/api/compute/jobs", json=job)
        assert r.status_code in (200, 201, 202), r.text
        [start] = [s for s in workflows.starts if s.workflow_id == f"job-{r.json()['id']}"]
        allocation = getattr(start.arg, "allocation", None)
        assert allocation is not None
        return allocation.lease_hours

    assert await leased() == 12
    r = await client.put(URL, json={"cloud": "fakecloud", "lease_hours": 3})
    assert r.status_code == 200, r.text
    assert await leased() == 3

"""`max_hours` on POST /api/compute/instances: only a cloud that stops a machine itself after a set
lifetime takes it (capability `max_lifetime_h`: Modal, its sandbox timeout, up to 24 h). Anything
else is refused with the reason before a workflow exists; an accepted one reaches the allocation's
request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from fakeclouds import clouds
from messages import workflows as wf
from messages.allocation import AllocationInput
from providers import registry
from store import connections
from store.secrets import SecretBox
from tests.api.conftest import FakeWorkflows, all_items
from tests.conformance.clouds import REAL_ENGINE_CLOUDS
from tests.test_seed_capabilities import SEED

INSTANCES = "/api/compute/instances"


def connect(engine: sa.Engine, box: SecretBox, *names: str) -> None:
    """Stored connections (refusals come before the cloud is asked)."""
    with Session(engine) as session:
        for cloud in names:
            credentials = {} if cloud in REAL_ENGINE_CLOUDS else clouds.facade(cloud).credentials("a-token")
            connections.add_connection(session, box, provider=cloud, name=cloud, credentials=credentials)


def started_request(workflows: FakeWorkflows) -> Any:
    [start] = workflows.starts_of(wf.ALLOCATION.name)
    assert isinstance(start.arg, AllocationInput)
    return start.arg.request


async def test_modal_takes_max_hours_and_it_reaches_the_request(
        client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows,
        ssh_key: str) -> None:
    connect(engine, box, "modal")
    r = await client.post(INSTANCES, json={"cloud": "modal", "max_hours": 2, "ssh_public_keys": [ssh_key]})
    assert r.status_code == 202, r.text
    req = started_request(workflows)
    assert req.cloud == "modal" and req.max_hours == 2 and req.lifetime_s() == 7200


async def test_without_max_hours_the_request_has_none(
        client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows,
        ssh_key: str) -> None:
    connect(engine, box, "modal")
    r = await client.post(INSTANCES, json={"cloud": "modal", "ssh_public_keys": [ssh_key]})
    assert r.status_code == 202, r.text
    assert started_request(workflows).max_hours is None  # Modal keeps its 24 h cap


async def test_more_than_24_hours_on_modal_is_refused_with_modals_cap(
        client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows,
        ssh_key: str) -> None:
    connect(engine, box, "modal")
    r = await client.post(INSTANCES, json={"cloud": "modal", "max_hours": 24.5, "ssh_public_keys": [ssh_key]})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == "--max-hours 24.5: Modal caps a sandbox's lifetime (its timeout) at 24 h"
    assert workflows.starts == []
    r = await client.post(INSTANCES, json={"cloud": "modal", "max_hours": 24, "ssh_public_keys": [ssh_key]})
    assert r.status_code == 202, r.text


@pytest.mark.parametrize("cloud", sorted(c for c in SEED if c != "modal"))
async def test_a_cloud_that_enforces_no_lifetime_refuses_max_hours_naming_itself(
        cloud: str, client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows,
        ssh_key: str) -> None:
    caps = registry.capabilities(cloud)
    assert caps.max_lifetime_h is None
    connect(engine, box, cloud)
    base: dict[str, Any] = {"cloud": cloud, "ssh_public_keys": [ssh_key]}
    if caps.region_required:
        base["region"] = caps.regions[0]
    r = await client.post(INSTANCES, json={**base, "max_hours": 2})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "--max-hours" in detail and caps.display_name in detail, detail
    assert workflows.starts == []
    r = await client.post(INSTANCES, json=base)  # the same request without it is accepted
    assert r.status_code == 202, r.text


async def test_planning_over_several_clouds_keeps_only_those_that_enforce_it(
        client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows,
        ssh_key: str) -> None:
    connect(engine, box, "modal", "lambda")
    r = await client.post(INSTANCES, json={"clouds": ["modal", "lambda"], "max_hours": 1.5,
                                           "ssh_public_keys": [ssh_key]})
    assert r.status_code == 202, r.text
    req = started_request(workflows)
    assert [t.cloud for t in req.targets] == ["modal"] and req.lifetime_s() == 5400
    assert any(n.startswith("skipped lambda: --max-hours") for n in req.notes), req.notes
    # No cloud named: every connected one is a candidate, and the same holds.
    r = await client.post(INSTANCES, json={"max_hours": 1, "ssh_public_keys": [ssh_key]})
    assert r.status_code == 202, r.text
    second = workflows.starts_of(wf.ALLOCATION.name)[-1].arg.request  # type: ignore[attr-defined]
    assert [t.cloud for t in second.targets] == ["modal"]


async def test_when_no_cloud_enforces_it_the_request_is_refused_with_each_reason(
        client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows,
        ssh_key: str) -> None:
    connect(engine, box, "lambda", "runpod")
    r = await client.post(INSTANCES, json={"clouds": ["lambda", "runpod"], "max_hours": 1,
                                           "ssh_public_keys": [ssh_key]})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert detail.startswith("no cloud can serve this request")
    assert "lambda: --max-hours" in detail and "runpod: --max-hours" in detail, detail
    assert workflows.starts == []


@pytest.mark.parametrize("bad", [0, -1, "2h", "2", None, True, 1e9])
async def test_a_max_hours_that_is_not_a_positive_number_within_the_cap_is_refused(
        bad: Any, client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows,
        ssh_key: str) -> None:
    connect(engine, box, "modal")
    body: dict[str, Any] = {"cloud": "modal", "ssh_public_keys": [ssh_key], "max_hours": bad}
    r = await client.post(INSTANCES, json=body)
    if bad is None:  # null: not given
        assert r.status_code == 202, r.text
        return
    assert r.status_code == 422, r.text
    assert "max_hours" in r.text or "--max-hours 1e+09: Modal caps" in r.text  # the field, or the cap
    assert workflows.starts == []


async def test_an_idempotency_key_reused_with_another_max_hours_is_refused(
        client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows,
        ssh_key: str) -> None:
    connect(engine, box, "modal")
    body = {"cloud": "modal", "ssh_public_keys": [ssh_key]}
    headers = {"Idempotency-Key": "order-7"}
    first = await client.post(INSTANCES, json={**body, "max_hours": 2}, headers=headers)
    assert first.status_code == 202, first.text
    again = await client.post(INSTANCES, json={**body, "max_hours": 2}, headers=headers)
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    other = await client.post(INSTANCES, json={**body, "max_hours": 3}, headers=headers)
    assert other.status_code == 422 and "different request" in other.json()["detail"]
    other = await client.post(INSTANCES, json=body, headers=headers)
    assert other.status_code == 422 and "different request" in other.json()["detail"]


async def test_the_clouds_list_shows_which_cloud_enforces_a_lifetime(client: httpx.AsyncClient) -> None:
    caps = {c["id"]: c["capabilities"] for c in await all_items(client, "/api/compute/clouds")}
    assert caps["modal"]["max_lifetime_h"] == 24
    assert {cloud for cloud, c in caps.items() if c and c.get("max_lifetime_h")} == {"modal"}

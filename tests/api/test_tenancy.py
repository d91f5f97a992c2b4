"""L4: the queue is shared by every project, but a tenant sees only its own: a job's PRI counts the
project's own waiting jobs, and a priority is within the administrator's range
(GPUPROV_JOB_PRIORITY_MAX), so no tenant jumps the others by an arbitrary amount."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from api.deps import AppDeps
from tests.api.conftest import connect_fake, make_project

JOB = {"name": "j", "command": "true", "requested_by": "tests", "gpu": "A10", "type": "sft"}
JOBS = "/api/compute/jobs"


def deps_of(client: httpx.AsyncClient) -> AppDeps:
    deps: AppDeps = client._transport.app.state.deps  # type: ignore[attr-defined]
    return deps


async def submit(client: httpx.AsyncClient, token: str | None = None, **fields: Any) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = await client.post(JOBS, json={**JOB, **fields}, headers=headers)
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    return job_id


async def test_a_tenant_sees_positions_within_its_own_project(client: httpx.AsyncClient) -> None:
    tenant = await make_project(client, "vision")
    await connect_fake(client)
    await connect_fake(client, "vision")
    # Three jobs of the default project ahead at a higher priority, then the tenant's two.
    ahead = [await submit(client, priority=5) for _ in range(3)]
    mine = [await submit(client, tenant), await submit(client, tenant)]
    auth = {"Authorization": f"Bearer {tenant}"}
    listed = {j["id"]: j["pri"] for j in (await client.get(JOBS, headers=auth)).json()["items"]}
    assert listed == {mine[0]: 1, mine[1]: 2}  # the old answer was 4 and 5: three jobs of others
    assert (await client.get(f"{JOBS}/{mine[1]}", headers=auth)).json()["pri"] == 2
    rows = (await client.get("/api/compute/workloads", headers=auth)).json()["items"]
    assert sorted(w["pri"] for w in rows) == [1, 2]
    detail = (await client.get(f"/api/compute/workloads/job:{mine[0]}", headers=auth)).json()
    assert detail["pri"] == 1
    # The default project's own view numbers its own jobs the same way.
    assert sorted(j["pri"] for j in (await client.get(JOBS)).json()["items"]) == [1, 2, 3]
    assert ahead


@pytest.mark.parametrize("priority", [101, -101, 1000, -1000])
async def test_a_priority_outside_the_administrators_range_is_a_422(client: httpx.AsyncClient,
                                                                   priority: int) -> None:
    await connect_fake(client)
    r = await client.post(JOBS, json={**JOB, "priority": priority})
    assert r.status_code == 422, r.text
    assert "between -100 and 100" in r.json()["detail"]
    assert r.json()["errors"][0]["loc"] == ["body", "priority"]
    assert (await client.get(JOBS)).json()["items"] == []  # nothing stored


async def test_the_range_is_the_installations_setting(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    for priority in (100, -100, 0):
        await submit(client, priority=priority)
    deps_of(client).job_priority_max = 10
    r = await client.post(JOBS, json={**JOB, "priority": 11})
    assert r.status_code == 422 and "between -10 and 10" in r.json()["detail"]
    await submit(client, priority=10)


def test_the_setting_has_a_sensible_default_and_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from settings import Settings

    assert Settings().job_priority_max == 100
    monkeypatch.setenv("GPUPROV_JOB_PRIORITY_MAX", "5")
    assert Settings().job_priority_max == 5
    monkeypatch.setenv("GPUPROV_JOB_PRIORITY_MAX", "-1")
    with pytest.raises(ValidationError):
        Settings()


async def test_the_schema_says_the_installations_range(client: httpx.AsyncClient) -> None:
    """The published schema bounds a job's priority as this installation does, not by the model's
    hard cap (±1000): what a client reads from it, the API takes."""
    deps_of(client).job_priority_max = 10
    app = client._transport.app  # type: ignore[attr-defined]
    app.openapi_schema = None  # built on first use: this installation's setting now
    priority = (await client.get("/openapi.json")).json()["components"]["schemas"]["JobCreate"][
        "properties"]["priority"]
    assert (priority["minimum"], priority["maximum"]) == (-10, 10)

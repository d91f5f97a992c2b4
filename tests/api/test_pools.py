"""PUT/GET/DELETE /api/compute/pools against the recording FakeWorkflows: bounds refused with the bound
named, the desired spec saved and the pool's ScaleWorkflow started and woken, scoped to the project."""

from __future__ import annotations

import httpx

from messages import workflows as wf
from messages.ids import attempt_key
from messages.pool import POOL_NAME, POOL_NAME_MAX, PoolSlot, ScaleInput, pool_allocation_id, slot_of_key
from providers import naming
from tests.api.conftest import FakeWorkflows, connect_fake, make_project

URL = "/api/compute/pools"


def test_a_pool_machine_names_its_pool_slot_and_generation_in_a_name_clouds_keep_whole() -> None:
    name = "a" * POOL_NAME_MAX
    assert POOL_NAME.match(name) and not POOL_NAME.match(name + "a") and not POOL_NAME.match("web-")
    key = attempt_key(pool_allocation_id("x1y2z3", name, 63, 999), 9)
    # GCP's 63 characters beside a default (8-char) installation id: whole, not shortened.
    assert naming.owned_name("abcd1234", key, 63, what="a test name") == naming.prefix("abcd1234") + key
    assert slot_of_key(key) == PoolSlot(pool_id="x1y2z3", pool=name, slot=63, generation=999)
    assert slot_of_key(attempt_key("k2j4h6g8f0", 1)) is None  # a machine allocated by hand


async def test_size_outside_min_max_is_refused_naming_the_bound(client: httpx.AsyncClient,
                                                                 workflows: FakeWorkflows) -> None:
    await connect_fake(client)
    r = await client.put(f"{URL}/web", json={"cloud": "fakecloud", "min": 0, "max": 8, "size": 9})
    assert r.status_code == 422 and "above max 8" in r.text, r.text
    r = await client.put(f"{URL}/web", json={"cloud": "fakecloud", "min": 2, "max": 8, "size": 1})
    assert r.status_code == 422 and "below min 2" in r.text, r.text
    r = await client.put(f"{URL}/Not_A_Name", json={"cloud": "fakecloud", "max": 8, "size": 1})
    assert r.status_code == 422, r.text
    assert workflows.starts_of(wf.SCALE.name) == []
    assert (await client.get(f"{URL}/web")).status_code == 404


async def test_put_starts_and_wakes_the_scale_workflow_then_delete_scales_to_zero(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    r = await client.put(f"{URL}/web", json={"cloud": "fakecloud", "max": 8, "size": 2})
    assert r.status_code == 409 and "connect" in r.text  # nothing connected yet
    await connect_fake(client)
    r = await client.put(f"{URL}/web", json={"cloud": "fakecloud", "gpu": "H100", "max": 8, "size": 2})
    assert r.status_code == 202, r.text
    assert r.json()["size"] == 2 and r.json()["status"] == "active" and r.json()["current"] == 0
    (start,) = workflows.starts_of(wf.SCALE.name)
    assert isinstance(start.arg, ScaleInput) and start.arg.name == "web" and start.use_existing
    assert (start.workflow_id, wf.SCALE.reconcile.name) in workflows.updates

    r = await client.put(f"{URL}/web", json={"cloud": "fakecloud", "gpu": "H100", "max": 8, "size": 5})
    assert r.status_code == 202 and r.json()["size"] == 5
    assert {s.workflow_id for s in workflows.starts_of(wf.SCALE.name)} == {start.workflow_id}
    r = await client.put(f"{URL}/web", json={"cloud": "fakecloud", "gpu": "A100", "max": 8, "size": 5})
    assert r.status_code == 409 and "gpu" in r.text  # the machines of a pool stay identical

    listed = (await client.get(URL)).json()["items"]
    assert [p["name"] for p in listed] == ["web"]
    r = await client.delete(f"{URL}/web")
    assert r.status_code == 202 and r.json()["status"] == "deleting"
    assert workflows.updates.count((start.workflow_id, wf.SCALE.reconcile.name)) == 3
    r = await client.put(f"{URL}/web", json={"cloud": "fakecloud", "gpu": "H100", "max": 8, "size": 1})
    assert r.status_code == 409 and "being deleted" in r.text


async def test_another_projects_pool_is_not_seen(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    r = await client.put(f"{URL}/web", json={"cloud": "fakecloud", "max": 2, "size": 1})
    assert r.status_code == 202, r.text
    token = await make_project(client, "other")
    headers = {"Authorization": f"Bearer {token}"}
    assert (await client.get(f"{URL}/web", headers=headers)).status_code == 404
    assert (await client.get(URL, headers=headers)).json()["items"] == []
    assert (await client.delete(f"{URL}/web", headers=headers)).status_code == 404

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session, select

from api.deps import deps_from_settings
from api.temporal import WorkflowUnavailable
from messages import workflows as wf
from messages.allocation import Timing
from messages.workflows import UpdateRef
from settings import get_settings
from store import instances
from store.db import default_engine
from store.models import Attempt, Instance
from tests.api.conftest import FakeWorkflows, app_serving, connect_fake, make_project

URL = "/api/compute/instances"


def body(ssh_key: str, **extra: Any) -> dict[str, Any]:
    return {"cloud": "fakecloud", "ssh_public_keys": [ssh_key], **extra}


@pytest.mark.parametrize(("extra", "reason"), [
    ({"spot": True}, "spot"),
    ({"ports": [8080]}, "firewall API; Fake Cloud has none"),
    ({"region": "mars-1"}, "no region 'mars-1'"),
    ({"cloud": "nimbus"}, "unknown cloud 'nimbus'"),
    ({"ssh_public_keys": ["ssh-rsa AAAAnotakey"]}, "not an OpenSSH public key"),
    ({"ssh_public_keys": []}, "at least 1 item"),
    ({"gpu_count": 0}, "greater than or equal to 1"),
    ({"ports": [70000]}, "less than or equal to 65535"),
    ({"gpu_cout": 2}, "Extra inputs are not permitted"),
    ({"project": "vision"}, "Extra inputs are not permitted"),  # the token and X-Project say which
    ({"clouds": ["fakecloud"]}, "at most one of cloud, clouds and connection_id"),
    ({"connection_id": "c1"}, "at most one of cloud, clouds and connection_id"),
    ({"cloud": None, "clouds": []}, "at least 1 item"),
    ({"cloud": None, "clouds": ["nimbus"]}, "unknown cloud 'nimbus'"),
])
async def test_invalid_requests_are_422_before_any_workflow(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, extra: dict[str, Any],
        reason: str) -> None:
    await connect_fake(client)
    r = await client.post(URL, json=body(ssh_key, **extra))
    assert r.status_code == 422, r.text
    assert reason in r.text
    assert workflows.starts == []
    assert (await client.get(URL)).json()["items"] == []


async def test_not_connected_is_409(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                    ssh_key: str) -> None:
    r = await client.post(URL, json=body(ssh_key))
    assert r.status_code == 409 and "connect fakecloud first" in r.json()["detail"]
    assert workflows.starts == []


async def test_create_starts_allocate_then_records_the_row(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, engine: sa.Engine) -> None:
    await make_project(client, "vision")
    conn = await connect_fake(client, "vision")
    rows_at_start: list[int] = []

    async def started(workflow: str, arg: Any, workflow_id: str) -> None:
        with Session(engine) as s:
            rows_at_start.append(len(s.exec(select(Instance)).all()))

    workflows.started = started  # type: ignore[method-assign]
    vision = {"X-Project": "vision"}
    r = await client.post(URL, headers=vision,
                          json=body(ssh_key, gpu="H100", gpu_count=1, region="r2", name="train"))
    assert r.status_code == 202, r.text
    iid = r.json()["id"]
    assert re.fullmatch(r"[a-z0-9]{1,12}", iid) and r.json()["status"] == "provisioning"
    [start] = workflows.starts
    # Once per id: a retry joins the run, an id that ran never runs again.
    assert (start.workflow, start.workflow_id, start.once) == (
        wf.ALLOCATION.name, f"allocation-{iid}", True)
    assert rows_at_start == [0]  # the row comes after the workflow, never before
    asked = start.arg.request  # type: ignore[attr-defined]
    assert asked.allocation_id == iid and asked.connection_id == conn["id"]
    assert [(t.connection_id, t.cloud) for t in asked.targets] == [(conn["id"], "fakecloud")]
    assert asked.ssh_public_keys == [ssh_key] and "installation_id" not in asked.model_dump()
    assert (asked.gpu, asked.region, asked.project) == ("H100", "r2", "vision")
    got = (await client.get(f"{URL}/{iid}", headers=vision)).json()
    assert got["status"] == "provisioning" and got["phase"] == "validate" and got["ssh"] is None
    assert got["requested"] == {"gpu": "H100", "gpu_count": 1, "region": "r2", "spot": None}
    assert got["project"] == "vision"
    assert [i["id"] for i in (await client.get(URL, headers=vision)).json()["items"]] == [iid]
    assert (await client.get(URL)).json()["items"] == []  # the admin token's default project: none


async def test_reads_come_from_the_database(client: httpx.AsyncClient, ssh_key: str,
                                            engine) -> None:  # type: ignore[no-untyped-def]
    await connect_fake(client)
    iid = (await client.post(URL, json=body(ssh_key))).json()["id"]
    with Session(engine) as s:  # what the allocate activities write as they go
        instances.record_attempt(s, Attempt(instance_id=iid, seq=1, provider="fakecloud",
                                            instance_type="gpu.a10", region="r1", price_per_hour=0.75,
                                            outcome="capacity", reason="no A10 left in r1"))
        instances.record_attempt(s, Attempt(instance_id=iid, seq=2, provider="fakecloud",
                                            instance_type="gpu.h100", region="r2", price_per_hour=2.5,
                                            outcome="created"))
        instances.update_instance(s, iid, status="ready", phase="ready", ssh_host="127.0.0.1", ssh_port=2222,
                                  ssh_user="ubuntu", instance_type="gpu.h100", offer_region="r2",
                                  price_per_hour=2.5, gpus_found=[{"index": 0, "name": "NVIDIA H100"}],
                                  note="k3s skipped")
    got = (await client.get(f"{URL}/{iid}")).json()
    assert got["status"] == "ready" and got["ssh"] == {"host": "127.0.0.1", "port": 2222, "user": "ubuntu",
                                                       "bastion": None}
    assert got["host_key"] is None  # no login of gpuprov's there yet: nothing seen, nothing pinned
    assert [(a["seq"], a["outcome"], a["reason"]) for a in got["attempts"]] == [
        (1, "capacity", "no A10 left in r1"), (2, "created", None)]
    assert got["gpus"] == [{"index": 0, "name": "NVIDIA H100"}] and got["price_per_hour"] == 2.5
    assert got["region"] == "r2" and got["note"] == "k3s skipped"
    assert got["created_at"].endswith(("+00:00", "Z"))
    assert (await client.get(URL, params={"status": "ready"})).json()["items"][0]["id"] == iid
    assert (await client.get(URL, params={"status": "failed"})).json()["items"] == []
    assert (await client.get(URL, params={"status": "bogus"})).status_code == 422
    r = await client.get(f"{URL}/nope")
    assert r.status_code == 404 and "nope" in r.json()["detail"]


async def test_terminate_is_idempotent(client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str,
                                       engine) -> None:  # type: ignore[no-untyped-def]
    await connect_fake(client)
    iid = (await client.post(URL, json=body(ssh_key))).json()["id"]
    for _ in range(2):
        r = await client.post(f"{URL}/{iid}/terminate")
        assert r.status_code == 202 and r.json() == {"id": iid, "status": "terminating"}
    # The allocation's own `terminate` update, idempotent on the workflow's side.
    assert workflows.updates == [(f"allocation-{iid}", wf.ALLOCATION.terminate.name)] * 2
    # The route wrote nothing: the workflow records `terminating` itself when it begins the teardown.
    assert (await client.get(f"{URL}/{iid}")).json()["status"] == "provisioning"
    with Session(engine) as s:
        instances.update_instance(s, iid, status="terminated")
    r = await client.post(f"{URL}/{iid}/terminate")
    assert r.status_code == 202 and r.json()["status"] == "terminated" and len(workflows.updates) == 2
    assert (await client.post(f"{URL}/nope/terminate")).status_code == 404



async def test_terminate_sends_the_update_before_any_row_write(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, engine: sa.Engine) -> None:
    await connect_fake(client)
    iid = (await client.post(URL, json=body(ssh_key))).json()["id"]
    with Session(engine) as s:
        instances.update_instance(s, iid, status="ready", phase="ready")
    writes: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith(("UPDATE", "INSERT", "DELETE")):
            writes.append(statement.split("SET")[0].strip())

    seen_at_update: list[list[str]] = []
    real_update = workflows.request_update

    async def request_update(workflow_id: str, update: UpdateRef[Any]) -> bool:
        seen_at_update.append(list(writes))
        return await real_update(workflow_id, update)

    workflows.request_update = request_update  # type: ignore[method-assign]
    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        r = await client.post(f"{URL}/{iid}/terminate")
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert r.status_code == 202 and r.json()["status"] == "terminating"
    assert seen_at_update == [[]] and writes == []  # the update first; no row write at all
    # Temporal unreachable: a 503, and the row still says what the workflow last recorded.
    workflows.fail_with = WorkflowUnavailable("Temporal at x is not reachable")
    assert (await client.post(f"{URL}/{iid}/terminate")).status_code == 503
    assert (await client.get(f"{URL}/{iid}")).json()["status"] == "ready"


async def test_terminate_of_a_closed_run_answers_with_the_row(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str) -> None:
    await connect_fake(client)
    iid = (await client.post(URL, json=body(ssh_key))).json()["id"]
    workflows.closed.add(f"allocation-{iid}")
    r = await client.post(f"{URL}/{iid}/terminate")
    assert r.status_code == 202 and r.json() == {"id": iid, "status": "provisioning"}


async def test_temporal_down_is_a_503_and_records_nothing(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                          ssh_key: str) -> None:
    await connect_fake(client)
    workflows.fail_with = WorkflowUnavailable("Temporal at 127.0.0.1:7233 is not reachable")
    r = await client.post(URL, json=body(ssh_key))
    assert r.status_code == 503 and "not reachable" in r.json()["detail"]
    assert (await client.get(URL)).json()["items"] == []  # no row without a workflow


async def test_active_instances_are_the_ones_that_may_bill_with_gpu_price_and_uptime(
        client: httpx.AsyncClient, ssh_key: str, engine) -> None:  # type: ignore[no-untyped-def]
    """The Compute page's "Active cloud instances" in one call: `?status=active`."""
    from datetime import UTC, datetime, timedelta

    await connect_fake(client)
    ids = [(await client.post(URL, json=body(ssh_key, gpu="H100"))).json()["id"] for _ in range(4)]
    ready_at = datetime.now(UTC) - timedelta(hours=2)
    with Session(engine) as s:
        instances.update_instance(s, ids[0], status="ready", instance_type="gpu.h100", price_per_hour=2.5,
                                  gpus_found=[{"index": i, "name": "NVIDIA H100"} for i in range(2)],
                                  ready_at=ready_at)
        instances.update_instance(s, ids[1], status="terminating")
        instances.update_instance(s, ids[2], status="terminated")
        instances.update_instance(s, ids[3], status="failed")
    active = (await client.get(URL, params={"status": "active"})).json()["items"]
    assert {i["id"] for i in active} == {ids[0], ids[1]}
    ready = next(i for i in active if i["id"] == ids[0])
    assert ready["gpu_label"] == "2× NVIDIA H100" and ready["price_per_hour"] == 2.5
    assert ready["instance_type"] == "gpu.h100" and ready["cloud"] == "fakecloud" and ready["project"]
    assert 7000 < ready["uptime_s"] < 7200 + 600  # two hours, give or take this test's own run
    provisioning = (await client.get(f"{URL}/{ids[1]}")).json()
    assert provisioning["uptime_s"] is None and provisioning["gpu_label"] == "1× H100"  # as asked


async def test_new_allocations_and_pools_run_with_the_configured_heartbeat_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ssh_key: str) -> None:
    """GPUPROV_HEARTBEAT_TIMEOUT_S: how long a dead worker's cloud calls go unnoticed, for what the
    API starts from then on (an allocation, a pool's allocations, a job's)."""
    monkeypatch.setenv("GPUPROV_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUPROV_DATABASE_URL", f"sqlite:///{tmp_path / 'api.db'}")
    monkeypatch.setenv("GPUPROV_SECRET_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("GPUPROV_HEARTBEAT_TIMEOUT_S", "7")
    get_settings.cache_clear()
    try:
        deps = deps_from_settings()
    finally:  # nothing of this test's environment stays cached for the next test in this process
        get_settings.cache_clear()
        default_engine.cache_clear()
    assert deps.allocation_timing.heartbeat_timeout_s == deps.job_timing.heartbeat_timeout_s == 7
    deps.workflows = workflows = FakeWorkflows(deps.engine, deps.box)
    transport = httpx.ASGITransport(app=app_serving(deps))
    async with httpx.AsyncClient(transport=transport, base_url="http://api",
                                 headers={"Authorization": f"Bearer {deps.api_token}"}) as client:
        await connect_fake(client)
        r = await client.post(URL, json=body(ssh_key))
        assert r.status_code == 202, r.text
        r = await client.put("/api/compute/pools/web", json={"cloud": "fakecloud", "max": 8, "size": 1})
        assert r.status_code == 202, r.text
    allocation, pool = workflows.starts
    assert allocation.arg.request.timing.heartbeat_timeout_s == 7
    assert pool.arg.timing.heartbeat_timeout_s == 7
    assert Timing().heartbeat_timeout_s == 30  # unset, the default
    deps.engine.dispose()

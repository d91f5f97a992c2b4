"""GET/DELETE /api/compute/providers: the Compute page's "Connected providers" section in one
response, its health read from what the health check recorded (never asked while the page loads)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
from pydantic import BaseModel
from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from activities.connections import ConnectionActivities
from activities.deps import ActivityDeps
from activities.health import HealthActivities
from messages import workflows as wf
from messages.activities import ConnectionIdInput
from messages.allocation import CloudTarget
from messages.connection import DisconnectRequest
from messages.fleet import HostProbe
from messages.health import CheckInput, RecordHealthInput
from store import connections, fleets, ids
from store.models import Instance
from store.secrets import SecretBox
from tests.api.conftest import FakeWorkflows, all_items, connect_fake, make_project, statements

URL = "/api/compute/providers"


class DisconnectingWorkflows(FakeWorkflows):
    """Plays DisconnectWorkflow's first activity (begin_disconnect: the row becomes `removing`)."""

    async def started(self, workflow: str, arg: BaseModel, workflow_id: str) -> None:
        if workflow == wf.DISCONNECT.name:
            assert isinstance(arg, DisconnectRequest)
            conns = ConnectionActivities(activity_deps(self.engine, self.box))
            await asyncio.to_thread(conns.begin_disconnect,
                                    ConnectionIdInput(connection_id=arg.connection_id))


@pytest.fixture
def workflows(engine: sa.Engine, box: SecretBox) -> FakeWorkflows:
    return DisconnectingWorkflows(engine=engine, box=box)


def activity_deps(engine: sa.Engine, box: SecretBox) -> ActivityDeps:
    return ActivityDeps(engine=engine, box=box, installation_id="inst0001")


def add_instance(engine: sa.Engine, connection_id: str, status: str, price: float | None,
                 project: str = "default") -> str:
    allocation_id = ids.new_id()
    with Session(engine) as s:
        s.add(Instance(id=allocation_id, provider="fakecloud", connection_id=connection_id, project=project,
                       workflow_id=f"allocation-{allocation_id}", status=status, price_per_hour=price))
        s.commit()
    return allocation_id


async def health_check(engine: sa.Engine, box: SecretBox, connection_id: str) -> Any:
    """What one HealthWorkflow run does for this connection: the real check and record activities."""
    health = HealthActivities(activity_deps(engine, box))
    check = await ActivityEnvironment().run(health.check_connection, CheckInput(
        target=CloudTarget(connection_id=connection_id, cloud="fakecloud"), timeout_s=10))
    await asyncio.to_thread(health.record_health, RecordHealthInput(checks=[check]))
    return check


async def test_one_response_holds_the_whole_section(client: httpx.AsyncClient, engine: sa.Engine,
                                                    box: SecretBox, workflows: FakeWorkflows) -> None:
    checked = await connect_fake(client)
    fresh = await connect_fake(client)
    for status, price in (("ready", 2.5), ("provisioning", 0.75), ("terminating", None),
                          ("terminated", 9.0), ("failed", 9.0), ("lost", 9.0)):
        add_instance(engine, checked["id"], status, price)
    add_instance(engine, fresh["id"], "ready", 9.0)
    # A row no allocation makes (placement takes only the project's own connections): another
    # project's instance on this connection is not this project's to count.
    add_instance(engine, fresh["id"], "ready", 4.0, project="other")
    before = datetime.now(UTC)
    check = await health_check(engine, box, checked["id"])
    assert check.ok and check.latency_ms is not None

    r = await client.get(URL)
    assert r.status_code == 200 and r.json()["next_cursor"] is None
    rows = {row["id"]: row for row in r.json()["items"]}
    assert list(rows) == [checked["id"], fresh["id"]]  # oldest first
    row = rows[checked["id"]]
    assert {k: row[k] for k in ("kind", "provider", "name", "label", "status", "reason", "latency_ms",
                                "instance_count", "cost_per_hour")} == {
        "kind": "cloud", "provider": "fakecloud", "name": "Fake Cloud", "label": "Fake Cloud",
        "status": "healthy", "reason": None, "latency_ms": check.latency_ms,
        "instance_count": 3, "cost_per_hour": 3.25}  # ready + provisioning + terminating (no price yet)
    assert isinstance(row["tagline"], str)
    assert datetime.fromisoformat(row["checked_at"]) >= before.replace(microsecond=0)
    # Never checked yet: pending, nothing measured; its own instance counted, the other project's not.
    assert {k: rows[fresh["id"]][k] for k in ("status", "checked_at", "latency_ms", "instance_count",
                                              "cost_per_hour")} == {
        "status": "pending", "checked_at": None, "latency_ms": None, "instance_count": 1,
        "cost_per_hour": 9.0}
    # Read from the database: the page started no workflow and called no cloud.
    assert workflows.starts == []
    # Paginated like every list.
    assert [p["id"] for p in await all_items(client, URL, limit=1)] == [checked["id"], fresh["id"]]


async def test_a_failed_check_shows_degraded_with_its_reason(client: httpx.AsyncClient, engine: sa.Engine,
                                                            box: SecretBox) -> None:
    good = await connect_fake(client)
    with Session(engine) as s:  # the account's key was revoked after it connected
        revoked = connections.add_connection(s, box, provider="fakecloud", name="old key",
                                             credentials={"api_key": "revoked"}).id
    for conn in (good["id"], revoked):
        await health_check(engine, box, conn)
    rows = {row["id"]: row for row in (await client.get(URL)).json()["items"]}
    assert (rows[good["id"]]["status"], rows[good["id"]]["reason"]) == ("healthy", None)
    assert (rows[revoked]["status"], rows[revoked]["reason"]) == (
        "degraded", "Fake Cloud refused the API key")
    assert rows[revoked]["checked_at"] is not None and rows[revoked]["label"] == "old key"


async def test_delete_disconnects_and_the_row_shows_removing(client: httpx.AsyncClient, engine: sa.Engine,
                                                            workflows: FakeWorkflows) -> None:
    conn = await connect_fake(client)
    add_instance(engine, conn["id"], "ready", 1.5)
    r = await client.delete(f"{URL}/{conn['id']}")
    assert r.status_code == 202 and r.json() == {"id": conn["id"], "status": "removing"}
    [start] = workflows.starts
    assert (start.workflow, start.workflow_id) == (wf.DISCONNECT.name, f"disconnect-{conn['id']}")
    [row] = (await client.get(URL)).json()["items"]
    assert (row["status"], row["reason"], row["instance_count"]) == (
        "removing", "terminating 1 instance(s) before removal", 1)
    assert (await client.delete(f"{URL}/{conn['id']}")).status_code == 202  # a repeat joins the removal
    assert workflows.runs.count(f"disconnect-{conn['id']}") == 1


async def test_another_projects_provider_is_a_404_and_never_listed(client: httpx.AsyncClient,
                                                                  workflows: FakeWorkflows) -> None:
    mine = await connect_fake(client)
    token = await make_project(client, "vision")
    theirs = {"Authorization": f"Bearer {token}"}
    assert (await client.get(URL, headers=theirs)).json() == {"items": [], "next_cursor": None}
    r = await client.delete(f"{URL}/{mine['id']}", headers=theirs)
    assert r.status_code == 404 and workflows.starts == []
    r = await client.delete(f"{URL}/{mine['id']}", headers={"X-Project": "vision"})  # admin, other project
    assert r.status_code == 404 and workflows.starts == []
    assert [p["id"] for p in (await client.get(URL)).json()["items"]] == [mine["id"]]


def add_fleet(engine: sa.Engine, box: SecretBox, name: str, hosts: list[str],
              project: str = "default") -> str:
    with Session(engine) as s:
        return fleets.save_fleet(s, box, fleet_id=ids.new_id(), project=project, name=name, user="ubuntu",
                                 port=22, hosts=hosts, private_key=FLEET_KEY, bastion=None,
                                 new_host_id=ids.new_id, probe_id="p1").id


def answer(engine: sa.Engine, fleet_id: str, host: str, **probe: Any) -> None:
    """What the probe activity stores for one host."""
    with Session(engine) as s:
        [row] = [h for h in fleets.hosts_of(s, fleet_id) if h.host == host]
        assert fleets.record_probe(s, HostProbe(host_id=row.id, **probe), "p1")


FLEET_KEY = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()


async def test_fleets_are_rows_with_hosts_gpus_and_their_probe_health(
        client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows) -> None:
    cloud = await connect_fake(client)
    rack = add_fleet(engine, box, "rack", ["10.0.0.1", "10.0.0.2", "10.0.0.3"])
    lab = add_fleet(engine, box, "lab", ["10.0.1.1"])
    new = add_fleet(engine, box, "new", ["10.0.2.1"])
    add_fleet(engine, box, "theirs", ["10.0.3.1"], project="other")
    answer(engine, rack, "10.0.0.1", reachable=True, gpu_count=2, gpu_summary="2× H100 (80GB) · 160GB total")
    answer(engine, rack, "10.0.0.2", reachable=True, gpu_count=1)
    answer(engine, rack, "10.0.0.3", reachable=False, reason="connection refused")
    answer(engine, lab, "10.0.1.1", reachable=True, gpu_count=8)

    r = await client.get(URL)
    assert r.status_code == 200
    rows = {row["id"]: row for row in r.json()["items"]}
    assert list(rows) == [cloud["id"], rack, lab, new]  # one list, oldest first
    assert rows[cloud["id"]]["kind"] == "cloud" and rows[cloud["id"]]["host_count"] is None
    fields = ("kind", "provider", "name", "tagline", "label", "status", "reason", "host_count", "gpu_count",
              "instance_count", "cost_per_hour")
    ssh = {"kind": "ssh_fleet", "provider": "ssh", "name": "SSH / On-prem",
           "tagline": "Bring your own GPU servers", "instance_count": None, "cost_per_hour": None}
    assert {k: rows[rack][k] for k in fields} == {
        **ssh, "label": "rack", "status": "degraded", "reason": "unreachable: 10.0.0.3 (connection refused)",
        "host_count": 3, "gpu_count": 3}  # GPUs of the hosts that answered
    assert {k: rows[lab][k] for k in fields} == {
        **ssh, "label": "lab", "status": "healthy", "reason": None, "host_count": 1, "gpu_count": 8}
    assert rows[lab]["checked_at"] is not None
    assert {k: rows[new][k] for k in fields} == {
        **ssh, "label": "new", "status": "pending", "reason": None, "host_count": 1, "gpu_count": 0}
    # Pages run across both kinds, none skipped or repeated.
    assert [p["id"] for p in await all_items(client, URL, limit=1)] == list(rows)
    assert [p["id"] for p in await all_items(client, URL, limit=3)] == list(rows)
    assert workflows.starts == []  # read from the database: no probe, no check started


async def test_the_list_reads_no_sealed_credentials(client: httpx.AsyncClient, engine: sa.Engine,
                                                   box: SecretBox) -> None:
    """The list shows neither a connection's credentials nor a fleet's keys, so it reads neither:
    a page never unseals or even loads them (the ORM's whole rows did)."""
    await connect_fake(client)
    rack = add_fleet(engine, box, "rack", ["10.0.0.1"])
    answer(engine, rack, "10.0.0.1", reachable=True, gpu_count=2)
    with statements(engine) as seen:
        r = await client.get(URL)
    assert r.status_code == 200 and len(r.json()["items"]) == 2
    read = " ".join(statement for statement, _ in seen)
    assert "FROM connection" in read and "FROM fleet" in read and "FROM fleet_host" in read, read
    assert "secret" not in read and "host_key" not in read, read


async def test_delete_of_a_fleet_drops_it_and_starts_nothing(
        client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows) -> None:
    mine = add_fleet(engine, box, "rack", ["10.0.0.1"])
    token = await make_project(client, "vision")
    r = await client.delete(f"{URL}/{mine}", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 404
    r = await client.delete(f"{URL}/{mine}")
    assert r.status_code == 200 and r.json() == {"id": mine, "status": "removed"}
    assert workflows.starts == []  # nothing to terminate: no host is contacted
    assert (await client.get(URL)).json()["items"] == []
    assert (await client.get(f"/api/compute/fleets/{mine}")).status_code == 404
    with Session(engine) as s:
        assert list(fleets.hosts_of(s, mine)) == []
    assert (await client.delete(f"{URL}/{mine}")).status_code == 404

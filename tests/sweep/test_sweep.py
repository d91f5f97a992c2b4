"""SweepWorkflow on the dev server against the simulated clouds: orphans and duplicates go after
their grace period, a live allocation's machine and another installation's stay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client

from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState
from messages.enums import Phase
from messages.ids import allocation_workflow_id, attempt_key
from messages.sweep import SweepSummary, Verdict
from providers.base import Transient
from store import connections
from store.secrets import SecretBox
from tests import simclouds
from tests.eventually import eventually
from tests.sweep.conftest import (
    PUBLIC_KEY,
    TASK_QUEUE,
    actions,
    add_instance,
    alive,
    launch_twin,
    new_allocation_id,
    plant,
    provider,
    side_objects,
    sweep,
)
from tests.workflows.conftest import FAST, settled


def _utc(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=UTC)


async def test_an_orphan_goes_after_its_grace_period_not_before(temporal_client: Client, sweep_worker: None,
                                                                sim: FakeCloudServer, connect: Any,
                                                                sweep_engine: sa.Engine) -> None:
    conn = connect("local")
    allocation = new_allocation_id()
    ref = await plant(sim, "local", allocation)  # our tag, no allocation row

    first = await sweep(temporal_client, grace_s=600)
    assert (first.seen, first.kept, first.removed, first.listed) == (1, 0, [], [conn])
    [seen] = first.waiting
    assert (seen.verdict, seen.allocation_id, seen.machine.ref.instance_id) == (Verdict.ORPHAN, allocation,
                                                                                ref.instance_id)
    assert "unknown to the database" in seen.reason and seen.first_seen and not seen.due
    assert await alive(sim, ref.instance_id) and actions(sweep_engine) == []

    # Swept again and again with a grace of 3 s: it waits (grace counted from the first sighting,
    # kept in the database) until the grace period has passed, then it goes.
    grace = 3.0

    async def removed() -> SweepSummary | None:
        summary = await sweep(temporal_client, grace_s=grace)
        if summary.removed:
            return summary
        [waiting] = summary.waiting
        assert waiting.first_seen == seen.first_seen
        assert await alive(sim, ref.instance_id)
        return None

    summary = await eventually(removed, within=90, what="a sweep to remove the orphan past its grace")
    [done] = summary.removed
    assert (done.verdict, done.allocation_id, done.machine.ref.instance_id) == (Verdict.ORPHAN, allocation,
                                                                                ref.instance_id)
    assert not await alive(sim, ref.instance_id)
    [action] = actions(sweep_engine)
    assert (action.provider, action.instance_id, action.key, action.allocation_id, action.connection_id,
            action.verdict) == ("local", ref.instance_id, ref.key, allocation, conn, "orphan")
    assert "unknown to the database" in action.reason and action.sweep_id.startswith("sweep-test-")
    assert action.first_seen is not None
    assert _utc(action.first_seen) == datetime.fromisoformat(seen.first_seen)
    assert _utc(action.at) - _utc(action.first_seen) >= timedelta(seconds=grace)

    after = await sweep(temporal_client, grace_s=grace)
    assert (after.seen, after.waiting, after.removed) == (0, [], [])


async def test_machines_of_allocations_that_are_over_are_orphans(temporal_client: Client, sweep_worker: None,
                                                                 sim: FakeCloudServer, connect: Any,
                                                                 sweep_engine: sa.Engine) -> None:
    conn = connect("local")
    refs = {}
    for status in ("failed", "terminated", "lost"):
        allocation = new_allocation_id()
        refs[status] = ref = await plant(sim, "local", allocation)
        add_instance(sweep_engine, allocation, connection_id=conn, cloud="local", status=status, key=ref.key)

    summary = await sweep(temporal_client, grace_s=0, keep=True)

    assert {r.machine.ref.instance_id: r.reason.rsplit(" ", 1)[-1] for r in summary.removed} == {
        ref.instance_id: status for status, ref in refs.items()}
    assert all(r.verdict == Verdict.ORPHAN for r in summary.removed)
    assert not any([await alive(sim, ref.instance_id) for ref in refs.values()])
    assert len(actions(sweep_engine)) == 3


async def test_live_allocations_keep_their_machines_and_lose_their_duplicates(
        temporal_client: Client, sweep_worker: None, sim: FakeCloudServer, connect: Any,
        sweep_engine: sa.Engine) -> None:
    conn = connect("local")
    ready, creating = new_allocation_id(), new_allocation_id()
    ready_ref = await plant(sim, "local", ready)
    add_instance(sweep_engine, ready, connection_id=conn, cloud="local", status="ready", key=ready_ref.key,
                 cloud_instance_id=ready_ref.instance_id)
    # Attempt 2's create is in flight (not yet recorded); attempt 1's machine slipped through.
    in_flight = await plant(sim, "local", creating, seq=2)
    earlier = await plant(sim, "local", creating, seq=1)
    add_instance(sweep_engine, creating, connection_id=conn, cloud="local", status="provisioning",
                 key=attempt_key(creating, 2))

    summary = await sweep(temporal_client, grace_s=0)

    assert (summary.seen, summary.kept, summary.waiting, summary.errors) == (3, 2, [], [])
    [dup] = summary.removed
    assert (dup.machine.ref.instance_id, dup.verdict, dup.allocation_id) == (earlier.instance_id,
                                                                             Verdict.DUPLICATE, creating)
    assert await alive(sim, ready_ref.instance_id) and await alive(sim, in_flight.instance_id)
    assert not await alive(sim, earlier.instance_id)
    assert [(a.instance_id, a.verdict) for a in actions(sweep_engine)] == [(earlier.instance_id, "duplicate")]


async def test_a_lambda_twin_of_a_ready_allocation_goes_and_the_allocation_keeps_its_machine(
        temporal_client: Client, sweep_worker: None, sim: FakeCloudServer, connect: Any,
        sweep_engine: sa.Engine) -> None:
    """A real allocation (AllocationWorkflow to ready on simulated Lambda), then a second instance
    under its name: the sweep removes the twin only, and the machine's firewall ruleset stays with it."""
    conn = connect("lambda")
    req = AllocateRequest(allocation_id=new_allocation_id(), connection_id=conn, cloud="lambda", gpu="a10",
                          k3s=False, ssh_public_keys=[PUBLIC_KEY], ports=[8080], timing=FAST)
    handle = await temporal_client.start_workflow(
        wf.ALLOCATION.name, AllocationInput(request=req), id=allocation_workflow_id(req.allocation_id),
        task_queue=TASK_QUEUE, result_type=AllocationState)
    st = await settled(handle)
    assert st.phase == Phase.READY and st.ref is not None
    twin = await launch_twin(sim, st.ref)

    untouched = await sweep(temporal_client, grace_s=0, connection_ids=[conn])
    assert untouched.seen == 2 and untouched.kept == 1
    [dup] = untouched.removed
    assert (dup.machine.ref.instance_id, dup.verdict) == (twin, Verdict.DUPLICATE)
    assert f"machine {st.ref.instance_id}, not this one" in dup.reason
    assert not await alive(sim, twin) and await alive(sim, st.ref.instance_id)
    assert await side_objects(sim, st.ref.key), "the allocation's machine still carries its ruleset"

    again = await sweep(temporal_client, grace_s=0)
    assert (again.seen, again.kept, again.removed, again.waiting) == (1, 1, [], [])

    await handle.execute_update(wf.ALLOCATION.terminate.name, result_type=AllocationState)
    async with provider(sim, "lambda") as p:
        assert await p.list_owned() == []
    assert await side_objects(sim, st.ref.key) == []


async def test_two_connections_to_one_account_act_once_per_machine(
        temporal_client: Client, sweep_worker: None, sim: FakeCloudServer, connect: Any,
        sweep_engine: sa.Engine) -> None:
    first, second = connect("lambda"), connect("lambda")
    refs = [await plant(sim, "lambda", ports=[8080]), await plant(sim, "lambda", ports=[8080])]

    summary = await sweep(temporal_client, grace_s=0)

    assert summary.listed == [first, second] and summary.seen == 2
    assert sorted(r.machine.ref.instance_id for r in summary.removed) == sorted(r.instance_id for r in refs)
    for done in summary.removed:
        assert (done.machine.target.connection_id, done.machine.also_via) == (first, [second])
    rows = actions(sweep_engine)
    assert sorted(a.instance_id for a in rows) == sorted(r.instance_id for r in refs)  # one each
    assert not any([await alive(sim, r.instance_id) for r in refs])
    for ref in refs:
        assert await side_objects(sim, ref.key) == []


@pytest.mark.parametrize("cloud", ["local", "lambda"])
async def test_another_installations_machine_is_never_touched(temporal_client: Client, sweep_worker: None,
                                                              sim: FakeCloudServer, connect: Any,
                                                              sweep_engine: sa.Engine, cloud: str) -> None:
    connect(cloud)
    theirs = await plant(sim, cloud, installation_id="other001")
    ours = await plant(sim, cloud)

    summary = await sweep(temporal_client, grace_s=0)

    assert summary.seen == 1 and [r.machine.ref.instance_id for r in summary.removed] == [ours.instance_id]
    assert await alive(sim, theirs.instance_id)
    assert [a.instance_id for a in actions(sweep_engine)] == [ours.instance_id]


async def test_a_connection_that_does_not_answer_is_reported_and_the_rest_swept(
        temporal_client: Client, sweep_worker: None, sim: FakeCloudServer, connect: Any,
        sweep_engine: sa.Engine, secret_box: SecretBox) -> None:
    good = connect("local")
    with Session(sweep_engine) as s:
        bad = connections.add_connection(s, secret_box, provider="local", name="revoked",
                                         credentials=simclouds.credentials(sim, "local", "revoked-token"),
                                         endpoint=simclouds.endpoint(sim, "local")).id
    ref = await plant(sim, "local")

    summary = await sweep(temporal_client, grace_s=0, keep=True)

    assert summary.listed == [good] and len(summary.failures) == 1 and bad in summary.failures[0]
    assert [r.machine.ref.instance_id for r in summary.removed] == [ref.instance_id]


async def test_a_side_resource_left_without_its_machine_is_released(
        temporal_client: Client, sweep_worker: None, sim: FakeCloudServer, connect: Any,
        sweep_engine: sa.Engine) -> None:
    connect("lambda")
    # A launch refused after its firewall ruleset was made: the ruleset stays, no machine.
    await sim.admin.aio.add_fault("lambda", "create", "server_error", status=503)
    allocation = new_allocation_id()
    with pytest.raises(Transient):
        await plant(sim, "lambda", allocation, ports=[8080])
    key = attempt_key(allocation, 1)
    [left] = await side_objects(sim, key)

    summary = await sweep(temporal_client, grace_s=0)

    [done] = [r for r in summary.removed if r.machine.ref.key == key]
    assert (done.verdict, done.machine.ref.kind) == (Verdict.ORPHAN, "firewall-ruleset")
    assert done.allocation_id == allocation
    assert await side_objects(sim, key) == []
    assert [a.instance_id for a in actions(sweep_engine)] == [done.machine.ref.instance_id] == [left["id"]]

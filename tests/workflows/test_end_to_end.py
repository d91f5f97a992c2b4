"""Allocate and terminate end to end: in-process worker, real adapters (local, lambda), the
simulated clouds over HTTP with real SSH machines."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import WorkflowFailureError

from activities.deps import ActivityDeps
from activities.watch import start_watch
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocationInput, AllocationState, CloudTarget
from messages.enums import Phase
from messages.ids import allocation_workflow_id, watch_workflow_id
from providers.base import OfferQuery
from store.models import Instance
from store.secrets import SecretBox
from tests import recorded, simclouds
from tests.eventually import eventually
from tests.workflows import patch_branches
from tests.workflows.conftest import INSTALLATION, TASK_QUEUE, settled, start_allocate, terminate
from worker import build_worker
from workflows.allocation import CAPACITY_NOTES_PATCH, LAUNCH_QUEUE_PATCH


@pytest.fixture(scope="module")
async def sim(activity_deps: ActivityDeps) -> AsyncIterator[FakeCloudServer]:
    async with FakeCloudServer(boot_delay=0.3, terminate_delay=0.05) as server:
        with simclouds.allowed(activity_deps, server):
            yield server


@pytest.fixture
def connect_sim(sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox) -> Any:
    def add(cloud: str) -> str:
        with Session(db_engine) as s:
            return simclouds.add_connection(s, secret_box, sim, cloud)
    return add


async def owned(sim: FakeCloudServer, cloud: str) -> list[Any]:
    async with simclouds.provider(sim, cloud, installation_id=INSTALLATION) as p:
        return await p.list_owned()


@pytest.mark.parametrize("cloud", ["local", "lambda"])
async def test_allocate_then_terminate_on_the_simulated_clouds(temporal_client: Any, wf_worker: None,
                                                               sim: FakeCloudServer, connect_sim: Any,
                                                               make_request: Any, cloud: str) -> None:
    # k3s on: skipped with a note on local; over SSH on Lambda (its simulated image has k3s).
    req = make_request(cloud=cloud, connection_id=connect_sim(cloud), k3s=True,
                       gpu=None if cloud == "local" else "a10")
    st = await settled(await start_allocate(temporal_client, req))

    assert st.phase == Phase.READY and st.host is not None and st.host.startswith("127.")
    if cloud == "local":
        assert st.gpus == [] and any(n.startswith("k3s skipped") for n in st.notes)
        assert st.offer is not None and st.offer.spot is False  # cheaper spot exists, not asked for
    else:
        assert st.offer is not None and st.offer.gpu is not None
        assert len(st.gpus) == st.offer.gpu.count and "A10" in st.gpus[0].name
        assert not any("k3s" in n for n in st.notes)  # installed and checked, not skipped
    assert [r.key for r in await owned(sim, cloud)] == [st.attempts[-1].key]

    await terminate(temporal_client, req.allocation_id)
    assert await owned(sim, cloud) == []
    if cloud == "lambda":  # a cloud with a launch rate: the create on its launch queue (LAUNCH_QUEUE_PATCH)
        await recorded.replays(temporal_client, allocation_workflow_id(req.allocation_id))
    mine = [m for m in sim.admin.machines() if m["id"] == st.ref.instance_id]  # type: ignore[union-attr]
    assert len(mine) == 1 and mine[0]["status"] == "terminated"


async def test_a_run_from_before_the_launch_queue_patch_creates_on_the_workflows_own_queue(
        temporal_client: Any, activity_deps: ActivityDeps, fake_registered: None, sim: FakeCloudServer,
        connect_sim: Any, make_request: Any) -> None:
    """LAUNCH_QUEUE_PATCH's old branch, end to end on simulated Lambda (a cloud with a launch rate),
    as the Lambda run above: the create on the workflow's own task queue, no marker. With
    GPUPROV_RECORD_HISTORIES=1 its history goes to recorded.PREPATCH (histories/README.md)."""
    queue = f"{TASK_QUEUE}-prepatch"  # its own worker: the session's one (wf_worker) takes the new branch
    worker = build_worker(temporal_client, activity_deps, task_queue=queue,
                          patch_activation_callback=patch_branches.fake_worker_before(LAUNCH_QUEUE_PATCH))
    req = make_request(cloud="lambda", connection_id=connect_sim("lambda"), k3s=True, gpu="a10")
    async with worker:
        handle = await temporal_client.start_workflow(
            wf.ALLOCATION.name, AllocationInput(request=req), id=allocation_workflow_id(req.allocation_id),
            task_queue=queue, result_type=AllocationState)
        st = await settled(handle)
        assert st.phase == Phase.READY and st.host is not None and st.host.startswith("127.")
        assert [r.key for r in await owned(sim, "lambda")] == [st.attempts[-1].key]
        await terminate(temporal_client, req.allocation_id)
        assert await owned(sim, "lambda") == []
        [history] = await recorded.replays(temporal_client, allocation_workflow_id(req.allocation_id),
                                           into=recorded.PREPATCH)
    assert patch_branches.creates(history) == [("lambda", queue)]
    assert patch_branches.launch_queue_old_branch(history)


async def test_k3s_failure_compensates_with_the_reason(temporal_client: Any, wf_worker: None,
                                                       sim: FakeCloudServer, connect_sim: Any,
                                                       make_request: Any) -> None:
    """No k3s and no internet: the installer's download fails, the machine is torn down, and the
    reason says why (a pipe would have hidden the failed download)."""
    from temporalio.client import WorkflowFailureError

    req = make_request(cloud="lambda", connection_id=connect_sim("lambda"), k3s=True, gpu="a10")
    handle = await start_allocate(temporal_client, req)
    # Remove the image's k3s as soon as the machine exists, so the installer must download.
    async def image_k3s() -> Path | None:
        live = [m for m in await sim.admin.aio.live_machines()
                if req.allocation_id in (m.get("name") or "") and m.get("home")]
        k3s = Path(live[0]["home"]) / "bin" / "k3s" if live else None
        return k3s if k3s is not None and k3s.exists() else None

    (await eventually(image_k3s, within=30, what="the machine's home with the image's k3s")).unlink()
    with pytest.raises(WorkflowFailureError) as info:
        await settled(handle)
    assert "k3s" in str(info.value.cause)
    assert "cannot download the k3s installer from http://127.0.0.1:9/" in str(info.value.cause)
    st = await handle.query(wf.ALLOCATION.state.name, result_type=AllocationState)
    assert st.attempts[-1].outcome == "failed" and "k3s" in (st.attempts[-1].reason or "")
    assert await owned(sim, "lambda") == []


async def test_a_machine_killed_while_ready_is_shown_lost_within_two_watch_intervals(
        temporal_client: Any, wf_worker: None, sim: FakeCloudServer, connect_sim: Any, make_request: Any,
        db_engine: sa.Engine) -> None:
    interval = 3.0
    connection = connect_sim("local")
    await start_watch(temporal_client, TASK_QUEUE, connection, interval)
    req = make_request(cloud="local", connection_id=connection)
    handle = await start_allocate(temporal_client, req)
    st = await settled(handle)
    assert st.ref is not None

    killed_at = datetime.now(UTC)
    sim.admin.kill(st.ref.instance_id)  # the cloud now reports it broken (status error); it still bills

    final = await asyncio.wait_for(handle.result(), 60)
    assert final.phase == Phase.LOST and "error" in (final.error or ""), final
    signalled = [e.event_time.ToDatetime(tzinfo=UTC) async for e in handle.fetch_history_events()
                 if e.HasField("workflow_execution_signaled_event_attributes")]
    assert len(signalled) == 1 and (signalled[0] - killed_at).total_seconds() <= 2 * interval, signalled
    with Session(db_engine) as s:
        row = s.get(Instance, req.allocation_id)
        assert row is not None and row.status == "lost" and row.error == final.error
    assert await owned(sim, "local") == []  # the broken machine was terminated: nothing bills
    watch = temporal_client.get_workflow_handle(watch_workflow_id(connection))
    await watch.signal(wf.WATCH.stop.name)
    await asyncio.wait_for(watch.result(), 60)
    await recorded.replays(temporal_client, watch.id, handle.id)


async def test_across_clouds_capacity_everywhere_on_one_lands_on_the_next(
        temporal_client: Any, wf_worker: None, sim: FakeCloudServer, connect_sim: Any,
        make_request: Any) -> None:
    """clouds local + lambda, every local create refused for capacity: each local offer is tried once
    (a capacity error blocks only that type in that region), then Lambda's cheapest offer lands."""
    local, lam = connect_sim("local"), connect_sim("lambda")
    targets = [CloudTarget(connection_id=local, cloud="local"),
               CloudTarget(connection_id=lam, cloud="lambda")]
    sim.admin.add_fault("local", "create", "capacity", times=-1)
    try:
        req = make_request(cloud="local", connection_id=local, targets=targets)
        st = await settled(await start_allocate(temporal_client, req))
        assert st.phase == Phase.READY and st.offer is not None and st.offer.provider == "lambda"
        local_tries = [a for a in st.attempts if a.offer.provider == "local"]
        assert local_tries and all(a.outcome == "capacity" and a.reason for a in local_tries)
        tried = {(a.offer.instance_type, a.offer.region) for a in local_tries}
        assert len(tried) == len(local_tries)  # each local type/region once, none skipped wholesale
        async with simclouds.provider(sim, "lambda", installation_id=INSTALLATION) as p:
            # No region asked: Lambda is searched in its default regions (the US ones).
            defaults = type(p).capabilities.default_regions
            cheapest = [o for o in await p.offers(OfferQuery(spot=False)) if o.region in defaults][0]
        assert (st.offer.instance_type, st.offer.region) == (cheapest.instance_type, cheapest.region)
        assert st.attempts[-1].outcome == "created" and st.target == targets[1]
        await terminate(temporal_client, req.allocation_id)

        sim.admin.add_fault("lambda", "create", "capacity", times=-1)
        both = make_request(cloud="local", connection_id=local, targets=targets)
        with pytest.raises(WorkflowFailureError) as info:
            await settled(await start_allocate(temporal_client, both))
        message = str(info.value.cause)
        assert "local" in message and "lambda" in message and "capacity" in message, message
        state = await temporal_client.get_workflow_handle(f"allocation-{both.allocation_id}").query(
            wf.ALLOCATION.state.name, result_type=AllocationState)
        assert {a.offer.provider for a in state.attempts} == {"local", "lambda"}
        assert all(a.outcome == "capacity" and a.reason for a in state.attempts)
    finally:
        sim.admin.clear_faults()


async def test_a_second_allocation_tries_the_region_remembered_sold_out_last(
        temporal_client: Any, wf_worker: None, sim: FakeCloudServer, connect_sim: Any,
        make_request: Any) -> None:
    """Capacity memory across allocations (store/capacity.py): Lambda's cheapest offer's region
    refuses every create while its offers still show stock. The first allocation meets the refusal
    and lands in the next region; the second plans that region last, says so in its notes, and
    lands at its first create (CAPACITY_NOTES_PATCH: the note's branch)."""
    lam = connect_sim("lambda")
    async with simclouds.provider(sim, "lambda", installation_id=INSTALLATION) as p:
        defaults = type(p).capabilities.default_regions
        first = [o for o in await p.offers(OfferQuery(gpu="a10", spot=False)) if o.region in defaults][0]
    sim.admin.add_fault("lambda", "create", "capacity", region=first.region, times=-1)
    try:
        one = make_request(cloud="lambda", connection_id=lam, gpu="a10")
        st1 = await settled(await start_allocate(temporal_client, one))
        assert st1.phase == Phase.READY and st1.offer is not None and st1.offer.region != first.region
        assert [a.outcome for a in st1.attempts] == ["capacity", "created"]
        assert not any(n.startswith("tried last") for n in st1.notes)

        two = make_request(cloud="lambda", connection_id=lam, gpu="a10")
        st2 = await settled(await start_allocate(temporal_client, two))
        assert st2.phase == Phase.READY and [a.outcome for a in st2.attempts] == ["created"]
        [note] = [n for n in st2.notes if n.startswith("tried last")]
        assert f"@{first.region}" in note and "refused for capacity 1×" in note, note
        for req in (one, two):
            await terminate(temporal_client, req.allocation_id)
        histories = await recorded.replays(temporal_client, allocation_workflow_id(one.allocation_id),
                                           allocation_workflow_id(two.allocation_id))
        assert [CAPACITY_NOTES_PATCH in patch_branches.patch_markers(h) for h in histories] == [False, True]
    finally:
        sim.admin.clear_faults()

"""AllocateWorkflow on the dev server with real activities against FakeInMemoryProvider."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError, CancelledError

from activities.deps import ActivityDeps
from messages import workflows as wf
from messages.allocation import AllocationState
from messages.enums import Phase
from messages.ids import attempt_key
from providers.credentials import ApiKeyCredentials
from store import instances
from store.db import session_scope
from store.models import Instance
from tests.eventually import eventually
from tests.fakes import FakeCloud, FakeInMemoryProvider
from tests.workflows.conftest import INSTALLATION, settled, start_allocate, wait_phase
from workflows import search_attributes as sa_keys


async def owned() -> list[Any]:
    creds = ApiKeyCredentials(api_key="good")  # type: ignore[arg-type]
    return await FakeInMemoryProvider(creds, installation_id=INSTALLATION).list_owned()


def row(engine: sa.Engine, allocation_id: str) -> Instance:
    with Session(engine) as s:
        r = s.get(Instance, allocation_id)
        assert r is not None
        return r


async def test_happy_path_ready_with_gpus(temporal_client: Client, fake_cloud: FakeCloud, make_request: Any,
                                          db_engine: sa.Engine) -> None:
    req = make_request(gpu="a10", gpu_count=2)
    handle = await start_allocate(temporal_client, req)
    st = await settled(handle)

    assert st.phase == Phase.READY
    assert st.offer is not None and st.offer.instance_type == "gpu.2x"
    assert [g.name for g in st.gpus] == ["NVIDIA A10", "NVIDIA A10"]
    assert st.gpus[0].memory_mib == 24 * 1024 and st.gpus[0].driver_version is None  # "[Not Supported]"
    assert [(a.outcome, a.key) for a in st.attempts] == [("created", attempt_key(req.allocation_id, 1))]
    assert any("k3s skipped" in n for n in st.notes)
    # the installation's own key was added to the machine, next to the user's
    machine = fake_cloud.machines[st.ref.instance_id]  # type: ignore[union-attr]
    assert len(machine.spec.ssh_public_keys) == 2 and machine.spec.owner.installation_id == INSTALLATION

    # The state query shows ready as soon as the workflow enters it; the row follows once the
    # record activity ran.
    r = await eventually(lambda: row(db_engine, req.allocation_id), until=lambda r: r.status == "ready",
                         within=30, what="the instance row ready")
    assert (r.status, r.phase, r.cloud_instance_id, r.instance_type) == ("ready", "ready", st.ref.instance_id,
                                                                           "gpu.2x")
    assert r.gpus_found is not None and len(r.gpus_found) == 2 and r.ready_at is not None
    desc = await handle.describe()
    assert desc.typed_search_attributes.get(sa_keys.PHASE) == "ready"
    assert desc.typed_search_attributes.get(sa_keys.PROVIDER) == "fake"


async def test_cpu_machine_has_no_gpus_and_that_is_a_fact(temporal_client: Client, fake_cloud: FakeCloud,
                                                          make_request: Any) -> None:
    st = await settled(await start_allocate(temporal_client, make_request()))  # cheapest: cpu.small
    assert st.phase == Phase.READY and st.offer is not None and st.offer.gpu is None
    assert st.gpus == []


async def test_capacity_fails_over_and_records_reasons(temporal_client: Client, fake_cloud: FakeCloud,
                                                       make_request: Any, db_engine: sa.Engine) -> None:
    # gpu.1x@r1 (cheapest) has no capacity in region r1: gpu.2x@r1 is skipped, r2 is next.
    fake_cloud.add_fault("create", "capacity", scope="fake/r1")
    req = make_request(gpu="a10")
    st = await settled(await start_allocate(temporal_client, req))

    assert st.phase == Phase.READY
    assert [(a.offer.instance_type, a.offer.region, a.outcome) for a in st.attempts] == [
        ("gpu.1x", "r1", "capacity"), ("gpu.1x", "r2", "created")]
    assert "no capacity" in (st.attempts[0].reason or "") and "fake/r1" in (st.attempts[0].reason or "")
    assert st.attempts[1].key == attempt_key(req.allocation_id, 2)
    with session_scope(db_engine) as session:
        recorded = instances.attempts_of(session, req.allocation_id)
    assert [(a.seq, a.outcome) for a in recorded] == [(1, "capacity"), (2, "created")]
    assert len(await owned()) == 1


async def test_capacity_everywhere_fails_with_the_history(temporal_client: Client, fake_cloud: FakeCloud,
                                                          make_request: Any, db_engine: sa.Engine) -> None:
    fake_cloud.add_fault("create", "capacity", times=-1)
    fake_cloud.add_fault("create", "quota", times=0)  # inert
    req = make_request(gpu="a10", gpu_count=1)
    handle = await start_allocate(temporal_client, req)
    with pytest.raises(WorkflowFailureError) as info:
        await settled(handle)
    assert isinstance(info.value.cause, ApplicationError) and info.value.cause.type == "NoCapacity"
    st = await handle.query(wf.ALLOCATION.state.name, result_type=AllocationState)
    assert [a.outcome for a in st.attempts] == ["capacity", "capacity"]
    assert row(db_engine, req.allocation_id).status == "failed"
    assert await owned() == []


async def test_failure_after_create_compensates(temporal_client: Client, fake_cloud: FakeCloud,
                                                make_request: Any, db_engine: sa.Engine) -> None:
    fake_cloud.add_fault("create", "die_at_boot")
    req = make_request()
    handle = await start_allocate(temporal_client, req)
    with pytest.raises(WorkflowFailureError) as info:
        await settled(handle)
    assert isinstance(info.value.cause, ApplicationError) and info.value.cause.type == "InstanceFailed"
    assert await owned() == []
    assert len(fake_cloud.machines) == 1  # it was made, then torn down
    st = await handle.query(wf.ALLOCATION.state.name, result_type=AllocationState)
    assert st.phase == Phase.FAILED and st.attempts[0].outcome == "failed"
    r = row(db_engine, req.allocation_id)
    assert r.status == "failed" and "failed" in (r.error or "")


async def test_a_machine_the_cloud_ends_while_booting_fails_with_the_clouds_reason(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    """Modal ends a sandbox whose lifetime (--max-hours) runs out before it is ready: the allocation's
    error says so, where it said only that the machine disappeared."""
    fake_cloud.add_fault("create", "end_at_boot", detail="timeout: the sandbox reached its lifetime limit")
    req = make_request()
    with pytest.raises(WorkflowFailureError) as info:
        await settled(await start_allocate(temporal_client, req))
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "InstanceGone"
    assert cause.message == "instance m1 ended while booting: timeout: the sandbox reached its lifetime limit"
    assert await owned() == []
    r = await eventually(lambda: row(db_engine, req.allocation_id), until=lambda r: r.status == "failed",
                         within=30, what="the instance row failed")
    assert r.error is not None and "reached its lifetime limit" in r.error


async def test_a_gpu_check_that_fails_once_is_retried_on_the_same_machine(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    """The SSH steps are one activity (SET_UP_MACHINE): its retry logs in again, re-checks the
    GPUs and reaches ready on the machine it has — no second machine, every step's phase shown."""
    fake_cloud.gpu_probe_failures = 1
    req = make_request(gpu="a10")
    st = await settled(await start_allocate(temporal_client, req))
    assert st.phase == Phase.READY and len(st.gpus) == 1 and len(fake_cloud.machines) == 1

    def phases_now() -> list[str]:
        with session_scope(db_engine) as s:
            return [e.phase for e in instances.events_of(s, req.allocation_id)]

    # The query shows ready before the last record activity writes it (as in the test below): wait for it.
    phases = await eventually(phases_now, until=lambda phases: "ready" in phases, within=30,
                              what="the ready event recorded")
    assert phases[phases.index("ssh"):] == ["ssh", "k3s", "gpu_check", "ssh", "k3s", "gpu_check", "ready"]


async def test_a_gpu_check_that_keeps_failing_fails_the_allocation_and_removes_the_machine(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    fake_cloud.gpu_probe_failures = 100
    req = make_request(gpu="a10")
    handle = await start_allocate(temporal_client, req)
    with pytest.raises(WorkflowFailureError) as info:
        await settled(handle)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "GpuCheckFailed"
    assert "nvidia-smi failed (exit 9)" in cause.message and "NVIDIA driver" in cause.message
    assert fake_cloud.gpu_probe_failures == 97  # the activity's three attempts, then compensation
    assert await owned() == [] and len(fake_cloud.machines) == 1
    r = row(db_engine, req.allocation_id)
    assert r.status == "failed" and "nvidia-smi failed" in (r.error or "")


async def test_lost_create_response_makes_one_machine(temporal_client: Client, fake_cloud: FakeCloud,
                                                      make_request: Any) -> None:
    fake_cloud.add_fault("create", "lose_response")
    st = await settled(await start_allocate(temporal_client, make_request()))
    assert st.phase == Phase.READY
    assert fake_cloud.create_calls == 2 and len(fake_cloud.machines) == 1


async def test_bad_request_fails_validation_with_the_reason(temporal_client: Client, fake_cloud: FakeCloud,
                                                            make_request: Any, db_engine: sa.Engine) -> None:
    req = make_request(region="mars-1")
    handle = await start_allocate(temporal_client, req)
    with pytest.raises(WorkflowFailureError) as info:
        await settled(handle)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "Unsupported" and cause.non_retryable
    assert "no region 'mars-1'" in cause.message
    assert fake_cloud.create_calls == 0
    r = row(db_engine, req.allocation_id)
    assert r.status == "failed" and "mars-1" in (r.error or "")


@pytest.mark.parametrize("phase", [Phase.CREATE, Phase.WAIT_RUNNING, Phase.SSH, Phase.GPU_CHECK])
async def test_cancel_at_every_phase_leaves_nothing(temporal_client: Client, fake_cloud: FakeCloud,
                                                    make_request: Any, phase: Phase,
                                                    db_engine: sa.Engine) -> None:
    # Hold the workflow in `phase` long enough to cancel it there.
    if phase == Phase.CREATE:
        fake_cloud.add_fault("create", "latency", when="after", seconds=2)
    fake_cloud.boot_delay = 30 if phase == Phase.WAIT_RUNNING else 0
    fake_cloud.ssh_delay = 30 if phase == Phase.SSH else 0
    fake_cloud.gpu_probe_delay = 30 if phase == Phase.GPU_CHECK else 0
    req = make_request(gpu="a10")
    handle = await start_allocate(temporal_client, req)
    if phase == Phase.GPU_CHECK:  # a step inside SET_UP_MACHINE: its mark on the row shows it
        def phase_now() -> str | None:
            with Session(db_engine) as s:
                r = s.get(Instance, req.allocation_id)
                return r.phase if r is not None else None
        await eventually(phase_now, until=lambda p: p == phase, within=30, what="the row in gpu_check")
    else:
        await wait_phase(handle, phase)
    # in CREATE: once the cloud has acted on it, answer still held back
    await eventually(lambda: fake_cloud.machines, within=30, what="the cloud to make the machine")
    await handle.cancel()
    with pytest.raises(WorkflowFailureError) as info:
        await settled(handle)
    assert isinstance(info.value.cause, CancelledError)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert await owned() == []
    assert len(fake_cloud.machines) == 1
    st = await handle.query(wf.ALLOCATION.state.name, result_type=AllocationState)
    assert st.attempts[0].outcome == "cancelled" and st.phase == Phase.FAILED
    assert row(db_engine, req.allocation_id).status == "failed"


async def test_one_adapter_per_connection_serves_every_activity(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any,
        activity_deps: ActivityDeps) -> None:
    """Clients that live: the adapter (and its HTTP pool and TLS context) is built once per
    connection per worker, not per activity."""
    first = make_request()
    await settled(await start_allocate(temporal_client, first))
    builds = activity_deps.providers.builds
    assert builds >= 1
    for _ in range(3):  # ~15 more cloud activities on the same connection
        again = make_request(connection_id=first.connection_id)
        await settled(await start_allocate(temporal_client, again))
    assert activity_deps.providers.builds == builds


async def test_a_changed_connection_gets_a_new_adapter() -> None:
    from activities.deps import ProviderCache
    from store.models import Connection

    cache, built = ProviderCache(), []

    def build(r: Connection) -> Any:
        built.append(r.secret)
        return FakeInMemoryProvider(ApiKeyCredentials(api_key="good"), installation_id="i")  # type: ignore[arg-type]

    row_v1 = Connection(id="c1", provider="fake", name="n", secret=b"sealed-1")
    a = cache.get(row_v1, build)
    assert cache.get(Connection(id="c1", provider="fake", name="n", secret=b"sealed-1"), build) is a
    b = cache.get(Connection(id="c1", provider="fake", name="n", secret=b"sealed-2"), build)  # re-keyed
    moved = Connection(id="c1", provider="fake", name="n", secret=b"sealed-2", endpoint="http://e")
    c = cache.get(moved, build)
    assert len({id(a), id(b), id(c)}) == 3 and built == [b"sealed-1", b"sealed-2", b"sealed-2"]
    await cache.aclose()


@pytest.fixture
def fake_capabilities(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Set capability fields of the fake cloud for one test (the worker reads them per allocation)."""
    def set_caps(**fields: Any) -> None:
        monkeypatch.setattr(FakeInMemoryProvider, "capabilities",
                            FakeInMemoryProvider.capabilities.model_copy(update=fields))
    return set_caps


async def test_a_boot_that_never_finishes_fails_over_to_the_next_offer(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, fake_capabilities: Any) -> None:
    fake_capabilities(boot_timeout_s=3)
    fake_cloud.add_fault("create", "stuck_booting")  # the first machine stays pending for ever
    req = make_request(gpu="a10", gpu_count=1)
    st = await settled(await start_allocate(temporal_client, req))

    assert st.phase == Phase.READY
    assert [(a.offer.region, a.outcome) for a in st.attempts] == [("r1", "boot_timeout"), ("r2", "created")]
    assert "not running after 3s" in (st.attempts[0].reason or "")
    stuck = next(m for m in fake_cloud.machines.values() if m.offer.region == "r1")
    assert stuck.state == "terminated"  # torn down, not left billing
    assert [r.region for r in await owned()] == ["r2"]


@pytest.mark.parametrize("window", [0.0, 15.0])
async def test_a_create_that_lands_late_is_found_not_launched_again(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, fake_capabilities: Any,
        window: float) -> None:
    """The create's answer never comes (a timeout), yet the cloud makes the machine 3 s later. A
    cloud without an idempotency token gets a second machine from a naive retry (window 0: the
    check below proves it can tell); with the cloud's in-flight window the retry waits and finds it."""
    fake_capabilities(create_in_flight_s=window)
    fake_cloud.add_fault("create", "lands_late", seconds=3)
    req = make_request()
    st = await settled(await start_allocate(temporal_client, req))

    def made() -> list[Any]:
        return [m for m in fake_cloud.machines.values() if m.spec.owner.allocation_id == req.allocation_id]

    if window == 0:
        # What the window prevents: the late one lands beside the retry's, unknown to the workflow.
        await eventually(lambda: len(made()) == 2, within=30, what="the late create beside the retry's")
        return
    assert st.phase == Phase.READY and len(made()) == 1 and st.ref is not None
    assert st.ref.instance_id == made()[0].ref.instance_id


async def test_every_phase_is_recorded_in_order_without_an_activity_each(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    req = make_request(gpu="a10")
    handle = await start_allocate(temporal_client, req)
    await settled(handle)

    def events_now() -> list[tuple[str, str]]:
        with session_scope(db_engine) as s:
            return [(e.status, e.phase) for e in instances.events_of(s, req.allocation_id)]

    # The state query shows ready as soon as the workflow enters it; the last record activity
    # writes the ready event right after: wait for it (bounded), then check the whole sequence.
    events = await eventually(events_now, until=lambda events: any(phase == "ready" for _, phase in events),
                              within=30, what="the ready event recorded")
    assert [p for _, p in events] == ["validate", "plan", "create", "wait_running", "ssh", "k3s", "gpu_check",
                                      "ready"]
    assert events[-1] == ("ready", "ready") and {s for s, _ in events[:-1]} == {"provisioning"}
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name
                 async for e in handle.fetch_history_events()
                 if e.HasField("activity_task_scheduled_event_attributes")]
    # Phases ride on the other activities, and so do the row at the start (on validate) and the
    # machine's id after create (on wait_running, RECORDS_RIDE_PATCH): one record activity, ready's.
    # Validate runs as a local activity and the SSH steps as one (FEWER_TRIPS_PATCH).
    assert scheduled == ["plan_allocation", "create_instance", "wait_running", "set_up_machine",
                         "record_allocation"], scheduled


async def test_a_booting_machines_id_is_on_its_row_before_it_runs(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    """The snapshot after create rides on WAIT_RUNNING, written before its first poll: a machine
    that boots for long is on its row all along (the watch, the sweep and the API read it)."""
    fake_cloud.boot_delay = 3600
    req = make_request()
    handle = await start_allocate(temporal_client, req)

    def phase_and_machine() -> tuple[str | None, str | None]:
        with Session(db_engine) as s:
            r = s.get(Instance, req.allocation_id)
            return (r.phase, r.cloud_instance_id) if r is not None else (None, None)

    phase, machine = await eventually(phase_and_machine, until=lambda pm: pm[1] is not None, within=30,
                                      what="the machine's id on its row")
    (made,) = [m for m in fake_cloud.machines.values() if m.spec.owner.allocation_id == req.allocation_id]
    assert machine == made.ref.instance_id and phase in ("create", "wait_running")
    assert await eventually(phase_and_machine, until=lambda pm: pm[0] == "wait_running", within=30,
                            what="the wait recorded") == ("wait_running", machine)
    st = await handle.execute_update(wf.ALLOCATION.terminate.name, result_type=AllocationState)
    assert st.phase == Phase.TERMINATED


async def test_the_ready_update_answers_once_ready_or_ended(temporal_client: Client, fake_cloud: FakeCloud,
                                                            make_request: Any) -> None:
    """A client's long poll: no polling of the state query."""
    ok = await start_allocate(temporal_client, make_request())
    st = await ok.execute_update(wf.ALLOCATION.ready.name, result_type=AllocationState)
    assert st.phase == Phase.READY and st.ref is not None

    fake_cloud.add_fault("create", "die_at_boot")
    failing = await start_allocate(temporal_client, make_request())
    st = await failing.execute_update(wf.ALLOCATION.ready.name, result_type=AllocationState)
    assert st.phase == Phase.FAILED and "failed" in (st.error or "")

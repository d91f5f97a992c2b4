"""Lambda's in-flight window, end to end (the real AllocationWorkflow on the Temporal dev server, an
in-process worker, the adapter, the simulated Lambda and its fault injection).

A create that fails — or whose worker dies — before its launch request left sent nothing: with a
window of an hour its retry still launches at once (the send is recorded as the POST leaves, not
when the create starts). A launch that lands after the window beside the retry's machine is a twin
under the allocation's key: the next round of the connection's watch terminates it and leaves the
allocation's own machine (rounds counted, not seconds)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import ActivityEnvironment

from activities.deps import ActivityDeps
from activities.watch import WatchActivities
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id, attempt_key
from messages.watch import WatchInput, WatchReport
from providers.lambda_ import LambdaProvider
from providers.rest import REQUEST_TIMEOUT_ENV
from store.models import CreateSend, Instance
from store.secrets import SecretBox
from tests import simclouds
from tests.lambda_.conftest import PUBLIC
from tests.processes import until
from tests.workflows.conftest import settled, terminate
from worker import GpuprovWorker, build_worker

INSTALLATION = "lamflit1"
FAST = Timing(heartbeat_timeout_s=3, poll_interval_s=0.2, call_timeout_s=30, boot_timeout_s=60,
              ssh_timeout_s=20, k3s_timeout_s=30, max_retry_interval_s=1)


class Worker:
    """This module's in-process worker on a queue of its own, stoppable mid-activity."""

    def __init__(self, client: Client, deps: ActivityDeps) -> None:
        self.client, self.deps, self.queue = client, deps, f"lambda-flight-{uuid.uuid4().hex[:8]}"
        self.worker: GpuprovWorker | None = None
        self._run: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.worker = build_worker(self.client, self.deps, task_queue=self.queue,
                                   graceful_shutdown_timeout=timedelta(0))
        self._run = asyncio.create_task(self.worker.run())

    async def stop(self) -> None:
        """At once: its running activities are interrupted mid-call, as a dead worker's are."""
        assert self.worker is not None and self._run is not None
        await self.worker.shutdown()
        await asyncio.gather(self._run, return_exceptions=True)
        self.worker = self._run = None


@pytest.fixture(scope="module")
async def worker(temporal_client: Client, db_engine: sa.Engine, secret_box: SecretBox,
                 lambda_sim: FakeCloudServer) -> AsyncIterator[Worker]:
    deps = ActivityDeps(engine=db_engine, box=secret_box, installation_id=INSTALLATION,
                        client=temporal_client, allowed_endpoints=simclouds.endpoints(lambda_sim))
    w = Worker(temporal_client, deps)
    await w.start()
    try:
        yield w
    finally:
        if w.worker is not None:
            await w.stop()


def window(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Lambda's in-flight window for this test (the worker reads it at each create)."""
    monkeypatch.setattr(LambdaProvider, "capabilities",
                        LambdaProvider.capabilities.model_copy(update={"create_in_flight_s": seconds}))


async def start(worker: Worker, sim: FakeCloudServer, db_engine: sa.Engine,
                secret_box: SecretBox) -> tuple[str, str, WorkflowHandle[Any, AllocationState]]:
    with Session(db_engine) as s:  # a connection of its own: a fresh adapter (the request timeout)
        connection = simclouds.add_connection(s, secret_box, sim, "lambda")
    allocation_id = f"fl-{uuid.uuid4().hex[:8]}"
    req = AllocateRequest(allocation_id=allocation_id, connection_id=connection, cloud="lambda",
                          region="us-east-1", gpu="a10", k3s=False, ssh_public_keys=[PUBLIC], timing=FAST)
    handle = await worker.client.start_workflow(
        wf.ALLOCATION.name, AllocationInput(request=req), id=allocation_workflow_id(allocation_id),
        task_queue=worker.queue, result_type=AllocationState)
    return connection, allocation_id, handle


def made(sim: FakeCloudServer, allocation_id: str) -> list[dict[str, Any]]:
    """Every machine the simulated Lambda launched for the allocation (terminated ones too): the
    simulation's record of the launches that reached it."""
    prefix = f"gpuprov-{INSTALLATION}-gp-{allocation_id}-"
    return [m for m in sim.admin.machines() if str(m.get("name") or "").startswith(prefix)]


def send_of(db_engine: sa.Engine, key: str) -> CreateSend | None:
    with Session(db_engine) as s:
        return s.get(CreateSend, key)


async def drawn(sim: FakeCloudServer) -> bool:
    """The one-shot fault was drawn: the call it hit has reached the simulation."""
    return not await sim.admin.aio.faults()


@pytest.mark.parametrize("how", ["in-doubt-error", "worker-dies"])
async def test_a_create_that_fails_before_its_launch_does_not_wait_the_window(
        worker: Worker, sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox,
        monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Before the launch, the create registers the machine's SSH key: that call fails with no
    answer (a gateway's 502: in doubt), or hangs while the worker dies. An hour's window: were the
    send recorded as the create started, the retry would wait it out (settled() gives up after 60 s)."""
    window(monkeypatch, 3600.0)
    if how == "in-doubt-error":
        sim.admin.add_fault("lambda", "ssh_keys", "server_error", status=502)
    else:
        sim.admin.add_fault("lambda", "ssh_keys", "latency", seconds=60)
    _, allocation_id, handle = await start(worker, sim, db_engine, secret_box)
    if how == "worker-dies":
        await until(lambda: drawn(sim), 30, "the create's SSH key call held by the simulation")
        assert made(sim, allocation_id) == []  # the worker dies before the launch left
        await worker.stop()
        await worker.start()

    state = await settled(handle)

    assert state.phase == Phase.READY, state
    assert await drawn(sim), "the fault hit the create"
    launched = made(sim, allocation_id)
    assert len(launched) == 1 and state.ref is not None and state.ref.instance_id == launched[0]["id"]
    assert [a.key for a in state.attempts] == [attempt_key(allocation_id, 1)]  # the same attempt, retried
    send = send_of(db_engine, attempt_key(allocation_id, 1))
    assert send is not None and send.answered_at is not None and send.doubted_at is None, send
    assert (await terminate(worker.client, allocation_id)).phase == Phase.TERMINATED


async def test_a_launch_landing_after_the_window_is_removed_by_the_next_watch_round(
        worker: Worker, sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch takes effect 5 s after it was sent; the adapter gives up on its answer after 1 s
    and the window is 2 s: the retry launches again and the allocation is ready on that machine,
    and then the first one lands — two machines under one key."""
    window(monkeypatch, 2.0)
    monkeypatch.setenv(REQUEST_TIMEOUT_ENV, "1")  # in-process: the connection's new adapter reads it
    sim.admin.add_fault("lambda", "create", "latency", when="before", seconds=5)
    connection, allocation_id, handle = await start(worker, sim, db_engine, secret_box)
    key = attempt_key(allocation_id, 1)

    state = await settled(handle)
    assert state.phase == Phase.READY and state.ref is not None, state
    own = state.ref.instance_id

    def twins() -> list[dict[str, Any]]:
        return [m for m in made(sim, allocation_id) if m["id"] != own and m["status"] != "terminated"]

    async def landed() -> list[dict[str, Any]]:
        return twins()

    twin = (await until(landed, 60, "the late launch landed beside the retry's machine"))[0]
    send = send_of(db_engine, key)
    assert send is not None and send.doubted_at is not None, send  # the first send's answer never came

    async def row_ready() -> bool:
        with Session(db_engine) as s:
            row = s.get(Instance, allocation_id)
            return row is not None and row.status == "ready" and row.cloud_instance_id == own

    await until(row_ready, 30, "the allocation's row ready")
    # One round of the connection's watch (what its WatchWorkflow runs every interval).
    report: WatchReport = await ActivityEnvironment().run(
        WatchActivities(worker.deps).watch_connection, WatchInput(connection_id=connection))

    assert report.twins == {allocation_id: [twin["id"]]}, report
    assert twins() == [], "the twin outlived the watch round"
    assert [m["id"] for m in made(sim, allocation_id) if m["status"] != "terminated"] == [own]
    assert (await handle.query(wf.ALLOCATION.state.name, result_type=AllocationState)).phase == Phase.READY
    assert report.lost == {}

    # The next round finds nothing more under the key.
    again: WatchReport = await ActivityEnvironment().run(
        WatchActivities(worker.deps).watch_connection, WatchInput(connection_id=connection))
    assert again.twins == {} and again.lost == {}
    assert (await terminate(worker.client, allocation_id)).phase == Phase.TERMINATED
    assert all(m["status"] == "terminated" for m in made(sim, allocation_id))

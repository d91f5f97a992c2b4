"""The watch and a preemption, end to end on Lambda (the real AllocationWorkflow on the Temporal dev
server, an in-process worker, the adapter, the simulated Lambda): a machine Lambda preempts ends its
allocation `lost` with `AllocationState.preempted` and a reason that says so; an interruption notice
for a machine a managed job runs on reaches that job's workflow exactly once, however many rounds
the notice lasts, and the machine is reported lost only once the cloud shows it gone."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import ActivityEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker import Worker as TemporalWorker

from activities import metrics
from activities.deps import ActivityDeps
from activities.watch import WatchActivities
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id, job_workflow_id
from messages.job import JobStatus, JobType, PreemptionNotice
from messages.watch import WatchInput, WatchReport
from providers.base import InstanceStatus
from providers.lambda_ import LambdaProvider
from store.models import Instance, Job
from store.secrets import SecretBox
from tests import simclouds
from tests.lambda_.conftest import PUBLIC
from tests.processes import until
from tests.workflows.conftest import settled
from worker import GpuprovWorker, build_worker

INSTALLATION = "lampreem"
FAST = Timing(heartbeat_timeout_s=3, poll_interval_s=0.2, call_timeout_s=30, boot_timeout_s=60,
              ssh_timeout_s=20, k3s_timeout_s=30, max_retry_interval_s=1)


@workflow.defn(name="FakeJobForPreemptionNotices", sandboxed=False)
class FakeJobWorkflow:
    """FAKE: stands in for the JobWorkflow (its `preemption_notice` handler is written elsewhere):
    it only counts the notices it is sent, under a job's workflow id."""

    def __init__(self) -> None:
        self.notices: list[str] = []

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)  # until the test terminates it

    @workflow.signal(name=wf.JOB.preemption_notice.name)
    def preemption_notice(self, notice: PreemptionNotice) -> None:
        self.notices.append(f"{notice.allocation_id}: {notice.reason}")

    @workflow.query(name="notices")
    def got(self) -> list[str]:
        return self.notices


class Worker:
    """This module's in-process gpuprov worker on a queue of its own, and the FAKE job's worker."""

    def __init__(self, client: Client, deps: ActivityDeps) -> None:
        self.client, self.deps, self.queue = client, deps, f"lambda-preempt-{uuid.uuid4().hex[:8]}"
        self.fake_queue = f"{self.queue}-fake-jobs"
        self.worker: GpuprovWorker | None = None
        self._runs: list[asyncio.Task[None]] = []
        self._fake: TemporalWorker | None = None

    async def start(self) -> None:
        self.worker = build_worker(self.client, self.deps, task_queue=self.queue,
                                   graceful_shutdown_timeout=timedelta(0))
        self._fake = TemporalWorker(self.client, task_queue=self.fake_queue, workflows=[FakeJobWorkflow],
                                    workflow_runner=UnsandboxedWorkflowRunner())
        self._runs = [asyncio.create_task(self.worker.run()), asyncio.create_task(self._fake.run())]

    async def stop(self) -> None:
        assert self.worker is not None and self._fake is not None
        await self.worker.shutdown()
        await self._fake.shutdown()
        await asyncio.gather(*self._runs, return_exceptions=True)


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
        await w.stop()


@pytest.fixture
def notices_listed(monkeypatch: pytest.MonkeyPatch, sim: FakeCloudServer) -> None:
    """FAKE: Lambda documents no interruption notice, so its adapter never reports one. This listing
    reports the simulation's notice (`admin.preempt(..., notice_s=)`) as a cloud that has one would:
    the machine still active, `notice` set. Patched before the connection's adapter is built."""
    real = LambdaProvider.list_machines

    async def listing(self: LambdaProvider) -> list[InstanceStatus]:
        out = []
        for st in await real(self):
            machine = await sim.admin.aio.machine(st.ref.instance_id)
            under = machine["status"] == "running" and "preemption_notice_at" in machine["extra"]
            out.append(st.model_copy(update={"notice": True}) if under else st)
        return out

    monkeypatch.setattr(LambdaProvider, "list_machines", listing)


async def ready_allocation(worker: Worker, sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox,
                           ) -> tuple[str, str, str, WorkflowHandle[Any, AllocationState]]:
    """(connection, allocation id, instance id, handle) of a ready Lambda allocation, its row ready."""
    with Session(db_engine) as s:
        connection = simclouds.add_connection(s, secret_box, sim, "lambda")
    allocation_id = f"pw-{uuid.uuid4().hex[:8]}"
    req = AllocateRequest(allocation_id=allocation_id, connection_id=connection, cloud="lambda",
                          region="us-east-1", gpu="a10", k3s=False, ssh_public_keys=[PUBLIC], timing=FAST)
    handle = await worker.client.start_workflow(
        wf.ALLOCATION.name, AllocationInput(request=req), id=allocation_workflow_id(allocation_id),
        task_queue=worker.queue, result_type=AllocationState)
    state = await settled(handle)
    assert state.phase == Phase.READY and state.ref is not None, state
    instance_id = state.ref.instance_id

    async def row_ready() -> bool:
        with Session(db_engine) as s:
            row = s.get(Instance, allocation_id)
            return row is not None and row.status == "ready" and row.cloud_instance_id == instance_id

    await until(row_ready, 30, "the allocation's row ready")
    return connection, allocation_id, instance_id, handle


async def watch_round(worker: Worker, connection: str) -> WatchReport:
    """One round of the connection's watch (what its WatchWorkflow runs every interval)."""
    report: WatchReport = await ActivityEnvironment().run(
        WatchActivities(worker.deps).watch_connection, WatchInput(connection_id=connection))
    return report


def lost_count(why: str) -> float:
    return metrics.value("gpuprov_watch_machines_lost_total", cloud="lambda", why=why)


async def test_a_preempted_machine_ends_its_allocation_lost_and_preempted(
        worker: Worker, sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox) -> None:
    connection, allocation_id, instance_id, handle = await ready_allocation(
        worker, sim, db_engine, secret_box)
    assert (await watch_round(worker, connection)).lost == {}
    preempted_before, lost_before = lost_count("preempted"), lost_count("lost")

    sim.admin.preempt(instance_id)  # Lambda takes it back: `preempted`, not billing
    report = await watch_round(worker, connection)

    reason = report.lost[allocation_id]
    assert reason.startswith(f"the cloud preempted machine {instance_id}") and "spot interruption" in reason
    assert (lost_count("preempted"), lost_count("lost")) == (preempted_before + 1, lost_before)
    state = await asyncio.wait_for(handle.result(), 60)
    assert (state.phase, state.preempted, state.error) == (Phase.LOST, True, reason)
    with Session(db_engine) as s:
        row = s.get(Instance, allocation_id)
        assert row is not None and (row.status, row.error) == ("lost", reason)
    assert sim.admin.machine(instance_id)["status"] == "terminated"


async def test_a_notice_reaches_the_job_on_the_machine_once_then_the_loss_is_preempted(
        worker: Worker, sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox,
        notices_listed: None) -> None:
    connection, allocation_id, instance_id, handle = await ready_allocation(
        worker, sim, db_engine, secret_box)
    job_id = f"FAKE-{uuid.uuid4().hex[:8]}"  # FAKE: a job row and a stand-in workflow under its id
    with Session(db_engine) as s:
        s.add(Job(id=job_id, name="fake", type=JobType.TASK, command="sleep 600", requested_by="test",
                  workflow_id=job_workflow_id(job_id), status=JobStatus.RUNNING, allocation_id=allocation_id))
        s.commit()
    job = await worker.client.start_workflow(FakeJobWorkflow.run, id=job_workflow_id(job_id),
                                             task_queue=worker.fake_queue)
    try:
        async def notices() -> list[str]:
            return await job.query(FakeJobWorkflow.got)

        sim.admin.preempt(instance_id, notice_s=120)  # the notice is out; the machine still runs
        first = await watch_round(worker, connection)
        second = await watch_round(worker, connection)  # the notice lasts: not passed on again

        assert first.lost == second.lost == {}  # still running: not lost yet
        told = await until(notices, 10, "the job's notice")
        assert len(told) == 1 and told[0].startswith(f"{allocation_id}: the cloud will preempt machine")
        await asyncio.sleep(0.5)
        assert len(await notices()) == 1
        assert sim.admin.machine(instance_id)["status"] == "running"

        sim.admin.preempt(instance_id)  # the notice's end: Lambda takes it back
        third = await watch_round(worker, connection)
        assert third.lost[allocation_id].startswith(f"the cloud preempted machine {instance_id}")
        state = await asyncio.wait_for(handle.result(), 60)
        assert (state.phase, state.preempted) == (Phase.LOST, True)
        assert len(await notices()) == 1
    finally:
        await job.terminate("test over")

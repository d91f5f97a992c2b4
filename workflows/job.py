"""JobWorkflow: one managed job, start to end.

    queued ─► provisioning ─► running ─┬─► succeeded (exit 0)
      │            │                   ├─► failed (exit code and last lines; or its machine was lost)
      │            └─► failed (no machine could be allocated)
      └──────────────── cancel (update) at any point ─► cancelled
    ... and whatever was allocated is terminated, verified gone, before the job ends.

The machine is an AllocationWorkflow started as a child (its Instance row is written by its own
record activity, as for an allocation whose API died before writing it); the job waits on the
allocation's `ready` update and ends it with its `terminate` update, which returns once the cloud
shows the machine gone. If the job's workflow itself is closed by an operator, the parent close
policy cancels the allocation, and a cancelled allocation tears its machine down.

The command runs in one long activity (activities/jobs.py) that heartbeats its output offset; the
output goes to the app database, never into this history. A retried run (a worker died) re-attaches
to the command already running on the same machine.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

from messages import activities as acts
from messages import workflows as wf
from messages.activities import TerminateAllocationInput
from messages.allocation import AllocationInput, AllocationState
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from messages.job import (
    AdmitInput,
    AllocationReadyInput,
    ClaimInput,
    JobInput,
    JobState,
    JobStatus,
    MachineEndInput,
    PoolTarget,
    RecordJobInput,
    RunJobInput,
    RunJobResult,
)
from workflows.calls import call, start_child
from workflows.failures import failure_reason
from workflows.retries import backoff

LAST_LINES = 20  # of output, in a failed job's error



def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark a task's outcome as read (a task nobody awaits any more)."""
    if not task.cancelled():
        task.exception()


@workflow.defn(name=wf.JOB.name)
class JobWorkflow:
    @workflow.init
    def __init__(self, inp: JobInput) -> None:
        self._inp = inp
        self._state = JobState(job_id=inp.job_id)
        t = inp.timing
        self._hb = timedelta(seconds=t.heartbeat_timeout_s)
        self._hb_every = max(0.2, t.heartbeat_timeout_s / 4)
        self._max_retry = t.max_retry_interval_s
        self._cancel = False
        self._done = False
        self._child: asyncio.Task[str | None] | None = None  # the allocation; its error when it failed

    @workflow.query(name=wf.JOB.state.name)
    def state(self) -> JobState:
        return self._state

    @workflow.update(name=wf.JOB.cancel.name)
    async def cancel(self) -> JobState:
        """Cancel the job: a queued one leaves the queue, a running one is stopped; returns once it
        has ended and its machine is gone. Any number of callers; a job that ended stays as it ended."""
        if not self._done:
            self._cancel = self._state.cancel_requested = True
        await workflow.wait_condition(lambda: self._done)
        return self._state

    # ------------------------------------------------------------------ the life

    @workflow.run
    async def run(self, inp: JobInput) -> JobState:
        try:
            status, exit_code, error = await self._life(inp)
        except asyncio.CancelledError:
            # The workflow itself was cancelled (Web UI): a cancel, with its machine torn down.
            await asyncio.shield(asyncio.ensure_future(self._close(JobStatus.CANCELLED, None, None)))
            raise
        return await self._close(status, exit_code, error)

    async def _life(self, inp: JobInput) -> tuple[JobStatus, int | None, str | None]:
        await self._record(JobStatus.QUEUED)
        await self._admit()
        if self._cancel:
            return JobStatus.CANCELLED, None, None
        if inp.pool is not None:  # only new inputs have one: older histories replay the path below
            return await self._on_pool(inp, inp.pool)

        alloc = inp.allocation
        assert alloc is not None, "a job without a pool has its allocation"
        self._state.allocation_id = alloc.allocation_id
        await self._record(JobStatus.PROVISIONING)
        wid = allocation_workflow_id(alloc.allocation_id)
        child = await start_child(wf.ALLOCATION, AllocationInput(request=alloc), id=wid,
                                  parent_close_policy=ParentClosePolicy.REQUEST_CANCEL)
        self._child = asyncio.create_task(self._ended(child))

        t = alloc.timing
        ready = asyncio.create_task(call(
            acts.AWAIT_ALLOCATION_READY,
            AllocationReadyInput(workflow_id=wid, heartbeat_every_s=self._hb_every),
            start_to_close_timeout=timedelta(seconds=t.boot_timeout_s + t.ssh_timeout_s + t.k3s_timeout_s
                                             + 600),
            heartbeat_timeout=self._hb, retry_policy=backoff(self._max_retry)))
        child_task = self._child
        await workflow.wait_condition(lambda: ready.done() or child_task.done() or self._cancel)
        if not ready.done():
            ready.cancel()
        if self._cancel:
            return JobStatus.CANCELLED, None, None
        if child_task.done() or ready.exception() is not None:
            return JobStatus.FAILED, None, f"no machine: {await self._child_error()}"
        st = ready.result()
        if st.phase != Phase.READY or st.host is None:
            return JobStatus.FAILED, None, f"no machine: {st.error or st.phase}"

        self._state.status = JobStatus.RUNNING
        await self._record(JobStatus.RUNNING, host=st.host)
        has_gpus = bool(st.gpus) or bool(st.offer and st.offer.gpu)
        return await self._run(inp, RunJobInput(
            job_id=inp.job_id, command=inp.command, image=inp.image, gpus=has_gpus, host=st.host,
            port=st.ssh_port or 22, user=st.ssh_user or "ubuntu", poll_interval_s=inp.log_poll_s,
            heartbeat_every_s=self._hb_every), child_task)

    async def _run(self, inp: JobInput, run_input: RunJobInput,
                   machine: asyncio.Task[str | None]) -> tuple[JobStatus, int | None, str | None]:
        """Run the command until it exits, the job is cancelled, or `machine` (the machine's end:
        why it went) completes first."""
        run = asyncio.create_task(call(
            acts.RUN_JOB, run_input,
            start_to_close_timeout=timedelta(days=30), heartbeat_timeout=self._hb,
            retry_policy=backoff(self._max_retry),
            # its cancel stops the command before the machine goes
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED))
        child_task = machine
        await workflow.wait_condition(lambda: run.done() or child_task.done() or self._cancel)
        if not run.done():
            run.cancel()
            try:
                await run
            except BaseException:  # noqa: BLE001 — cancelled, as asked
                pass
        if self._cancel:
            return JobStatus.CANCELLED, None, None
        failed = None if run.cancelled() else run.exception()
        if run.cancelled() or failed is not None:
            why = failure_reason(failed) if failed is not None else "stopped"
            if child_task.done():
                why = f"its machine was lost ({await child_task or 'gone'})"
            return JobStatus.FAILED, None, why
        result: RunJobResult = run.result()
        if result.exit_code == 0:
            return JobStatus.SUCCEEDED, 0, None
        tail = "\n".join(result.last_lines[-LAST_LINES:])
        return JobStatus.FAILED, result.exit_code, f"exit code {result.exit_code}; last lines:\n{tail}"

    async def _on_pool(self, inp: JobInput, pool: PoolTarget) -> tuple[JobStatus, int | None, str | None]:
        """A pool job: wait for a ready machine of the pool that runs no other job, claim it
        (store/pool_claims.py: race-free), run there. Its end (the row recorded ended) releases the
        claim; the machine stays the pool's. A claimed machine that goes (the pool scaled down,
        the machine lost) fails the job with why."""
        await self._record(JobStatus.PROVISIONING)
        wait = min(0.5, inp.queue_poll_s)
        while True:
            got = await call(acts.CLAIM_POOL_MACHINE, ClaimInput(job_id=inp.job_id, pool_id=pool.pool_id),
                             start_to_close_timeout=timedelta(seconds=60),
                             retry_policy=backoff(self._max_retry))
            if got.gone is not None:
                return JobStatus.FAILED, None, f"no machine of pool {pool.name}: {got.gone}"
            if got.machine is not None:
                break
            if workflow.info().is_continue_as_new_suggested() and not self._cancel:
                workflow.continue_as_new(self._inp)  # nothing claimed: the admission answers granted again
            try:
                await workflow.wait_condition(lambda: self._cancel, timeout=timedelta(seconds=wait))
            except TimeoutError:
                pass
            if self._cancel:
                return JobStatus.CANCELLED, None, None
            wait = min(wait * 2, inp.queue_poll_s)
        m = got.machine
        self._state.allocation_id = m.allocation_id
        await self._record(JobStatus.RUNNING, host=m.host)
        machine_end = asyncio.create_task(call(
            acts.AWAIT_MACHINE_END,
            MachineEndInput(workflow_id=allocation_workflow_id(m.allocation_id),
                            heartbeat_every_s=self._hb_every),
            start_to_close_timeout=timedelta(days=30), heartbeat_timeout=self._hb,
            retry_policy=backoff(self._max_retry)))

        async def went() -> str | None:
            return await machine_end

        gone = asyncio.create_task(went())
        try:
            return await self._run(inp, RunJobInput(
                job_id=inp.job_id, command=inp.command, image=inp.image, gpus=m.gpus, host=m.host,
                port=m.port, user=m.user, poll_interval_s=inp.log_poll_s,
                heartbeat_every_s=self._hb_every), gone)
        finally:
            if not machine_end.done():
                machine_end.cancel()
            # The job's end is decided: the machine's is not waited for, and `went` ends with the
            # cancelled activity's error. Read when it comes (no command, so replay is unchanged),
            # else the loop logs "Task exception was never retrieved" for every pool job.
            gone.add_done_callback(_retrieved)

    async def _admit(self) -> None:
        """Wait for the queue's grant (store/queue.py), asking again with a growing interval (up to
        `queue_poll_s`) until granted or cancelled. A job type that is not queued was granted when
        the API accepted it: the first ask answers granted."""
        wait = min(0.5, self._inp.queue_poll_s)
        while not self._cancel:
            got = await call(acts.ADMIT_JOB, AdmitInput(job_id=self._inp.job_id),
                             start_to_close_timeout=timedelta(seconds=60),
                             retry_policy=backoff(self._max_retry))
            if got.granted:
                return
            if workflow.info().is_continue_as_new_suggested() and not self._cancel:
                workflow.continue_as_new(self._inp)  # still queued: nothing else to carry
            try:
                await workflow.wait_condition(lambda: self._cancel, timeout=timedelta(seconds=wait))
            except TimeoutError:
                pass
            wait = min(wait * 2, self._inp.queue_poll_s)

    # ------------------------------------------------------------------ the machine

    @staticmethod
    async def _ended(child: workflow.ChildWorkflowHandle[Any, AllocationState]) -> str | None:
        """Await the allocation's close: None when it ended normally (terminated, or lost with its
        reason in the state), else why it failed."""
        try:
            st = await child
        except BaseException as e:  # noqa: BLE001 — a failed or cancelled allocation: its reason
            while isinstance(e, ChildWorkflowError) and e.cause is not None:
                e = e.cause
            return failure_reason(e)
        return st.error if st.phase == Phase.LOST else None

    async def _child_error(self) -> str | None:
        return await self._child if self._child is not None else None

    async def _release(self) -> None:
        """Terminate the job's machine (its `terminate` update returns once the cloud shows it
        gone) and wait for the allocation to close. Nothing to do if it never started or ended."""
        if self._child is None or self._child.done():
            return
        assert self._state.allocation_id is not None and self._inp.allocation is not None
        await call(acts.TERMINATE_ALLOCATION,
                   TerminateAllocationInput(workflow_id=allocation_workflow_id(self._state.allocation_id),
                                            heartbeat_every_s=self._hb_every),
                   start_to_close_timeout=timedelta(seconds=self._inp.allocation.timing.boot_timeout_s),
                   heartbeat_timeout=self._hb, retry_policy=backoff(self._max_retry))
        await self._child

    async def _close(self, status: JobStatus, exit_code: int | None, error: str | None) -> JobState:
        await self._release()
        self._state.status, self._state.exit_code, self._state.error = status, exit_code, error
        await self._record(status, exit_code=exit_code, error=error)
        self._done = True
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self._state

    async def _record(self, status: JobStatus, **fields: Any) -> None:
        self._state.status = status
        await call(acts.RECORD_JOB,
                   RecordJobInput(job_id=self._inp.job_id, status=status,
                                  allocation_id=self._state.allocation_id, **fields),
                   start_to_close_timeout=timedelta(seconds=30), retry_policy=backoff(self._max_retry))

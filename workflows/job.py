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

A job with a `retry` policy (JOB_RETRY_PATCH) runs in attempts: one that ends by a cause its `on`
names — preempted, machine_lost, no_capacity, a non-zero exit (failed) — with restarts left releases
its machine and runs the command again on a new one, from the same allocation path (an allocation id
derived from the first: a worker lost mid-restart starts the same child, so one machine), with
GPUPROV_JOB_ATTEMPT and GPUPROV_JOB_PREVIOUS_END in its environment and a marker line in the one log.
A cloud's preemption notice for the running attempt's machine (the `preemption_notice` signal, sent by
the watch) sends the command SIGTERM once; the machine's end then takes the usual path.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

from messages import activities as acts
from messages import workflows as wf
from messages.activities import TerminateAllocationInput
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, CloudTarget
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from messages.job import (
    AdmitInput,
    AllocationReadyInput,
    AttemptEnd,
    ClaimInput,
    JobInput,
    JobRetry,
    JobState,
    JobStatus,
    MachineEndInput,
    PoolTarget,
    PreemptionNotice,
    RecordJobInput,
    RetryCause,
    RetryWhere,
    RunJobInput,
    RunJobResult,
    SignalJobInput,
    restart_allocation_id,
)
from providers.base import Offer
from workflows.calls import call, outcome_read, start_child
from workflows.failures import failure_reason
from workflows.retries import QUICK, backoff

LAST_LINES = 20  # of output, in a failed job's error

# A patch: a job with a `retry` policy runs in attempts (`_attempts`). Asked only for such a job (the
# field is new: every job started before has none), so any other job's history is as before.
JOB_RETRY_PATCH = "job-retry"

# Before a restart for no capacity: this many times the timing's max retry interval, doubling per
# attempt up to 8 (a sold-out cloud is not asked again at once; a cancel ends the wait).
NO_CAPACITY_WAIT = 1

Outcome = tuple[JobStatus, int | None, str | None]


@dataclass(frozen=True)
class _Ran:
    """How one run of the command ended (`JobWorkflow._command`)."""

    cancelled: bool = False
    result: RunJobResult | None = None
    failure: BaseException | None = None
    machine_gone: bool = False



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
        self._machine_end: AllocationState | None = None  # the allocation's last state, once it closed
        self._running: RunJobInput | None = None  # the command's run, while RUN_JOB is under way
        self._retry: JobRetry | None = None  # the policy, once its branch is taken (JOB_RETRY_PATCH)

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

    @workflow.signal(name=wf.JOB.preemption_notice.name)
    async def preemption_notice(self, notice: PreemptionNotice) -> None:
        """The cloud's interruption notice for a machine (the watch, each round it is out): if it is
        the running attempt's machine, the command gets SIGTERM — once per machine. A notice for
        another machine (an attempt that ended), or with no command running, changes nothing; the
        machine's end then takes the usual path (lost, preempted: a restart where the policy says)."""
        run = self._running
        if (self._done or run is None or notice.allocation_id != self._state.allocation_id
                or notice.allocation_id in self._state.noticed):
            return
        self._state.noticed.append(notice.allocation_id)
        try:
            await call(acts.SIGNAL_JOB,
                       SignalJobInput(job_id=run.job_id, attempt=run.attempt,
                                      allocation_id=notice.allocation_id, host=run.host, port=run.port,
                                      user=run.user),
                       start_to_close_timeout=timedelta(seconds=60), retry_policy=QUICK)
        except ActivityError as e:  # the machine already unreachable: its end comes by the usual path
            workflow.logger.warning("job %s: SIGTERM on %s's notice not sent: %s", run.job_id,
                                    notice.allocation_id, failure_reason(e))

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

    async def _life(self, inp: JobInput) -> Outcome:
        await self._record(JobStatus.QUEUED)
        await self._admit()
        if self._cancel:
            return JobStatus.CANCELLED, None, None
        if inp.pool is not None:  # only new inputs have one: older histories replay the path below
            return await self._on_pool(inp, inp.pool)

        alloc = inp.allocation
        assert alloc is not None, "a job without a pool has its allocation"
        if inp.retry is not None and workflow.patched(JOB_RETRY_PATCH):
            self._retry = inp.retry
            return await self._attempts(inp, alloc, inp.retry)
        self._state.allocation_id = alloc.allocation_id
        await self._record(JobStatus.PROVISIONING)
        st = await self._provision(alloc)
        if st is None:
            return JobStatus.CANCELLED, None, None
        if isinstance(st, str):
            return JobStatus.FAILED, None, st

        self._state.status = JobStatus.RUNNING
        await self._record(JobStatus.RUNNING, host=st.host)
        assert self._child is not None and st.host is not None
        return await self._run(inp, self._run_input(inp, st, st.host), self._child)

    def _run_input(self, inp: JobInput, st: AllocationState, host: str, **attempt: Any) -> RunJobInput:
        has_gpus = bool(st.gpus) or bool(st.offer and st.offer.gpu)
        return RunJobInput(
            job_id=inp.job_id, command=inp.command, image=inp.image, gpus=has_gpus, host=host,
            port=st.ssh_port or 22, user=st.ssh_user or "ubuntu", poll_interval_s=inp.log_poll_s,
            heartbeat_every_s=self._hb_every, **attempt)

    async def _provision(self, alloc: AllocateRequest) -> AllocationState | str | None:
        """Start the allocation (the job's child) and wait until its machine is ready: its state;
        why there is none ("no machine: …"); None when the job was cancelled meanwhile."""
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
            ready.add_done_callback(outcome_read)  # its cancelled activity's error: nobody awaits it
        if self._cancel:
            return None
        if child_task.done() or ready.exception() is not None:
            return f"no machine: {await self._child_error()}"
        st = ready.result()
        if st.phase != Phase.READY or st.host is None:
            return f"no machine: {st.error or st.phase}"
        return st

    # ------------------------------------------------------------------ attempts (a retry policy)

    async def _attempts(self, inp: JobInput, first: AllocateRequest, policy: JobRetry) -> Outcome:
        """Run the job in attempts, each on a machine of its own, until one ends for good: it
        succeeded, was cancelled, or ended by a cause the policy does not restart on (or with no
        restarts left) — the job then fails naming that cause and the attempt."""
        req = first
        pinned: tuple[Offer, CloudTarget] | None = None  # the first machine's offer and connection
        while True:
            n = self._state.attempt
            end, outcome, machine = await self._attempt(inp, req, n)
            if outcome is not None:
                return outcome
            assert end is not None
            if pinned is None and machine is not None and machine.offer is not None and machine.target:
                pinned = (machine.offer, machine.target)
            self._state.ends.append(end)
            exit_code = end.exit_code if end.cause == RetryCause.FAILED else None
            if end.cause not in policy.on:
                return JobStatus.FAILED, exit_code, (f"{end.cause.says()} (attempt {n} of {policy.attempts}; "
                                                     f"not restarted on {end.cause.value}): {end.reason}")
            if n >= policy.attempts:
                return JobStatus.FAILED, exit_code, (f"{end.cause.says()} (attempt {n} of "
                                                     f"{policy.attempts}): {end.reason}")
            await self._release()
            if not self._cancel and end.cause == RetryCause.NO_CAPACITY:
                await self._until_cancelled(self._max_retry * NO_CAPACITY_WAIT * 2 ** min(n - 1, 3))
            if self._cancel:
                return JobStatus.CANCELLED, None, None
            self._state.attempt = n + 1
            req = self._restart_request(first, pinned, n + 1, policy.where)

    async def _attempt(self, inp: JobInput, req: AllocateRequest, n: int
                       ) -> tuple[AttemptEnd | None, Outcome | None, AllocationState | None]:
        """One attempt: its machine, the command run there. Either how it ended (a cause to weigh
        against the policy) or the job's outcome (succeeded, cancelled, a failure no restart fixes),
        with the machine's state once it was ready."""
        self._state.allocation_id = req.allocation_id
        await self._record(JobStatus.PROVISIONING)
        st = await self._provision(req)
        if st is None:
            return None, (JobStatus.CANCELLED, None, None), None
        if isinstance(st, str):
            return AttemptEnd(attempt=n, allocation_id=req.allocation_id, cause=RetryCause.NO_CAPACITY,
                              reason=st), None, None
        assert st.host is not None and self._child is not None
        await self._record(JobStatus.RUNNING, host=st.host)
        previous = self._state.ends[-1].cause if self._state.ends else None
        ran = await self._command(self._run_input(inp, st, st.host, attempt=n, previous_end=previous),
                                  self._child)
        if ran.cancelled:
            return None, (JobStatus.CANCELLED, None, None), st

        def ended(cause: RetryCause, reason: str, exit_code: int | None = None
                  ) -> tuple[AttemptEnd, None, AllocationState]:
            end = AttemptEnd(attempt=n, allocation_id=req.allocation_id, cause=cause, reason=reason,
                             exit_code=exit_code)
            return end, None, st

        noticed = req.allocation_id in self._state.noticed
        if ran.result is not None:
            code = ran.result.exit_code
            if code == 0:
                return None, (JobStatus.SUCCEEDED, 0, None), st
            tail = "\n".join(ran.result.last_lines[-LAST_LINES:])
            if noticed:  # it was told its machine goes (SIGTERM): its exit is the preemption's
                return ended(RetryCause.PREEMPTED, f"the cloud's preemption notice; exit code {code}", code)
            return ended(RetryCause.FAILED, f"exit code {code}; last lines:\n{tail}", code)
        if ran.machine_gone:
            why = await self._child or "gone"
            gone = self._machine_end
            if gone is not None and gone.preempted:
                return ended(RetryCause.PREEMPTED, why)
            return ended(RetryCause.MACHINE_LOST, why)
        # The run failed on a machine still there (a launch that cannot succeed, a changed host
        # key): not an end a new machine changes.
        why = failure_reason(ran.failure) if ran.failure is not None else "stopped"
        return None, (JobStatus.FAILED, None, why), st

    def _restart_request(self, first: AllocateRequest, pinned: tuple[Offer, CloudTarget] | None,
                         n: int, where: RetryWhere) -> AllocateRequest:
        """Attempt `n`'s allocation: the first one's request under a derived id, its targets as
        `where` says (the first machine's offer, or its cloud; before any machine, the job's own)."""
        update: dict[str, Any] = {"allocation_id": restart_allocation_id(first.allocation_id, n)}
        note = f"attempt {n} of job {self._inp.job_id} (retry where {where.value})"
        if pinned is not None and where != RetryWhere.ANY_ALLOWED:
            offer, target = pinned
            if where == RetryWhere.SAME_OFFER:
                targets = [target]
                update.update(region=offer.region, instance_type=offer.instance_type)
                note += f": {offer.instance_type} in {offer.region} on {target.cloud}"
            else:
                targets = [t for t in first.all_targets() if t.cloud == target.cloud] or [target]
                note += f": {target.cloud}"
            update.update(targets=targets, connection_id=targets[0].connection_id, cloud=targets[0].cloud)
        elif where != RetryWhere.ANY_ALLOWED:
            note += ": no machine before it, so any the job may use"
        update["notes"] = [note, *first.notes]
        return first.model_copy(update=update)

    async def _run(self, inp: JobInput, run_input: RunJobInput,
                   machine: asyncio.Task[str | None]) -> Outcome:
        """Run the command until it exits, the job is cancelled, or `machine` (the machine's end:
        why it went) completes first."""
        ran = await self._command(run_input, machine)
        if ran.cancelled:
            return JobStatus.CANCELLED, None, None
        if ran.result is None:
            why = failure_reason(ran.failure) if ran.failure is not None else "stopped"
            if ran.machine_gone:
                why = f"its machine was lost ({await machine or 'gone'})"
            return JobStatus.FAILED, None, why
        result = ran.result
        if result.exit_code == 0:
            return JobStatus.SUCCEEDED, 0, None
        tail = "\n".join(result.last_lines[-LAST_LINES:])
        return JobStatus.FAILED, result.exit_code, f"exit code {result.exit_code}; last lines:\n{tail}"

    async def _command(self, run_input: RunJobInput, machine: asyncio.Task[str | None]) -> _Ran:
        """The RUN_JOB activity until the command exits, the job is cancelled, or `machine`
        completes first (the run is then cancelled: its cancel stops the command)."""
        run = asyncio.create_task(call(
            acts.RUN_JOB, run_input,
            start_to_close_timeout=timedelta(days=30), heartbeat_timeout=self._hb,
            retry_policy=backoff(self._max_retry),
            # its cancel stops the command before the machine goes
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED))
        self._running = run_input
        child_task = machine
        try:
            await workflow.wait_condition(lambda: run.done() or child_task.done() or self._cancel)
            if not run.done():
                run.cancel()
                try:
                    await run
                except BaseException:  # noqa: BLE001 — cancelled, as asked
                    pass
        finally:
            self._running = None
        if self._cancel:
            return _Ran(cancelled=True)
        failed = None if run.cancelled() else run.exception()
        if run.cancelled() or failed is not None:
            return _Ran(failure=failed, machine_gone=child_task.done())
        result: RunJobResult = run.result()
        return _Ran(result=result)

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
            if await self._until_cancelled(wait):
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
            gone.add_done_callback(outcome_read)

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
            await self._until_cancelled(wait)
            wait = min(wait * 2, self._inp.queue_poll_s)

    async def _until_cancelled(self, seconds: float) -> bool:
        """Wait `seconds` (a durable timer) or until the job is cancelled; whether it was."""
        try:
            await workflow.wait_condition(lambda: self._cancel, timeout=timedelta(seconds=seconds))
        except TimeoutError:
            pass
        return self._cancel

    # ------------------------------------------------------------------ the machine

    async def _ended(self, child: workflow.ChildWorkflowHandle[Any, AllocationState]) -> str | None:
        """Await the allocation's close: None when it ended normally (terminated, or lost with its
        reason in the state), else why it failed. Its last state is kept (`_machine_end`: was it
        preempted)."""
        self._machine_end = None
        try:
            st = await child
        except BaseException as e:  # noqa: BLE001 — a failed or cancelled allocation: its reason
            while isinstance(e, ChildWorkflowError) and e.cause is not None:
                e = e.cause
            return failure_reason(e)
        self._machine_end = st
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
        if self._retry is not None:  # the attempt, and how those before ended (JOB_RETRY_PATCH)
            fields.update(attempt=self._state.attempt, attempts=self._retry.attempts, ends=self._state.ends)
        await call(acts.RECORD_JOB,
                   RecordJobInput(job_id=self._inp.job_id, status=status,
                                  allocation_id=self._state.allocation_id, **fields),
                   start_to_close_timeout=timedelta(seconds=30), retry_policy=backoff(self._max_retry))

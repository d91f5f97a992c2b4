"""AcceptanceWorkflow: the clouds page's acceptance suite, run on one connection.

    connect ─► offer ─► allocate ─► ssh ─► gpu ─► k3s ─► terminate ─► nothing billable
        ─► interrupt after create ─► interrupt while booting ─► interrupt with the worker killed
        └─ always: every allocation the run started is terminated and the cloud's listing read;
           what it still shows is reported with the cloud's own ids

The run drives the product, not the adapter: each machine is an AllocationWorkflow child (so the
allocation, its compensation and its verified teardown are what is tested), started on the offer
the `offer` step chose (the cheapest of the GPU asked for, or the cloud's cheapest). A step that
cannot pass fails with the reason and the run goes on to clean up; a step after a failed one that
needs it (ssh after no machine) is `not_run`.

The ceilings: `max_minutes` bounds the whole run (its steps are cancelled then, and the cleanup
still runs), and `max_usd` the machine time it pays for (each allocation's price from its start
until the cloud showed it gone, summed as it goes); an offer whose hour costs more than `max_usd`
stops the run before any create.

The worker-killed step needs a worker the caller owns and can SIGKILL (`gpuprov acceptance run`
starts one on a private task queue): its allocation runs on that queue; once its create is in
flight the state shows `kill_now`, the caller kills and restarts that worker, and signals
`worker_killed`. A run without a private queue (started through the API) reports the step not run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError
from temporalio.workflow import ParentClosePolicy

from messages import activities as acts
from messages import workflows as wf
from messages.acceptance import (
    STEPS,
    AcceptancePlan,
    AcceptanceRequest,
    AcceptanceResult,
    AcceptanceState,
    AcceptanceStep,
    AllocationPhaseInput,
    Approval,
    LeftoversInput,
    MachineCheckInput,
    Outcome,
    PlanAcceptanceInput,
    RecordAcceptanceInput,
    WorkerKilled,
)
from messages.activities import TerminateAllocationInput
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, CloudTarget
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from messages.job import AllocationReadyInput
from workflows import retries
from workflows.calls import call, start_child
from workflows.failures import failure_reason

# The phases each interrupt waits for before it cancels.
CREATING = [Phase.CREATE.value]
BOOTING = [Phase.WAIT_RUNNING.value, Phase.PORTS.value, Phase.SSH.value, Phase.K3S.value]
ENDED = (Phase.FAILED, Phase.TERMINATED, Phase.LOST)

# A plan held for approval and never answered declines itself after the run's
# `approve_within_minutes`: before, it waited until `max_minutes` (an hour by default), holding its
# cloud account's one acceptance lane (api/routers/acceptance.py) for a caller that was gone (a
# killed CLI, an API client that stopped). The deadline is a timer the old branch does not start: a run
# held when this worker arrived goes on waiting without one.
APPROVAL_DEADLINE_PATCH = "acceptance-approval-deadline"


class _Declined(Exception):
    """The caller was shown the plan and said not to spend, or did not answer in time: nothing is
    created. The message is the steps' reason."""

    def __init__(self, why: str = "not run: the plan was declined (nothing was created)") -> None:
        super().__init__(why)


class StepFailed(Exception):
    """A step's check did not hold; the message says what was seen."""


@workflow.defn(name=wf.ACCEPTANCE.name)
class AcceptanceWorkflow:
    @workflow.init
    def __init__(self, inp: AcceptanceRequest) -> None:
        self._inp = inp
        self._state = AcceptanceState(run_id=inp.run_id, cloud=inp.cloud)
        self._killed = False
        self._approved: bool | None = None if inp.hold_for_approval else True
        self._killed_in: str | None = None  # the allocation's phase the caller saw when it killed
        self._started: dict[str, datetime] = {}  # allocation id -> when it started (its cost runs from then)
        self._gone: dict[str, datetime] = {}  # ... -> when the cloud showed it gone
        t = inp.timing
        self._hb = timedelta(seconds=t.heartbeat_timeout_s)
        self._hb_every = max(0.2, t.heartbeat_timeout_s / 4)
        self._retry = retries.backoff(t.max_retry_interval_s)

    @workflow.query(name=wf.ACCEPTANCE.state.name)
    def state(self) -> AcceptanceState:
        return self._state.model_copy(update={"spent_usd_estimate": round(self._spent(), 4)})

    @workflow.signal(name=wf.ACCEPTANCE.approve.name)
    def approve(self, answer: Approval) -> None:
        if self._approved is None:
            self._approved = answer.spend

    @workflow.signal(name=wf.ACCEPTANCE.worker_killed.name)
    def worker_killed(self, report: WorkerKilled) -> None:
        self._killed = True
        self._killed_in = report.phase

    # ------------------------------------------------------------------ the run

    @workflow.run
    async def run(self, inp: AcceptanceRequest) -> AcceptanceState:
        started = workflow.now()
        await self._record(None)
        steps = asyncio.create_task(self._steps())
        try:
            stop = await self._supervise(steps, started)
        except asyncio.CancelledError:  # the run itself was cancelled (Web UI, API): clean up, then end
            steps.cancel()
            stop = "the run was cancelled"
        try:
            await steps
        except asyncio.CancelledError:
            pass
        except _Declined as e:
            stop = str(e)
        # Always, and never cancelled: every allocation the run started is torn down and looked for.
        await asyncio.shield(asyncio.ensure_future(self._clean_up()))
        for name in STEPS:
            if not any(s.name == name for s in self._state.steps):
                self._step(name, "not_run", 0.0, stop or "an earlier step it needs failed")
        plan = self._state.plan
        self._state.result = AcceptanceResult(
            cloud=inp.cloud, adapter_version=plan.adapter_version if plan else "unknown",
            account=plan.account if plan else "simulated", steps=self._state.steps, started_at=started,
            account_fingerprint=plan.account_fingerprint if plan else None)
        self._state.done = True
        await asyncio.shield(asyncio.ensure_future(self._record(self._state.result)))
        return self._state

    async def _supervise(self, steps: asyncio.Task[None], started: datetime) -> str | None:
        """Wait for the steps; cancel them at the time or $ ceiling and say which was reached."""
        inp = self._inp
        limit = inp.max_minutes * 60
        while not steps.done():
            elapsed = (workflow.now() - started).total_seconds()
            stop = None
            if elapsed >= limit:
                stop = f"the run's time ceiling ({inp.max_minutes:g} min) was reached"
            elif self._spent() >= inp.max_usd:
                stop = f"the run's cost ceiling (${inp.max_usd:g}) was reached"
            if stop is not None:
                steps.cancel()
                return stop
            try:
                # woken by the steps ending, else every 30 s (or at the time ceiling) to check the ceilings
                await workflow.wait_condition(steps.done, timeout=max(1.0, min(30.0, limit - elapsed)))
            except TimeoutError:
                pass
        return None

    async def _steps(self) -> None:
        inp = self._inp
        plan = await self._plan()
        if plan is None:
            return
        if self._approved is None:  # held: the caller shows the plan and asks its user
            self._state.awaiting_approval = True
            if workflow.patched(APPROVAL_DEADLINE_PATCH):
                await self._await_answer(timedelta(minutes=inp.approve_within_minutes))
            else:
                await workflow.wait_condition(lambda: self._approved is not None)
            self._state.awaiting_approval = False
        if self._approved is None:
            self._state.unanswered = True
            raise _Declined(f"not run: the plan was not answered within {inp.approve_within_minutes:g} min "
                            "(nothing was created)")
        if not self._approved:
            raise _Declined()
        main = f"{inp.run_id}-m"
        ready = await self._timed("allocate", lambda: self._allocate(main, until_ready=True))
        if isinstance(ready, AllocationState):
            await self._machine_steps(main, ready, plan)
        if main in self._state.allocations:  # a failed allocation is looked for too: nothing may remain
            await self._timed("terminate", lambda: self._terminate(main))
            await self._timed("nothing_billable", lambda: self._nothing_left([main]))
        await self._interrupt("interrupt_after_create", f"{inp.run_id}-c", CREATING)
        await self._interrupt("interrupt_while_booting", f"{inp.run_id}-b", BOOTING)
        if inp.kill_task_queue is None:
            self._step("interrupt_worker_killed", "not_run", 0.0,
                       "needs a worker of the run's own to kill: `gpuprov acceptance run` starts one "
                       "on a private task queue (a run through the API has none)")
        else:
            await self._interrupt("interrupt_worker_killed", f"{inp.run_id}-k", CREATING,
                                  task_queue=inp.kill_task_queue)

    async def _await_answer(self, within: timedelta) -> None:
        """Wait for the `approve` signal, at most `within` (the state says until when). Unanswered by
        then, `_approved` is still None: the caller declines the run."""
        self._state.approve_by = workflow.now() + within
        try:
            await workflow.wait_condition(lambda: self._approved is not None, timeout=within)
        except TimeoutError:
            pass  # an answer in the same activation as the timer is still in `_approved`
        self._state.approve_by = None

    # ------------------------------------------------------------------ the steps

    async def _plan(self) -> AcceptancePlan | None:
        inp = self._inp
        t0 = workflow.now()
        try:
            plan = await call(acts.PLAN_ACCEPTANCE, PlanAcceptanceInput(
                connection_id=inp.connection_id, cloud=inp.cloud, gpu=inp.gpu,
                instance_type=inp.instance_type, region=inp.region, max_usd=inp.max_usd,
                max_minutes=inp.max_minutes),
                start_to_close_timeout=timedelta(seconds=inp.timing.call_timeout_s),
                retry_policy=retries.QUICK)
        except ActivityError as e:  # the cloud unreachable after the retries, or the connection unreadable
            self._step("connect", "failed", self._since(t0), failure_reason(e))
            return None
        self._state.plan = plan
        took = self._since(t0)
        if plan.connect_error is not None:
            self._step("connect", "failed", took, plan.connect_error)
            return None
        self._step("connect", "passed", took, f"{plan.account} account")
        if plan.offer_error is not None or plan.price_per_hour is None:
            self._step("offer", "failed", 0.0, plan.offer_error or "no offer")
            return None
        gpus = f"{plan.gpu_count}x {plan.gpu}" if plan.gpu else "no GPU"
        self._step("offer", "passed", 0.0,
                   f"{plan.instance_type} in {plan.region} at ${plan.price_per_hour:g}/h ({gpus})")
        return plan

    async def _machine_steps(self, allocation_id: str, st: AllocationState, plan: AcceptancePlan) -> None:
        t0 = workflow.now()
        try:
            assert st.host is not None
            seen = await call(acts.CHECK_MACHINE, MachineCheckInput(
                allocation_id=allocation_id, host=st.host, port=st.ssh_port or 22, user=st.ssh_user or "root",
                k3s=plan.k3s_reason is None),
                start_to_close_timeout=timedelta(seconds=self._inp.timing.ssh_timeout_s),
                retry_policy=retries.backoff(self._inp.timing.max_retry_interval_s, attempts=3))
        except ActivityError as e:
            self._step("ssh", "failed", self._since(t0), failure_reason(e))
            return
        self._step("ssh", "passed", self._since(t0),
                   f"logged in as {seen.user} at {st.host}:{st.ssh_port or 22}")
        if plan.gpu_count > 0:
            ok = len(seen.gpus) >= plan.gpu_count
            self._step("gpu", "passed" if ok else "failed", 0.0,
                       f"nvidia-smi sees {len(seen.gpus)} of {plan.gpu_count}: "
                       f"{', '.join(seen.gpus) or 'none'}")
        else:
            self._step("gpu", "not_applicable", 0.0, "the offer has no GPU")
        if plan.k3s_reason is not None:
            self._step("k3s", "not_applicable", 0.0, plan.k3s_reason)
        else:
            runtime = ("the NVIDIA runtime class registered" if seen.k3s_gpu_runtime
                       else "no NVIDIA runtime class")
            # With a GPU on the machine, k3s must offer it to pods: its `nvidia` runtime class.
            ok = bool(seen.k3s_ready) and (plan.gpu_count == 0 or bool(seen.k3s_gpu_runtime))
            self._step("k3s", "passed" if ok else "failed", 0.0,
                       f"node {'Ready' if seen.k3s_ready else 'not Ready'}, {runtime}"
                       + (f": {seen.detail}" if seen.detail else ""))

    async def _interrupt(self, name: str, allocation_id: str, phases: list[str],
                         task_queue: str | None = None) -> None:
        """Start an allocation, cancel it once it is in one of `phases` (after killing its worker,
        for the kill step), and pass only if the cloud then lists nothing of it."""
        async def run() -> str:
            await self._allocate(allocation_id, until_ready=False, task_queue=task_queue)
            seen = await self._phase(allocation_id, phases)
            where = f"cancelled in phase {seen.phase.value}"
            if task_queue is not None and seen.phase not in ENDED:
                self._state.kill_now = allocation_id  # the caller kills its worker now
                await workflow.wait_condition(lambda: self._killed)
                self._state.kill_now = None
                # Terminated at once: the fresh worker replays the allocation, finds the create it
                # was in cut off (its heartbeat lapses) and tears down what the key made.
                where = (f"worker killed in phase {self._killed_in or seen.phase.value}, then terminated "
                         "on the fresh worker")
            await self._terminate(allocation_id)
            await self._nothing_left([allocation_id])
            return where
        await self._timed(name, run)

    # ------------------------------------------------------------------ allocations

    async def _allocate(self, allocation_id: str, *, until_ready: bool,
                        task_queue: str | None = None) -> AllocationState:
        inp = self._inp
        plan = self._state.plan
        assert plan is not None
        request = AllocateRequest(
            allocation_id=allocation_id, connection_id=inp.connection_id, cloud=inp.cloud,
            targets=[CloudTarget(connection_id=inp.connection_id, cloud=inp.cloud)], project=inp.project,
            name=f"acceptance {inp.run_id}", instance_type=plan.instance_type, region=plan.region,
            gpu=plan.gpu, gpu_count=plan.gpu_count or None, spot=False, k3s=plan.k3s_reason is None,
            ssh_public_keys=inp.ssh_public_keys, timing=inp.timing,
            notes=[f"acceptance run {inp.run_id}"])
        options = {"task_queue": task_queue} if task_queue is not None else {}
        self._state.allocations.append(allocation_id)
        self._started[allocation_id] = workflow.now()
        # REQUEST_CANCEL: a run that ends any way (even terminated) takes its machines with it.
        await start_child(wf.ALLOCATION, AllocationInput(request=request),
                          id=allocation_workflow_id(allocation_id),
                          parent_close_policy=ParentClosePolicy.REQUEST_CANCEL, **options)
        if not until_ready:
            return AllocationState(allocation_id=allocation_id, phase=Phase.VALIDATE)
        st = await self._ready(allocation_id)
        if st.phase != Phase.READY or st.host is None:
            raise StepFailed(f"the allocation ended {st.phase.value}: {st.error or 'no reason given'}")
        return st

    async def _ready(self, allocation_id: str) -> AllocationState:
        t = self._inp.timing
        return await call(acts.AWAIT_ALLOCATION_READY, AllocationReadyInput(
            workflow_id=allocation_workflow_id(allocation_id), heartbeat_every_s=self._hb_every),
            start_to_close_timeout=timedelta(seconds=t.boot_timeout_s + t.ssh_timeout_s + t.k3s_timeout_s),
            heartbeat_timeout=self._hb, retry_policy=self._retry)

    async def _phase(self, allocation_id: str, phases: list[str]) -> AllocationState:
        return await call(acts.AWAIT_ALLOCATION_PHASE, AllocationPhaseInput(
            workflow_id=allocation_workflow_id(allocation_id), phases=phases,
            heartbeat_every_s=self._hb_every),
            start_to_close_timeout=timedelta(seconds=self._inp.timing.boot_timeout_s),
            heartbeat_timeout=self._hb, retry_policy=self._retry)

    async def _terminate(self, allocation_id: str) -> str:
        await call(acts.TERMINATE_ALLOCATION, TerminateAllocationInput(
            workflow_id=allocation_workflow_id(allocation_id), heartbeat_every_s=self._hb_every),
            start_to_close_timeout=timedelta(seconds=self._inp.timing.boot_timeout_s),
            heartbeat_timeout=self._hb,
            retry_policy=retries.until_done(self._inp.timing.max_retry_interval_s))
        self._gone.setdefault(allocation_id, workflow.now())
        return "the cloud shows the machine gone"

    async def _nothing_left(self, allocation_ids: list[str]) -> str:
        found = await self._leftovers(allocation_ids)
        if found:
            raise StepFailed("still billable: " + "; ".join(found))
        return "the cloud lists nothing of its keys"

    async def _leftovers(self, allocation_ids: list[str]) -> list[str]:
        inp = self._inp
        left = await call(acts.LEFTOVERS, LeftoversInput(
            connection_id=inp.connection_id, cloud=inp.cloud, allocation_ids=allocation_ids,
            settle_s=inp.settle_s, poll_interval_s=inp.timing.poll_interval_s,
            heartbeat_every_s=self._hb_every),
            start_to_close_timeout=timedelta(seconds=inp.settle_s + inp.timing.call_timeout_s),
            heartbeat_timeout=self._hb, retry_policy=self._retry)
        for item in left.items:
            if item not in self._state.leftovers:
                self._state.leftovers.append(item)
        return [f"{i.kind} {i.cloud_id} (key {i.key})" for i in left.items]

    async def _clean_up(self) -> None:
        """Tear down every allocation the run started (idempotent: a closed one has nothing left)
        and read the cloud's listing once more; what it still shows is in the state's `leftovers`."""
        started = list(self._state.allocations)
        if not started:
            return
        self._state.kill_now = None
        await asyncio.gather(*(self._terminate(a) for a in started if a not in self._gone),
                             return_exceptions=True)
        try:
            await self._leftovers(started)
        except ActivityError as e:
            workflow.logger.warning("acceptance %s: could not list what remains: %s",
                                    self._inp.run_id, failure_reason(e))

    # ------------------------------------------------------------------ bookkeeping

    async def _timed(self, name: str, body: Callable[[], Awaitable[object]]) -> object | None:
        """Run one step: passed with its detail, or failed with the reason; None when it failed."""
        t0 = workflow.now()
        try:
            out = await body()
        except (StepFailed, ActivityError) as e:
            reason = str(e) if isinstance(e, StepFailed) else failure_reason(e)
            self._step(name, "failed", self._since(t0), reason)
            return None
        detail = out if isinstance(out, str) else None
        if isinstance(out, AllocationState):
            detail = f"ready at {out.host}:{out.ssh_port or 22} as {out.ssh_user or 'root'}"
        self._step(name, "passed", self._since(t0), detail)
        return out

    def _step(self, name: str, outcome: Outcome, seconds: float, detail: str | None) -> None:
        self._state.steps.append(AcceptanceStep(name=name, outcome=outcome, seconds=round(seconds, 3),
                                                detail=detail[:2000] if detail else None))

    def _since(self, t0: datetime) -> float:
        return max(0.0, (workflow.now() - t0).total_seconds())

    def _spent(self) -> float:
        """The machine time paid so far, at the offer's price: each allocation from its start until
        the cloud showed it gone (or now)."""
        plan = self._state.plan
        if plan is None or plan.price_per_hour is None:
            return 0.0
        now = workflow.now()
        hours = sum(((self._gone.get(a) or now) - t).total_seconds() / 3600 for a, t in self._started.items())
        return hours * plan.price_per_hour

    async def _record(self, result: AcceptanceResult | None) -> None:
        inp = self._inp
        await call(acts.RECORD_ACCEPTANCE, RecordAcceptanceInput(
            run_id=inp.run_id, project=inp.project, connection_id=inp.connection_id, result=result,
            state=self._state), start_to_close_timeout=timedelta(seconds=inp.timing.record_timeout_s),
            retry_policy=retries.PERSISTENT)

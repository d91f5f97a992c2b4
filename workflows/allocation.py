"""AllocationWorkflow: one machine's whole life in one workflow.

    allocate ─► ready ─► watch ─┬─► terminate (update) ─► terminated
        │                      ├─► machine lost (signal from the watch) ─► lost
        │                      └─► continue-as-new (same allocation, fresh history)
        └─► failed (capacity everywhere, an error, or a terminate while allocating)

Allocate is validate → plan → for each ranked offer: create → wait running → ports → SSH → k3s →
GPU check → ready. Capacity and quota errors fail over to the next offer outside the failed scope.
Any other failure, a terminate or a cancel terminates what the attempt made (by ref, else by key;
the compensation is in place before the create is issued) and waits until the cloud shows it gone.

`terminate` is an update: idempotent (every caller waits for the same teardown) and it returns
only once the cloud shows the machine gone. The shape of temporalio's ClusterManagerWorkflow sample.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    is_cancelled_exception,
)
from temporalio.exceptions import TimeoutError as ActivityTimeout  # not the builtin wait_condition raises

from messages import activities as acts
from messages import workflows as wf
from messages.activities import (
    CreateInput,
    MachineSetup,
    PhaseMark,
    PlanInput,
    RecordAllocationInput,
    SshTarget,
    TerminateInput,
    ValidateInput,
    WaitRunningInput,
)
from messages.allocation import (
    AllocateRequest,
    AllocationInput,
    AllocationState,
    AttemptRecord,
    CloudTarget,
    MachineLost,
)
from messages.enums import AllocationStatus, AttemptOutcome, ErrorKind, Phase
from messages.ids import attempt_key
from providers.base import Capabilities, FailureScope, Offer, OfferQuery
from workflows import search_attributes as sa
from workflows.calls import call, local_call
from workflows.failures import failure_kind, failure_reason
from workflows.retries import backoff

# Clouds with a documented launch rate (Capabilities.launches_per_s) create on a task queue of their
# own, which their workers' Worker rate-limits across every worker (worker.py). A patch: histories
# recorded before it scheduled every create on the workflow's own queue, and replay so.
LAUNCH_QUEUE_PATCH = "launch-task-queue"


# A patch: histories recorded before it write the allocation's first snapshot, and the one after
# its create, with RECORD_ALLOCATION activities of their own; since, VALIDATE_ALLOCATION and
# WAIT_RUNNING write them first (the same upserts, two activity round trips fewer per allocation).
RECORDS_RIDE_PATCH = "records-ride-along"

# A patch: planning now puts offers a remembered capacity refusal covers last (activities/cloud.py,
# store/capacity.py) and says so in PlanResult.remembered, which the allocation's notes carry. Asked
# only when there is something to say: a plan that demoted nothing leaves the history as before.
CAPACITY_NOTES_PATCH = "capacity-memory-notes"

# A patch: an allocation's path to ready in fewer workflow round trips (each a workflow task and an
# activity dispatch: bench (a)'s overhead, (b)'s and (c)'s Temporal cost). VALIDATE_ALLOCATION runs
# as a local activity (a few database reads and one write, inside the first workflow task), and
# SET_UP_MACHINE does WAIT_SSH, INSTALL_K3S and PROBE_GPUS on one login. Histories recorded before
# it schedule those four as activities of their own, and replay so.
FEWER_TRIPS_PATCH = "fewer-round-trips"


def launch_task_queue(task_queue: str, cloud: str) -> str:
    """Where `cloud`'s creates run, beside the workflow's `task_queue`."""
    return f"{task_queue}-launch-{cloud}"


class _Stop(Exception):
    """Raised inside allocate when a terminate or a cancel arrived: compensate, then stop."""


def _timed_out(err: ActivityError) -> bool:
    return isinstance(err.cause, ActivityTimeout)



@workflow.defn(name=wf.ALLOCATION.name)
class AllocationWorkflow:
    @workflow.init
    def __init__(self, inp: AllocationInput) -> None:
        self._req: AllocateRequest = inp.request
        self._state = inp.state or AllocationState(allocation_id=inp.request.allocation_id,
                                                   phase=Phase.VALIDATE)
        self._caps: dict[str, Capabilities] = {}  # of each cloud that can serve the request
        self._t = self._req.timing
        self._hb = timedelta(seconds=self._t.heartbeat_timeout_s)
        self._hb_every = max(0.2, self._t.heartbeat_timeout_s / 4)
        self._terminate_requested = False
        self._lost: str | None = None
        self._closed = False
        self._marks: list[PhaseMark] = []  # phases entered since the last activity (it records them)
        self._compensating = False  # a teardown is under way: let it finish, never cancel it
        self._allocating: asyncio.Task[bool] | None = None
        self._records_ride = False  # RECORDS_RIDE_PATCH taken: snapshots ride on the next activity
        self._first_record: RecordAllocationInput | None = None
        self._fewer_trips = False  # FEWER_TRIPS_PATCH taken

    # ------------------------------------------------------------------ the entity's interface

    @workflow.query(name=wf.ALLOCATION.state.name)
    def state(self) -> AllocationState:
        return self._state

    @workflow.update(name=wf.ALLOCATION.terminate.name)
    async def terminate(self) -> AllocationState:
        """Remove the machine; returns once the cloud shows it gone. Any number of callers."""
        self._terminate_requested = True
        if self._allocating is not None and not self._allocating.done() and not self._compensating:
            self._allocating.cancel()  # the in-flight activity is cancelled; allocate compensates
        await workflow.wait_condition(lambda: self._closed)
        return self._state

    @workflow.update(name=wf.ALLOCATION.ready.name)
    async def ready(self) -> AllocationState:
        """Wait until the allocation is ready or has ended (failed, terminated, lost): a client's
        long poll instead of polling the `state` query."""
        ended = (Phase.READY, Phase.FAILED, Phase.TERMINATED, Phase.LOST)
        await workflow.wait_condition(lambda: self._state.phase in ended or self._closed)
        return self._state

    @workflow.signal(name=wf.ALLOCATION.machine_lost.name)
    def machine_lost(self, report: MachineLost) -> None:
        if self._state.phase == Phase.READY and self._lost is None:
            self._lost = report.reason
            # Data only (no command depends on it): a job reads it to tell a preemption from a loss.
            self._state.preempted = report.preempted

    # ------------------------------------------------------------------ the life

    @workflow.run
    async def run(self, inp: AllocationInput) -> AllocationState:
        try:
            if inp.state is None:
                workflow.upsert_search_attributes([
                    sa.PROVIDER.value_set(self._req.cloud), sa.PROJECT.value_set(self._req.project),
                    sa.INSTANCE_ID.value_set(self._req.allocation_id)])
                self._records_ride = workflow.patched(RECORDS_RIDE_PATCH)
                if self._records_ride:  # the row exists from the start: validate writes it first
                    self._first_record = self._snapshot(AllocationStatus.PROVISIONING)
                else:
                    await self._record(AllocationStatus.PROVISIONING)
                self._allocating = asyncio.create_task(self._allocate())
                try:
                    await self._allocating
                except asyncio.CancelledError:
                    if not self._terminate_requested:
                        raise  # the workflow itself was cancelled (Web UI): compensation already ran
            if self._state.phase == Phase.READY:
                await self._watch()
        finally:
            self._closed = True
        return self._state

    async def _watch(self) -> None:
        """Ready: wait for a terminate, a lost machine, or the time to start a fresh history."""
        renew = False
        try:
            await workflow.wait_condition(
                lambda: self._terminate_requested or self._lost is not None
                or workflow.info().is_continue_as_new_suggested(),
                timeout=timedelta(seconds=self._t.continue_as_new_after_s))
        except TimeoutError:
            renew = True
        except asyncio.CancelledError:
            await self._teardown(AllocationStatus.TERMINATED, Phase.TERMINATED)  # a cancel is a terminate
            raise
        if self._terminate_requested:
            await self._teardown(AllocationStatus.TERMINATED, Phase.TERMINATED)
        elif self._lost is not None:
            self._state.error = self._lost
            await self._teardown(AllocationStatus.LOST, Phase.LOST)
        elif renew or workflow.info().is_continue_as_new_suggested():
            await workflow.wait_condition(workflow.all_handlers_finished)
            workflow.continue_as_new(AllocationInput(request=self._req, state=self._state))

    async def _teardown(self, status: AllocationStatus, phase: Phase) -> None:
        """Terminate the machine and wait until the cloud shows it gone; shielded from cancels."""
        async def teardown() -> None:
            await self._phase(Phase.TERMINATING, AllocationStatus.TERMINATING)
            await self._terminate_and_verify(self._state.attempts[-1].key)
            self._state.ref = None
            await self._phase(phase, status)

        await asyncio.shield(asyncio.ensure_future(teardown()))

    # ------------------------------------------------------------------ allocate

    async def _allocate(self) -> bool:
        """Run allocate to ready (True), or fail and compensate (False, or raise the failure)."""
        try:
            await self._validate()
            offers = await self._plan()
        except (Exception, asyncio.CancelledError) as e:
            await self._fail(e)  # nothing was created yet: nothing to compensate
            return self._end(e)

        failed_scopes: list[FailureScope] = []
        for offer in offers:
            if any(s.covers(offer) for s in failed_scopes):
                continue
            key = attempt_key(self._req.allocation_id, len(self._state.attempts) + 1)
            try:
                await self._launch(offer, key)
                return True
            except ActivityError as e:
                if self._state.phase == Phase.WAIT_RUNNING and _timed_out(e):
                    # A boot that never finishes: tear this machine down and try the next offer.
                    failed_scopes.append(FailureScope(
                        provider=offer.provider, connection_id=offer.connection_id, region=offer.region,
                        instance_type=offer.instance_type))
                    self._attempt_done(AttemptOutcome.BOOT_TIMEOUT,
                                       f"not running after {self._boot_timeout(offer):g}s")
                    await self._release_attempt(key)
                    continue
                kind = failure_kind(e)
                if kind is None or not kind.fails_over or self._state.ref is not None:
                    await self._compensate(key, e)
                    return self._end(e)
                scope = self._scope_of(e, offer)
                failed_scopes.append(scope)
                outcome = AttemptOutcome.CAPACITY if kind == ErrorKind.CAPACITY else AttemptOutcome.QUOTA
                self._attempt_done(outcome, f"{failure_reason(e)} (scope {scope})")
                await self._record(AllocationStatus.PROVISIONING)
            except (Exception, asyncio.CancelledError) as e:
                await self._compensate(key, e)
                return self._end(e)

        tried = "; ".join(f"{a.offer.provider} {a.offer.instance_type}@{a.offer.region}: {a.outcome}"
                          + (f" ({a.reason})" if a.reason else "") for a in self._state.attempts)
        err = ApplicationError(f"no offer could be launched ({tried or 'none matched'})",
                               type=ErrorKind.NO_CAPACITY, non_retryable=True)
        await self._fail(err)
        raise err

    async def _validate(self) -> None:
        await self._advance(Phase.VALIDATE)
        self._state.notes += self._req.notes
        record, self._first_record = self._first_record, None
        self._fewer_trips = workflow.patched(FEWER_TRIPS_PATCH)
        result = await (local_call if self._fewer_trips else call)(
            acts.VALIDATE_ALLOCATION, ValidateInput(request=self._req, record=record, **self._marked()),
            start_to_close_timeout=timedelta(seconds=self._t.record_timeout_s),
            retry_policy=backoff(self._t.max_retry_interval_s, 5))
        self._caps = result.capabilities
        self._state.notes += [f"skipped {s}" for s in result.skipped]

    async def _plan(self) -> list[Offer]:
        await self._advance(Phase.PLAN)
        req = self._req
        # Spot only when asked for: a user who did not say --spot does not expect preemption.
        query = OfferQuery(gpu=req.gpu, gpu_count=req.gpu_count, region=req.region, spot=bool(req.spot),
                           instance_type=req.instance_type)
        targets = [t for t in req.all_targets() if t.cloud in self._caps]
        plan = await call(acts.PLAN_ALLOCATION, PlanInput(targets=targets, query=query, **self._marked()),
                          start_to_close_timeout=timedelta(seconds=self._t.call_timeout_s),
                          heartbeat_timeout=self._hb, retry_policy=backoff(self._t.max_retry_interval_s, 8))
        self._state.notes += [f"no offers from {f}" for f in plan.failures]
        if plan.remembered and workflow.patched(CAPACITY_NOTES_PATCH):
            self._state.notes += plan.remembered
        if req.max_price_per_hour is not None and plan.offers:
            plan.offers = [o for o in plan.offers if o.price_per_hour <= req.max_price_per_hour]
            if not plan.offers:
                raise ApplicationError(f"no offer at or under ${req.max_price_per_hour:g}/h",
                                       type=ErrorKind.NO_OFFERS, non_retryable=True)
        if not plan.offers:
            clouds = ", ".join(sorted({t.cloud for t in targets}))
            raise ApplicationError(f"no offer of {clouds} matches the request", type=ErrorKind.NO_OFFERS,
                                   non_retryable=True)
        return plan.offers

    async def _launch(self, offer: Offer, key: str) -> None:
        req, st, t = self._req, self._state, self._t
        caps = self._caps[offer.provider]
        st.target = CloudTarget(connection_id=offer.connection_id or req.connection_id, cloud=offer.provider)
        workflow.upsert_search_attributes([sa.PROVIDER.value_set(offer.provider)])
        # Compensation is registered before the create: the attempt (and its key) is recorded,
        # and any failure from here on terminates by key.
        st.attempts.append(AttemptRecord(seq=len(st.attempts) + 1, offer=offer, key=key,
                                         outcome=AttemptOutcome.CREATING))
        st.offer, st.ref, st.host = offer, None, None
        await self._advance(Phase.CREATE)
        wait_cancel = workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED
        paced: dict[str, Any] = {}
        # The create opens the Kubernetes API port to `k8s_api_from` on clouds with direct access. No
        # `patched` branch: the commands are the same either way (one more field of the create's input,
        # one more note), and only requests made since carry the field, so a run started before
        # replays exactly as it ran.
        direct_k8s: dict[str, Any] = {}
        if req.k8s_api_from and req.k3s and caps.k3s != "none" and caps.k8s_api:
            direct_k8s["k8s_api_from"] = req.k8s_api_from
        if caps.launches_per_s and workflow.patched(LAUNCH_QUEUE_PATCH):
            # Waiting there for the rate does not count against the timeouts (they start at dispatch).
            paced["task_queue"] = launch_task_queue(workflow.info().task_queue, offer.provider)
        st.ref = await call(
            acts.CREATE_INSTANCE,
            CreateInput(target=st.target, offer=offer, key=key, ssh_public_keys=req.ssh_public_keys,
                        image=req.image, ports=req.ports, heartbeat_every_s=self._hb_every,
                        poll_interval_s=t.poll_interval_s, k3s_at_boot=req.k3s and caps.k3s == "cloud-init",
                        lifetime_s=req.lifetime_s(), **direct_k8s, **self._marked()),
            # A retry may first wait out the cloud's in-flight window (clouds without a token).
            start_to_close_timeout=timedelta(seconds=t.call_timeout_s + caps.create_in_flight_s),
            heartbeat_timeout=self._hb,
            retry_policy=backoff(t.max_retry_interval_s, 8), cancellation_type=wait_cancel, **paced)
        self._attempt_done(AttemptOutcome.CREATED)
        # The machine's id, for the watch and the sweep: written first by WAIT_RUNNING.
        created = self._snapshot(AllocationStatus.PROVISIONING) if self._records_ride else None
        if created is None:
            await self._record(AllocationStatus.PROVISIONING)

        await self._advance(Phase.WAIT_RUNNING)
        status = await call(
            acts.WAIT_RUNNING,
            WaitRunningInput(target=st.target, ref=st.ref, poll_interval_s=t.poll_interval_s,
                             heartbeat_every_s=self._hb_every, record=created, **self._marked()),
            # One bound for the whole wait, retries included: past it, the next offer is tried.
            schedule_to_close_timeout=timedelta(seconds=self._boot_timeout(offer)),
            heartbeat_timeout=self._hb,
            retry_policy=backoff(t.max_retry_interval_s, 20), cancellation_type=wait_cancel)
        st.host, st.ssh_port, st.ssh_user = status.host, status.ssh_port, status.ssh_user

        if req.ports:
            # Adapters open ports at create (LaunchSpec.ports); this phase records that they did.
            await self._advance(Phase.PORTS)
            st.notes.append(f"ports {', '.join(map(str, req.ports))} opened at create")
        if direct_k8s:
            st.notes.append(f"Kubernetes API (6443) opened at create to {', '.join(req.k8s_api_from)} only")

        assert st.host is not None
        ssh = SshTarget(host=st.host, port=st.ssh_port or 22, user=st.ssh_user or caps.login_user,
                        poll_interval_s=t.poll_interval_s,
                        authorize_keys=req.ssh_public_keys if caps.user_keys == "ssh" else [],
                        via=st.target if caps.bastion else None)
        await self._advance(Phase.SSH)
        k3s_skipped = self._k3s_skipped(caps)
        if not self._fewer_trips:
            await self._ssh_steps(ssh, k3s_skipped)
        else:
            # One activity marks K3S and GPU_CHECK as it reaches them; the workflow's phase stays SSH.
            if k3s_skipped:
                st.notes.append(k3s_skipped)
            st.gpus = await call(
                acts.SET_UP_MACHINE,
                MachineSetup(**{**dict(ssh), **self._marked()}, install_k3s=k3s_skipped is None),
                start_to_close_timeout=timedelta(seconds=t.ssh_timeout_s + 60
                                                 + (0 if k3s_skipped else t.k3s_timeout_s)),
                heartbeat_timeout=self._hb, retry_policy=backoff(t.max_retry_interval_s, 3))
        expected = offer.gpu.count if offer.gpu else 0
        if expected and len(st.gpus) != expected:
            st.notes.append(f"offer promised {expected} GPU(s); nvidia-smi shows {len(st.gpus)}")

        await self._advance(Phase.READY, AllocationStatus.READY)

    def _k3s_skipped(self, caps: Capabilities) -> str | None:
        """Why k3s is not installed on this machine (a note), or None when it is."""
        if not self._req.k3s:
            return "k3s skipped: not requested"
        if caps.k3s == "none":
            return f"k3s skipped: {caps.k3s_reason or caps.display_name + ' cannot host k3s'}"
        return None

    async def _ssh_steps(self, ssh: SshTarget, k3s_skipped: str | None) -> None:
        """WAIT_SSH, INSTALL_K3S and PROBE_GPUS as activities of their own (before FEWER_TRIPS_PATCH)."""
        st, t = self._state, self._t
        await call(acts.WAIT_SSH, ssh.model_copy(update=self._marked()),
                   start_to_close_timeout=timedelta(seconds=t.ssh_timeout_s),
                   heartbeat_timeout=self._hb,
                   retry_policy=backoff(t.max_retry_interval_s, 2))  # it polls inside; a retry covers a crash
        await self._advance(Phase.K3S)
        if k3s_skipped:
            st.notes.append(k3s_skipped)
        else:
            await call(acts.INSTALL_K3S, ssh.model_copy(update=self._marked()),
                       start_to_close_timeout=timedelta(seconds=t.k3s_timeout_s),
                       heartbeat_timeout=self._hb, retry_policy=backoff(t.max_retry_interval_s, 3))
        await self._advance(Phase.GPU_CHECK)
        st.gpus = await call(acts.PROBE_GPUS, ssh.model_copy(update=self._marked()),
                             start_to_close_timeout=timedelta(seconds=60),
                             heartbeat_timeout=self._hb, retry_policy=backoff(t.max_retry_interval_s, 3))

    # ------------------------------------------------------------------ failure paths

    async def _compensate(self, key: str, err: BaseException) -> None:
        """Terminate whatever this attempt made (by ref, else by key), verify it is gone, end."""
        self._compensating = True
        stopped = self._stopping(err)
        self._attempt_done(AttemptOutcome.CANCELLED if stopped else AttemptOutcome.FAILED,
                           None if stopped else failure_reason(err))
        self._state.error = self._error_of(err)
        await self._release_attempt(key)
        # "terminating" until the cloud shows the machine gone; only then "failed" or "terminated"
        await asyncio.shield(asyncio.ensure_future(self._phase(*self._end_status())))

    async def _release_attempt(self, key: str) -> None:
        """Tear down what the attempt under `key` made. Shielded: a terminate or cancel must not
        interrupt the teardown it asked for."""
        async def release() -> None:
            await self._phase(Phase.COMPENSATING, AllocationStatus.TERMINATING)
            await self._terminate_and_verify(key)
            self._state.ref = None

        await asyncio.shield(asyncio.ensure_future(release()))

    def _boot_timeout(self, offer: Offer) -> float:
        return self._caps[offer.provider].boot_timeout_s or self._t.boot_timeout_s

    async def _fail(self, err: BaseException) -> None:
        self._state.error = self._error_of(err)
        await asyncio.shield(asyncio.ensure_future(self._phase(*self._end_status())))

    def _error_of(self, err: BaseException) -> str | None:
        if self._terminate_requested:
            return None  # the user asked for it: not an error
        return "cancelled" if self._stopping(err) else failure_reason(err)

    def _end_status(self) -> tuple[Phase, AllocationStatus]:
        if self._terminate_requested:
            return Phase.TERMINATED, AllocationStatus.TERMINATED  # the user asked: not a failure
        return Phase.FAILED, AllocationStatus.FAILED

    def _end(self, err: BaseException) -> bool:
        """After compensation: a terminate ends allocate quietly; a cancel stays a cancel; any other
        failure fails the workflow with the reason (visible as Failed in the Web UI)."""
        if self._terminate_requested:
            return False
        if self._stopping(err):
            raise CancelledError("allocation cancelled")  # a fresh one: the workflow closes as Canceled
        if isinstance(err, ApplicationError):
            raise ApplicationError(err.message, type=err.type, non_retryable=True)
        kind = failure_kind(err) or ErrorKind.ALLOCATION_FAILED
        raise ApplicationError(failure_reason(err), type=kind, non_retryable=True)

    def _stopping(self, err: BaseException) -> bool:
        return isinstance(err, _Stop) or is_cancelled_exception(err) or self._terminate_requested

    async def _terminate_and_verify(self, key: str) -> None:
        assert self._state.target is not None  # set with the attempt whose key this is
        await call(acts.TERMINATE_AND_VERIFY,
                   TerminateInput(target=self._state.target, key=key, ref=self._state.ref, **self._marked(),
                                  poll_interval_s=self._t.poll_interval_s, heartbeat_every_s=self._hb_every),
                   start_to_close_timeout=timedelta(seconds=self._t.boot_timeout_s),
                   heartbeat_timeout=self._hb, retry_policy=backoff(self._t.max_retry_interval_s))

    # ------------------------------------------------------------------ bookkeeping

    def _attempt_done(self, outcome: AttemptOutcome, reason: str | None = None) -> None:
        # A created attempt that fails later is "failed"/"cancelled": the outcome is the attempt's end.
        last = self._state.attempts[-1] if self._state.attempts else None
        if last is not None and last.outcome in (AttemptOutcome.CREATING, AttemptOutcome.CREATED):
            last.outcome, last.reason = outcome, reason

    @staticmethod
    def _scope_of(err: ActivityError, offer: Offer) -> FailureScope:
        """What the failure names, on the offer's connection (another connection's quota is its own);
        the offer's region when the cloud named nothing narrower."""
        cause = err.cause
        if isinstance(cause, ApplicationError) and cause.details and isinstance(cause.details[0], dict):
            named = cause.details[0].get("scope")
            if isinstance(named, dict):
                return FailureScope.model_validate({**named, "connection_id": offer.connection_id})
        return FailureScope(provider=offer.provider, connection_id=offer.connection_id, region=offer.region)

    async def _advance(self, phase: Phase, status: AllocationStatus = AllocationStatus.PROVISIONING) -> None:
        """Enter the next phase of the happy path, unless a terminate or cancel arrived meanwhile
        (an activity that completes despite a cancel request returns normally). The phase is
        recorded by the next activity the workflow calls; reaching ready is recorded at once."""
        if self._terminate_requested or workflow.cancellation_reason() is not None:
            raise _Stop("allocation stopped")
        self._state.phase = phase
        workflow.upsert_search_attributes([sa.PHASE.value_set(phase.value)])
        self._marks.append(PhaseMark(status=status, phase=phase))
        if status == AllocationStatus.READY:
            await self._record(status)

    def _marked(self) -> dict[str, Any]:
        """The pending phase marks, handed to the next activity (which writes them first)."""
        marks, self._marks = self._marks, []
        return {"allocation_id": self._req.allocation_id, "marks": marks}

    async def _phase(self, phase: Phase, status: AllocationStatus = AllocationStatus.PROVISIONING) -> None:
        self._state.phase = phase
        workflow.upsert_search_attributes([sa.PHASE.value_set(phase.value)])
        await self._record(status)

    async def _record(self, status: AllocationStatus) -> None:
        await call(acts.RECORD_ALLOCATION,
                   RecordAllocationInput(request=self._req, state=self._state, status=status,
                                         **self._marked()),
                   start_to_close_timeout=timedelta(seconds=self._t.record_timeout_s),
                   retry_policy=backoff(self._t.max_retry_interval_s))

    def _snapshot(self, status: AllocationStatus) -> RecordAllocationInput:
        """The record `_record` would write now, to ride on the next activity (RECORDS_RIDE_PATCH).
        A copy: the state moves on before that activity is scheduled. Pending phase marks stay
        with the activity itself, which writes them after the snapshot, as `_record` then the
        activity did."""
        return RecordAllocationInput(request=self._req, state=self._state.model_copy(deep=True),
                                     status=status, allocation_id=self._req.allocation_id)

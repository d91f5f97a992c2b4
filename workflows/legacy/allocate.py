"""AllocateWorkflow: validate -> plan -> for each ranked offer: create -> running -> ports -> SSH
-> k3s -> GPU check -> ready. Ends at ready, returning the AllocationState.

Capacity and quota errors fail over to the next offer outside the failed scope. Any other
failure, or a cancel, terminates the machine by key (compensation registered before the
create is issued) and waits until the cloud shows it gone, then fails.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, is_cancelled_exception

from messages import activities as acts
from messages import workflows as wf
from messages.activities import (
    CloudTarget,
    CreateInput,
    LegacyPlanInput,
    RecordAllocationInput,
    SshTarget,
    TerminateInput,
    ValidateInput,
    WaitRunningInput,
)
from messages.allocation import AllocateRequest, AllocationState, AttemptRecord, Timing
from messages.enums import AllocationStatus, AttemptOutcome, ErrorKind, Phase
from messages.ids import attempt_key
from providers.base import Capabilities, Offer, OfferQuery
from workflows import search_attributes as sa
from workflows.calls import call
from workflows.failures import failure_kind, failure_reason


def in_scope(offer: Offer, scope: str) -> bool:
    """Does a failed scope ("provider", "provider/region", "provider/region/zone", or a bare
    region/zone) cover `offer`?"""
    path = [offer.provider, offer.region, offer.zone or ""]
    parts = scope.split("/")
    if parts == path[: len(parts)]:
        return True
    return scope in (offer.region, offer.zone)


class _Retry:
    @staticmethod
    def calls(t: Timing, attempts: int = 8) -> RetryPolicy:
        return RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                           maximum_interval=timedelta(seconds=t.max_retry_interval_s),
                           maximum_attempts=attempts)

    @staticmethod
    def forever(t: Timing) -> RetryPolicy:
        return RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                           maximum_interval=timedelta(seconds=t.max_retry_interval_s))


@workflow.defn(name=wf.LEGACY_ALLOCATE.name)
class AllocateWorkflow:
    @workflow.init
    def __init__(self, req: AllocateRequest) -> None:
        self._req = req
        self._state = AllocationState(allocation_id=req.allocation_id, phase=Phase.VALIDATE)
        self._target = CloudTarget(connection_id=req.connection_id, cloud=req.cloud)
        self._t = req.timing
        self._hb = timedelta(seconds=self._t.heartbeat_timeout_s)
        self._hb_every = max(0.2, self._t.heartbeat_timeout_s / 4)

    @workflow.query(name=wf.LEGACY_ALLOCATE.state.name)
    def state(self) -> AllocationState:
        return self._state

    @workflow.run
    async def run(self, req: AllocateRequest) -> AllocationState:
        workflow.upsert_search_attributes([
            sa.PROVIDER.value_set(req.cloud), sa.PROJECT.value_set(req.project),
            sa.INSTANCE_ID.value_set(req.allocation_id),
        ])
        try:
            caps = await self._validate()
            offers = await self._plan()
        except (Exception, asyncio.CancelledError) as e:
            # Nothing was created yet: nothing to compensate.
            await self._fail(e)
            raise self._final_error(e) from None

        failed_scopes: list[str] = []
        for offer in offers:
            if any(in_scope(offer, s) for s in failed_scopes):
                continue
            seq = len(self._state.attempts) + 1
            key = attempt_key(req.allocation_id, seq)
            try:
                await self._launch(offer, seq, key, caps)
                return self._state
            except ActivityError as e:
                kind = failure_kind(e)
                if kind is None or not kind.fails_over or self._state.ref is not None:
                    await self._compensate_and_fail(key, e)
                    raise self._final_error(e) from None
                outcome = AttemptOutcome.CAPACITY if kind == ErrorKind.CAPACITY else AttemptOutcome.QUOTA
                scope = self._scope_of(e) or f"{offer.provider}/{offer.region}"
                failed_scopes.append(scope)
                self._attempt_done(outcome, f"{failure_reason(e)} (scope {scope})")
                await self._record(AllocationStatus.PROVISIONING)
            except (Exception, asyncio.CancelledError) as e:
                await self._compensate_and_fail(key, e)
                raise self._final_error(e) from None

        tried = "; ".join(f"{a.offer.instance_type}@{a.offer.region}: {a.outcome}"
                          for a in self._state.attempts)
        err = ApplicationError(f"no offer could be launched ({tried or 'none matched'})",
                               type=ErrorKind.NO_CAPACITY, non_retryable=True)
        await self._fail(err)
        raise err

    # ------------------------------------------------------------------ phases

    async def _validate(self) -> Capabilities:
        await self._advance(Phase.VALIDATE)
        return await call(
            acts.VALIDATE_REQUEST, ValidateInput(request=self._req),
            start_to_close_timeout=timedelta(seconds=30), retry_policy=_Retry.calls(self._t, 5))

    async def _plan(self) -> list[Offer]:
        await self._advance(Phase.PLAN)
        req = self._req
        # Spot only when asked for: a user who did not say --spot does not expect preemption.
        query = OfferQuery(gpu=req.gpu, gpu_count=req.gpu_count, region=req.region, spot=bool(req.spot))
        offers = await call(
            acts.PLAN_OFFERS, LegacyPlanInput(target=self._target, query=query),
            start_to_close_timeout=timedelta(seconds=self._t.call_timeout_s),
            retry_policy=_Retry.calls(self._t))
        if not offers:
            raise ApplicationError(f"no {req.cloud} offer matches the request", type=ErrorKind.NO_OFFERS,
                                   non_retryable=True)
        return offers

    async def _launch(self, offer: Offer, seq: int, key: str, caps: Capabilities) -> None:
        req, st = self._req, self._state
        # Compensation is registered before the create: the attempt (and its key) is recorded,
        # and any failure from here on terminates by key.
        st.attempts.append(AttemptRecord(seq=seq, offer=offer, key=key, outcome=AttemptOutcome.CREATING))
        st.offer, st.ref, st.host = offer, None, None
        await self._advance(Phase.CREATE)
        st.ref = await call(
            acts.CREATE_INSTANCE,
            CreateInput(target=self._target, offer=offer, key=key, allocation_id=req.allocation_id,
                        ssh_public_keys=req.ssh_public_keys, image=req.image, ports=req.ports,
                        heartbeat_every_s=self._hb_every, lifetime_s=req.lifetime_s()),
            start_to_close_timeout=timedelta(seconds=self._t.call_timeout_s), heartbeat_timeout=self._hb,
            retry_policy=_Retry.calls(self._t),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        self._attempt_done(AttemptOutcome.CREATED)

        await self._advance(Phase.WAIT_RUNNING)
        status = await call(
            acts.WAIT_RUNNING,
            WaitRunningInput(target=self._target, ref=st.ref, poll_interval_s=self._t.poll_interval_s,
                             heartbeat_every_s=self._hb_every),
            start_to_close_timeout=timedelta(seconds=self._t.boot_timeout_s), heartbeat_timeout=self._hb,
            retry_policy=_Retry.calls(self._t, 20),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        st.host, st.ssh_port, st.ssh_user = status.host, status.ssh_port, status.ssh_user

        if req.ports:
            # Adapters open ports at create (LaunchSpec.ports); this phase records that they did.
            await self._advance(Phase.PORTS)
            st.notes.append(f"ports {', '.join(map(str, req.ports))} opened at create")

        assert st.host is not None
        ssh = SshTarget(host=st.host, port=st.ssh_port or 22, user=st.ssh_user or caps.login_user,
                        poll_interval_s=self._t.poll_interval_s)
        await self._advance(Phase.SSH)
        await call(
            acts.WAIT_SSH, ssh,
            start_to_close_timeout=timedelta(seconds=self._t.ssh_timeout_s), heartbeat_timeout=self._hb,
            retry_policy=_Retry.calls(self._t, 2))  # it polls inside; a second try only covers a crash

        await self._advance(Phase.K3S)
        if not req.k3s:
            st.notes.append("k3s skipped: not requested")
        elif caps.k3s == "none":
            st.notes.append(f"k3s skipped: {caps.k3s_reason or caps.display_name + ' cannot host k3s'}")
        else:
            await call(
                acts.INSTALL_K3S, ssh,
                start_to_close_timeout=timedelta(seconds=self._t.k3s_timeout_s), heartbeat_timeout=self._hb,
                retry_policy=_Retry.calls(self._t, 3))

        await self._advance(Phase.GPU_CHECK)
        st.gpus = await call(
            acts.PROBE_GPUS, ssh,
            start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=self._hb,
            retry_policy=_Retry.calls(self._t, 3))
        expected = offer.gpu.count if offer.gpu else 0
        if expected and len(st.gpus) != expected:
            st.notes.append(f"offer promised {expected} GPU(s); nvidia-smi shows {len(st.gpus)}")

        await self._advance(Phase.READY, status=AllocationStatus.READY)

    # ------------------------------------------------------------------ failure paths

    async def _compensate_and_fail(self, key: str, err: BaseException) -> None:
        """Terminate whatever this attempt made (by ref, else by key) and verify it is gone.
        Shielded: a cancel must not interrupt the teardown it asked for."""
        cancelled = is_cancelled_exception(err)
        self._attempt_done(AttemptOutcome.CANCELLED if cancelled else AttemptOutcome.FAILED,
                           None if cancelled else failure_reason(err))
        self._state.error = "cancelled" if cancelled else failure_reason(err)

        async def compensate() -> None:
            # "terminating" until the cloud shows the machine gone; only then "failed"
            await self._phase(Phase.COMPENSATING, status=AllocationStatus.TERMINATING)
            await call(
                acts.TERMINATE_AND_VERIFY,
                TerminateInput(target=self._target, key=key, ref=self._state.ref,
                               poll_interval_s=self._t.poll_interval_s, heartbeat_every_s=self._hb_every),
                start_to_close_timeout=timedelta(seconds=self._t.boot_timeout_s), heartbeat_timeout=self._hb,
                retry_policy=_Retry.forever(self._t))
            self._state.ref = None
            await self._phase(Phase.FAILED, status=AllocationStatus.FAILED)

        await asyncio.shield(asyncio.ensure_future(compensate()))

    async def _fail(self, err: BaseException) -> None:
        self._state.error = "cancelled" if is_cancelled_exception(err) else failure_reason(err)
        await asyncio.shield(asyncio.ensure_future(self._phase(Phase.FAILED, status=AllocationStatus.FAILED)))

    def _final_error(self, err: BaseException) -> BaseException:
        """Re-raise a cancel as a cancel; anything else fails the workflow with the reason."""
        if is_cancelled_exception(err):
            # A fresh CancelledError: the workflow then closes as Canceled, not Failed.
            return CancelledError("allocation cancelled")
        if isinstance(err, ApplicationError):
            return ApplicationError(err.message, type=err.type, non_retryable=True)
        return ApplicationError(failure_reason(err), type=failure_kind(err) or ErrorKind.ALLOCATION_FAILED,
                                non_retryable=True)

    # ------------------------------------------------------------------ bookkeeping

    def _attempt_done(self, outcome: AttemptOutcome, reason: str | None = None) -> None:
        # A created attempt that fails later is "failed"/"cancelled": the outcome is the attempt's end.
        if self._state.attempts and self._state.attempts[-1].outcome in (AttemptOutcome.CREATING,
                                                                         AttemptOutcome.CREATED):
            self._state.attempts[-1].outcome = outcome
            self._state.attempts[-1].reason = reason

    @staticmethod
    def _scope_of(err: ActivityError) -> str | None:
        cause = err.cause
        if isinstance(cause, ApplicationError) and cause.details and isinstance(cause.details[0], dict):
            scope = cause.details[0].get("scope")
            return str(scope) if scope else None
        return None

    async def _advance(self, phase: Phase, status: AllocationStatus = AllocationStatus.PROVISIONING) -> None:
        """Enter the next phase of the happy path, unless a cancel arrived meanwhile (an activity
        that completes despite a cancel request returns normally and the cancel would be lost)."""
        if workflow.cancellation_reason() is not None:
            raise asyncio.CancelledError("allocation cancelled")
        await self._phase(phase, status)

    async def _phase(self, phase: Phase, status: AllocationStatus = AllocationStatus.PROVISIONING) -> None:
        self._state.phase = phase
        workflow.upsert_search_attributes([sa.PHASE.value_set(phase.value)])
        await self._record(status)

    async def _record(self, status: AllocationStatus) -> None:
        await call(
            acts.RECORD_ALLOCATION,
            RecordAllocationInput(request=self._req, state=self._state, status=status),
            start_to_close_timeout=timedelta(seconds=30), retry_policy=_Retry.forever(self._t))

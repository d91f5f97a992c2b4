"""TerminateWorkflow: cancel a still-running allocate (which compensates), then terminate the
machine the allocation holds and finish only when the provider shows it gone."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

from messages import activities as acts
from messages import workflows as wf
from messages.activities import AllocationIdInput, CloudTarget, RecordStatusInput, TerminateInput
from messages.allocation import TerminateRequest, TerminateResult
from messages.enums import AllocationStatus, ErrorKind, Phase
from messages.ids import allocate_workflow_id
from workflows import search_attributes as sa
from workflows.calls import call


@workflow.defn(name=wf.LEGACY_TERMINATE.name)
class TerminateWorkflow:
    @workflow.run
    async def run(self, req: TerminateRequest) -> TerminateResult:
        t = req.timing
        hb = timedelta(seconds=t.heartbeat_timeout_s)
        forever = RetryPolicy(initial_interval=timedelta(seconds=1),
                              maximum_interval=timedelta(seconds=t.max_retry_interval_s))
        workflow.upsert_search_attributes([sa.INSTANCE_ID.value_set(req.allocation_id),
                                           sa.PHASE.value_set(Phase.TERMINATING.value)])

        # A still-running allocate compensates on cancel; wait until it has closed either way.
        try:
            await workflow.get_external_workflow_handle(allocate_workflow_id(req.allocation_id)).cancel()
        except Exception:
            pass  # already closed, or never started: nothing to cancel
        ids = AllocationIdInput(allocation_id=req.allocation_id, poll_interval_s=min(t.poll_interval_s, 1.0))
        await call(
            acts.AWAIT_ALLOCATE_CLOSED, ids,
            start_to_close_timeout=timedelta(seconds=t.boot_timeout_s), heartbeat_timeout=hb,
            retry_policy=forever)

        rec = await call(
            acts.LOAD_INSTANCE, ids, start_to_close_timeout=timedelta(seconds=30),
            retry_policy=forever)
        if rec is None:
            raise ApplicationError(f"unknown allocation {req.allocation_id!r}", type=ErrorKind.NOT_FOUND,
                                   non_retryable=True)
        workflow.upsert_search_attributes([sa.PROVIDER.value_set(rec.cloud)])
        await self._status(req, AllocationStatus.TERMINATING, Phase.TERMINATING)
        if rec.key is not None:
            await call(
                acts.TERMINATE_AND_VERIFY,
                TerminateInput(target=CloudTarget(connection_id=rec.connection_id, cloud=rec.cloud),
                               key=rec.key, ref=rec.ref, poll_interval_s=t.poll_interval_s,
                               heartbeat_every_s=max(0.2, t.heartbeat_timeout_s / 4)),
                start_to_close_timeout=timedelta(seconds=t.boot_timeout_s), heartbeat_timeout=hb,
                retry_policy=forever)
        workflow.upsert_search_attributes([sa.PHASE.value_set(Phase.TERMINATED.value)])
        await self._status(req, AllocationStatus.TERMINATED, Phase.TERMINATED)
        return TerminateResult(allocation_id=req.allocation_id, terminated=rec.key is not None)

    @staticmethod
    async def _status(req: TerminateRequest, status: AllocationStatus, phase: Phase) -> None:
        await call(
            acts.RECORD_STATUS,
            RecordStatusInput(allocation_id=req.allocation_id, status=status, phase=phase),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=req.timing.max_retry_interval_s)))

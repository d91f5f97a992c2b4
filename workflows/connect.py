"""ConnectWorkflow: verify a saved connection's credentials and record the outcome."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from workflows.failures import failure_reason

with workflow.unsafe.imports_passed_through():
    from activities.cloud import CloudActivities
    from activities.io import ConnectionIdInput
    from workflows.models import ConnectRequest, ConnectResult


@workflow.defn(name="ConnectWorkflow")
class ConnectWorkflow:
    @workflow.run
    async def run(self, req: ConnectRequest) -> ConnectResult:
        inp = ConnectionIdInput(connection_id=req.connection_id)
        try:
            return await workflow.execute_activity_method(
                CloudActivities.verify_connection, inp, start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=5), maximum_attempts=3))
        except ActivityError as e:
            # Retries exhausted (cloud unreachable) or the connection row is missing.
            inp.reason = failure_reason(e)
            return await workflow.execute_activity_method(
                CloudActivities.mark_connection_failed, inp, start_to_close_timeout=timedelta(seconds=30))

"""ConnectWorkflow: verify a cloud account's credentials, and save the connection only if they work.

The API starts it and waits for its answer (201 or 400 with the cloud's reason). The business
process lives here, not in the route: if the API dies meanwhile, the workflow still finishes,
and nothing half-verified is ever stored.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from messages import activities as acts
from messages import workflows as wf
from messages.activities import ConnectionIdInput
from messages.connection import ConnectRequest, ConnectResult
from workflows import retries
from workflows.calls import call
from workflows.failures import failure_reason


@workflow.defn(name=wf.CONNECT.name)
class ConnectWorkflow:
    @workflow.run
    async def run(self, req: ConnectRequest) -> ConnectResult:
        try:
            result = await call(
                acts.VERIFY_CREDENTIALS, req, start_to_close_timeout=timedelta(seconds=60),
                retry_policy=retries.QUICK)
        except ActivityError as e:
            # Retries exhausted (the cloud unreachable), or a non-retryable refusal.
            return ConnectResult(connection_id=req.connection_id, ok=False, reason=failure_reason(e))
        if result.ok:
            await call(acts.SAVE_CONNECTION, req.model_copy(update={"account": result.account}),
                       start_to_close_timeout=timedelta(seconds=30),
                       retry_policy=retries.PERSISTENT)
            # From now on a machine this connection holds is watched for losses.
            await call(acts.START_WATCH, ConnectionIdInput(connection_id=req.connection_id),
                       start_to_close_timeout=timedelta(seconds=30),
                       retry_policy=retries.PERSISTENT)
        return result

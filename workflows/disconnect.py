"""DisconnectWorkflow: remove a cloud connection, terminating its live instances first.

The connection is marked `removing` (hidden from planning), every live allocation on it is
terminated by a TerminateWorkflow child (each ends only when the cloud shows the machine gone),
and only then is the row deleted: the terminations still need its credentials.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

from messages import activities as acts
from messages.activities import ConnectionIdInput
from messages.allocation import TerminateRequest
from messages.connection import DisconnectRequest, DisconnectResult
from workflows.calls import call
from workflows.terminate import TerminateWorkflow


@workflow.defn(name="DisconnectWorkflow")
class DisconnectWorkflow:
    @workflow.run
    async def run(self, req: DisconnectRequest) -> DisconnectResult:
        forever = RetryPolicy(maximum_interval=timedelta(seconds=req.timing.max_retry_interval_s))
        ids = ConnectionIdInput(connection_id=req.connection_id)
        live = await call(acts.BEGIN_DISCONNECT, ids, start_to_close_timeout=timedelta(seconds=30),
                          retry_policy=forever)
        # Child ids are derived from this workflow's: a user's own terminate of the same allocation
        # may run at the same time, and terminating twice is harmless (gone is success).
        await asyncio.gather(*(
            workflow.execute_child_workflow(
                TerminateWorkflow.run, TerminateRequest(allocation_id=aid, timing=req.timing),
                id=f"{workflow.info().workflow_id}-terminate-{aid}")
            for aid in live.allocation_ids))
        await call(acts.DELETE_CONNECTION, ids, start_to_close_timeout=timedelta(seconds=30),
                   retry_policy=forever)
        return DisconnectResult(connection_id=req.connection_id, terminated=live.allocation_ids)

"""DisconnectWorkflow: remove a cloud connection, terminating its live instances first.

The connection is marked `removing` (hidden from planning), every live allocation on it is
terminated by a TerminateWorkflow child (each ends only when the cloud shows the machine gone),
and only then is the row deleted: the terminations still need its credentials.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

from messages import activities as acts
from messages import workflows as wf
from messages.activities import ConnectionIdInput, LiveAllocation, TerminateAllocationInput
from messages.connection import DisconnectRequest, DisconnectResult
from workflows import retries
from workflows.calls import call


@workflow.defn(name=wf.DISCONNECT.name)
class DisconnectWorkflow:
    @workflow.run
    async def run(self, req: DisconnectRequest) -> DisconnectResult:
        forever = retries.until_done(req.timing.max_retry_interval_s)
        ids = ConnectionIdInput(connection_id=req.connection_id)
        live = await call(acts.BEGIN_DISCONNECT, ids, start_to_close_timeout=timedelta(seconds=30),
                          retry_policy=forever)
        await asyncio.gather(*(self._terminate(a, req) for a in live.allocations))
        await call(acts.DELETE_CONNECTION, ids, start_to_close_timeout=timedelta(seconds=30),
                   retry_policy=forever)
        return DisconnectResult(connection_id=req.connection_id,
                                terminated=[a.allocation_id for a in live.allocations])

    @staticmethod
    async def _terminate(alloc: LiveAllocation, req: DisconnectRequest) -> None:
        """Each allocation ends when the cloud shows its machine gone (terminating twice is harmless)."""
        await call(acts.TERMINATE_ALLOCATION, TerminateAllocationInput(workflow_id=alloc.workflow_id),
                   start_to_close_timeout=timedelta(seconds=req.timing.boot_timeout_s),
                   heartbeat_timeout=timedelta(seconds=req.timing.heartbeat_timeout_s),
                   retry_policy=retries.until_done(req.timing.max_retry_interval_s))

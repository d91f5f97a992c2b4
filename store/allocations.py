"""Recording an allocation that was just started: the Instance row the API (POST /instances) and the
pool's ScaleWorkflow (activities/pools.py) both write right after AllocationWorkflow started, so lists
show the request at once. The workflow's own record activity writes the same row when its starter
died first; whichever comes first wins and the other completes it."""

from __future__ import annotations

import sqlalchemy as sa

from messages.allocation import AllocateRequest
from messages.enums import AllocationStatus, Phase
from store import instances
from store.db import session_scope
from store.models import Instance


def started_row(request: AllocateRequest, workflow_id: str) -> Instance:
    """The provisioning row of an allocation whose workflow has started (not yet picked up)."""
    return Instance(
        id=request.allocation_id, name=request.name, project=request.project, provider=request.cloud,
        connection_id=request.connection_id, workflow_id=workflow_id, status=AllocationStatus.PROVISIONING,
        phase=Phase.VALIDATE, gpu=request.gpu, gpu_count=request.gpu_count, region=request.region,
        spot=request.spot, note="; ".join(request.notes) or None, lease_hours=request.lease_hours)


def record_started(engine: sa.Engine, request: AllocateRequest, workflow_id: str) -> str:
    """Insert the started allocation's row unless its workflow wrote it first; its status now."""
    row = started_row(request, workflow_id)
    with session_scope(engine) as session:
        instances.insert_instance_if_absent(session, row)
        current = instances.get_instance(session, row.id)
        return current.status if current is not None else row.status

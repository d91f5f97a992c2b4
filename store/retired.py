"""What still depends on a retired workflow type (messages/workflows.py RETIRED): live instances whose
workflow id is a retired type's. With no such row and no open run of a retired type, the type is
drained and its code may go (workflows/README.md, "Retiring a workflow type")."""

from __future__ import annotations

from sqlmodel import Session, col, select

from messages.enums import AllocationStatus
from messages.ids import LEGACY_ALLOCATE_PREFIX
from store.models import Instance

# Workflow ids of the retired AllocateWorkflow: allocations an earlier gpuprov started. Such an
# allocation closed at ready; its live machine was ended through the retired TerminateWorkflow.
RETIRED_ID_PREFIX = LEGACY_ALLOCATE_PREFIX
_LIVE = [s.value for s in AllocationStatus if s.live]


def live_instances_on_retired_workflows(session: Session) -> list[Instance]:
    """Every project's live instances whose workflow is of a retired type, oldest first."""
    on_retired = col(Instance.workflow_id).startswith(RETIRED_ID_PREFIX)
    return list(session.exec(select(Instance).where(on_retired, col(Instance.status).in_(_LIVE))
                             .order_by(col(Instance.created_at), col(Instance.id))).all())

"""retired workflows: refuse to upgrade while a live instance still runs under AllocateWorkflow

The single-shot AllocateWorkflow (and the TerminateWorkflow that ended its machines) were retired
for AllocationWorkflow and their code removed (workflows/README.md, "A rewrite"). This version cannot
terminate an instance started under one, so it refuses to upgrade a database that still has one
live, naming each: terminate them with the previous version first (`gpuprov retired` lists them).
No schema change. Frozen: it reads the table with SQL of its own, not the product's models.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | Sequence[str] | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

def upgrade() -> None:
    rows = op.get_bind().execute(sa.text(
        "SELECT id, project, status, workflow_id FROM instance "
        "WHERE workflow_id LIKE 'allocate-%' AND status IN ('provisioning', 'ready', 'terminating') "
        "ORDER BY id")).all()
    if rows:
        named = "; ".join(f"{r.id} (project {r.project}, {r.status}, workflow {r.workflow_id})" for r in rows)
        raise RuntimeError(
            f"{len(rows)} live instance(s) still run under the retired AllocateWorkflow, which this "
            f"version of gpuprov no longer has: {named}. Terminate them with the previous version "
            "(`gpuprov down ID`; `gpuprov retired` lists what is left), then upgrade.")


def downgrade() -> None:
    pass

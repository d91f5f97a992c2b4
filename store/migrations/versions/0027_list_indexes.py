"""list indexes: the Compute console's lists read as many rows as they show, not the project's history

`instance (project, status, created_at)`: the Cloud tab's "Active cloud instances"
(`GET /instances?status=active`) found the project's rows by `project` alone and filtered and sorted
all of them, every instance it ever had; this finds the live ones directly, in page order per status.
`spend_interval (project, ended_at)`: the spend card's window (`ended_at IS NULL OR ended_at > the
window's start`) likewise read every interval the project ever had.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0027"
down_revision: str | Sequence[str] | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_instance_project_status_created_at", "instance", ["project", "status", "created_at"])
    op.create_index("ix_spend_interval_project_ended_at", "spend_interval", ["project", "ended_at"])


def downgrade() -> None:
    op.drop_index("ix_spend_interval_project_ended_at", "spend_interval")
    op.drop_index("ix_instance_project_status_created_at", "instance")

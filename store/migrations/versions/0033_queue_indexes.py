"""queue indexes: the Workload Queue's page and its counts per kind from the index alone

`job (project, type, status, created_at, id)` and `reported_workload (project, kind, status,
created_at, id)`: the Workload Queue (`GET /workloads?type=ALL`) sorts a project's jobs and reported
workloads by (active, created_at) to cut its page, and counts them per kind. Both read every one
of the project's rows from the table (a job's row holds its command and more); these hold what
both read, so the table is not touched.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0033"
down_revision: str | Sequence[str] | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_job_queue", "job", ["project", "type", "status", "created_at", "id"])
    op.create_index("ix_reported_workload_queue", "reported_workload",
                    ["project", "kind", "status", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_reported_workload_queue", "reported_workload")
    op.drop_index("ix_job_queue", "job")

"""acceptance runs: each run of the acceptance suite, its state and, once ended, its result

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "acceptance_runs",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("connection_id", sa.String(), nullable=False),
        sa.Column("cloud", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("result", sa.String(), nullable=True),
    )
    op.create_index("ix_acceptance_runs_project", "acceptance_runs", ["project"])
    op.create_index("ix_acceptance_runs_cloud", "acceptance_runs", ["cloud"])


def downgrade() -> None:
    op.drop_index("ix_acceptance_runs_cloud", "acceptance_runs")
    op.drop_index("ix_acceptance_runs_project", "acceptance_runs")
    op.drop_table("acceptance_runs")

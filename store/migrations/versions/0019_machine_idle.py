"""machine idle: the watch's idle sample per ready allocation (idle policies)

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "machine_idle",
        sa.Column("allocation_id", sa.String(), primary_key=True),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("sampled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("idle_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("gpu_max_pct", sa.Float(), nullable=True),
        sa.Column("sessions", sa.Integer(), nullable=True),
        sa.Column("job_id", sa.String(), nullable=True),
        sa.Column("error", sa.String(), nullable=True),
    )
    op.create_index("ix_machine_idle_project", "machine_idle", ["project"])


def downgrade() -> None:
    op.drop_index("ix_machine_idle_project", table_name="machine_idle")
    op.drop_table("machine_idle")

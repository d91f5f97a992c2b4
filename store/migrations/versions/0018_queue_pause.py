"""queue pause: a project's queue groups whose jobs are not admitted (pause_queue, /queue/resume)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01

Written beside other revisions on parallel branches: the merge chains them one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "queue_pause",
        sa.Column("project", sa.String(), primary_key=True),
        sa.Column("type", sa.String(), primary_key=True),
        sa.Column("by", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=True),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("queue_pause")

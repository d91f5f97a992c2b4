"""sweep: sightings (orphans/duplicates since when, for the grace period) and actions (what a
sweep removed)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Written beside another 0004 on a parallel branch: the merge chains one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "sweepsighting",
        sa.Column("provider", sa.String(), primary_key=True),
        sa.Column("instance_id", sa.String(), primary_key=True),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("connection_id", sa.String(), nullable=False),
        sa.Column("allocation_id", sa.String(), nullable=True),
        sa.Column("verdict", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
    )
    op.create_table(
        "sweepaction",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("sweep_id", sa.String(), nullable=False),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("connection_id", sa.String(), nullable=False),
        sa.Column("allocation_id", sa.String(), nullable=True),
        sa.Column("verdict", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("first_seen", TS, nullable=True),
        sa.Column("at", TS, nullable=True),
        sa.UniqueConstraint("sweep_id", "provider", "instance_id"),
    )
    op.create_index("ix_sweepaction_sweep_id", "sweepaction", ["sweep_id"])
    op.create_index("ix_sweepaction_allocation_id", "sweepaction", ["allocation_id"])


def downgrade() -> None:
    op.drop_index("ix_sweepaction_allocation_id", table_name="sweepaction")
    op.drop_index("ix_sweepaction_sweep_id", table_name="sweepaction")
    op.drop_table("sweepaction")
    op.drop_table("sweepsighting")

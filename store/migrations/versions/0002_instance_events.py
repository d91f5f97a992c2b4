"""instance_event: every status/phase transition of an instance, in order

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "instanceevent",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("instance_id", sa.String(), sa.ForeignKey("instance.id"), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("phase", sa.String(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_instanceevent_instance_id", "instanceevent", ["instance_id"])


def downgrade() -> None:
    op.drop_index("ix_instanceevent_instance_id", table_name="instanceevent")
    op.drop_table("instanceevent")

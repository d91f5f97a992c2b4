"""connection health: the periodic health check's last answer on each connection (status, reason,
when, how long verify took)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

Written beside other 0008s on parallel branches: the merge chains them one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("connection") as batch:
        batch.add_column(sa.Column("health_status", sa.String(), nullable=True))  # None: never checked
        batch.add_column(sa.Column("health_reason", sa.String(), nullable=True))
        batch.add_column(sa.Column("health_checked_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("health_latency_ms", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("connection") as batch:
        for name in ("health_latency_ms", "health_checked_at", "health_reason", "health_status"):
            batch.drop_column(name)

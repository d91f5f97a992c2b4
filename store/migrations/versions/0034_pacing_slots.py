"""pacing slots: one cloud key's next call across every host

`pacing_slot (lane, next_at)`: when the next call of a key's lane (its calls, or its launches) may
leave, on the database server's clock. Processes of one host already pace a key together through
lock files; on PostgreSQL, processes on other hosts reserve their calls here too
(store/pacing_slots.py). Nothing is stored on SQLite, whose database has only one host.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0034"
down_revision: str | Sequence[str] | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "pacing_slot",
        sa.Column("lane", sa.String(length=100), nullable=False),
        sa.Column("next_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("lane"))


def downgrade() -> None:
    op.drop_table("pacing_slot")

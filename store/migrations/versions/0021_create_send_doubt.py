"""createsend doubted_at: when a create under a key was first known in doubt (its answer never came),
so the allocation's watch hunts for a twin under the key for a while after ready

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("createsend") as batch:
        batch.add_column(sa.Column("doubted_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("createsend") as batch:
        batch.drop_column("doubted_at")

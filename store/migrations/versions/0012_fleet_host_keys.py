"""fleet host keys: each fleet host's and bastion's SSH host key, pinned on first successful probe

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01

Written beside other revisions on parallel branches: the merge chains them one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("fleet_host") as batch:
        batch.add_column(sa.Column("host_key", sa.String(), nullable=True))  # None: not pinned yet
        batch.add_column(sa.Column("host_key_pinned_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("fleet") as batch:
        batch.add_column(sa.Column("bastion_host_key", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("fleet") as batch:
        batch.drop_column("bastion_host_key")
    with op.batch_alter_table("fleet_host") as batch:
        batch.drop_column("host_key_pinned_at")
        batch.drop_column("host_key")

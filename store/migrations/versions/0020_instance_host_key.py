"""instance host key: the SSH host key a cloud machine presented at its first login (trust on first use)

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-01

Every later connection to that machine (k3s, the GPU check, jobs, idle samples) accepts only it.
`host_key_machine` names the machine it was pinned for (the cloud's instance id): an allocation's
later attempt on another machine pins afresh.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("instance") as batch:
        batch.add_column(sa.Column("host_key", sa.String(), nullable=True))  # None: not pinned yet
        batch.add_column(sa.Column("host_key_machine", sa.String(), nullable=True))
        batch.add_column(sa.Column("host_key_pinned_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("instance") as batch:
        batch.drop_column("host_key_pinned_at")
        batch.drop_column("host_key_machine")
        batch.drop_column("host_key")

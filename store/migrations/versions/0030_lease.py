"""lease: the dead-man switch's lease per allocation and the project's default

`instance.lease_hours`: hours a machine lives on without gpuprov renewing its lease before it ends
itself (activities/lease.py; 0: off; null: started before leases, never leased).
`project_defaults.lease_hours`: the project's default for requests that give none (null: 12).

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | Sequence[str] | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("instance") as batch:
        batch.add_column(sa.Column("lease_hours", sa.Float(), nullable=True))
    with op.batch_alter_table("project_defaults") as batch:
        batch.add_column(sa.Column("lease_hours", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("project_defaults") as batch:
        batch.drop_column("lease_hours")
    with op.batch_alter_table("instance") as batch:
        batch.drop_column("lease_hours")

"""installation: the deployment's one identity (ownership tag), shared by every process;
connection.ca_bundle: PEM certificates a connection's endpoint is trusted with

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "installation",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("installation_id", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
    )
    with op.batch_alter_table("connection") as batch:
        batch.add_column(sa.Column("ca_bundle", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("connection") as batch:
        batch.drop_column("ca_bundle")
    op.drop_table("installation")

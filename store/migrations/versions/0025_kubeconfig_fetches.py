"""kubeconfig fetches: who was handed an instance's cluster-admin kubeconfig, from where, when

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "kubeconfig_fetches",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("instance_id", sa.String(), nullable=False),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("principal", sa.String(), nullable=False),
        sa.Column("client_address", sa.String(), nullable=True),
        sa.Column("access", sa.String(), nullable=False),
        sa.Column("fetched_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_kubeconfig_fetches_instance_id", "kubeconfig_fetches", ["instance_id"])
    op.create_index("ix_kubeconfig_fetches_project", "kubeconfig_fetches", ["project"])


def downgrade() -> None:
    op.drop_index("ix_kubeconfig_fetches_project", "kubeconfig_fetches")
    op.drop_index("ix_kubeconfig_fetches_instance_id", "kubeconfig_fetches")
    op.drop_table("kubeconfig_fetches")

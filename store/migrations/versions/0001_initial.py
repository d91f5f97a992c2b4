"""initial schema: connection, instance, attempt, sshidentity (store/models.py as of the foundation)

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "connection",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("endpoint", sa.String(), nullable=True),
        sa.Column("account", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("secret", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TS, nullable=True),
    )
    op.create_index("ix_connection_provider", "connection", ["provider"])

    op.create_table(
        "instance",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("connection_id", sa.String(), nullable=False),
        sa.Column("workflow_id", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("phase", sa.String(), nullable=False),
        sa.Column("gpu", sa.String(), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=True),
        sa.Column("region", sa.String(), nullable=True),
        sa.Column("spot", sa.Boolean(), nullable=True),
        sa.Column("instance_type", sa.String(), nullable=True),
        sa.Column("offer_region", sa.String(), nullable=True),
        sa.Column("price_per_hour", sa.Float(), nullable=True),
        sa.Column("cloud_instance_id", sa.String(), nullable=True),
        sa.Column("key", sa.String(), nullable=True),
        sa.Column("ssh_host", sa.String(), nullable=True),
        sa.Column("ssh_port", sa.Integer(), nullable=True),
        sa.Column("ssh_user", sa.String(), nullable=True),
        sa.Column("gpus_found", sa.JSON(), nullable=True),
        sa.Column("note", sa.String(), nullable=True),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("created_at", TS, nullable=True),
        sa.Column("updated_at", TS, nullable=True),
        sa.Column("ready_at", TS, nullable=True),
        sa.Column("terminated_at", TS, nullable=True),
    )
    op.create_index("ix_instance_provider", "instance", ["provider"])
    op.create_index("ix_instance_status", "instance", ["status"])

    op.create_table(
        "attempt",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("instance_id", sa.String(), sa.ForeignKey("instance.id"), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(), nullable=False),
        sa.Column("instance_type", sa.String(), nullable=False),
        sa.Column("region", sa.String(), nullable=False),
        sa.Column("spot", sa.Boolean(), nullable=False),
        sa.Column("price_per_hour", sa.Float(), nullable=False),
        sa.Column("outcome", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("at", TS, nullable=True),
    )
    op.create_index("ix_attempt_instance_id", "attempt", ["instance_id"])

    op.create_table(
        "sshidentity",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("public_key", sa.String(), nullable=False),
        sa.Column("private_key", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", TS, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("sshidentity")
    op.drop_index("ix_attempt_instance_id", table_name="attempt")
    op.drop_table("attempt")
    op.drop_index("ix_instance_status", table_name="instance")
    op.drop_index("ix_instance_provider", table_name="instance")
    op.drop_table("instance")
    op.drop_index("ix_connection_provider", table_name="connection")
    op.drop_table("connection")

"""jobs: managed jobs, their output in chunks with byte offsets, and the queue's limits

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01

Written beside other revisions on parallel branches: the merge chains them one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job",
        sa.Column("id", sa.String(), primary_key=True),
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("type", sa.String(), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("image", sa.String(), nullable=True),
        sa.Column("gpu", sa.String(), nullable=True),
        sa.Column("gpu_count", sa.Integer(), nullable=True),
        sa.Column("cloud", sa.String(), nullable=True),
        sa.Column("requested_by", sa.String(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("max_price_per_hour", sa.Float(), nullable=True),
        sa.Column("workflow_id", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("allocation_id", sa.String(), nullable=True),
        sa.Column("host", sa.String(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("granted_gpus", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("granted_usd_per_hour", sa.Float(), nullable=False, server_default="0"),
    )
    op.create_index("ix_job_project", "job", ["project"])
    op.create_index("ix_job_status", "job", ["status"])
    op.create_table(
        "job_limit",
        sa.Column("scope", sa.String(), primary_key=True),
        sa.Column("max_gpus", sa.Integer(), nullable=True),
        sa.Column("max_usd_per_hour", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
    )
    lock = op.create_table(
        "job_queue_lock",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("turns", sa.Integer(), nullable=False),
    )
    op.bulk_insert(lock, [{"id": 1, "turns": 0}])
    op.create_table(
        "job_log_chunk",
        sa.Column("job_id", sa.String(), sa.ForeignKey("job.id"), primary_key=True),
        sa.Column("offset", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("job_queue_lock")
    op.drop_table("job_limit")
    op.drop_table("job_log_chunk")
    op.drop_index("ix_job_status", "job")
    op.drop_index("ix_job_project", "job")
    op.drop_table("job")

"""job GPU samples: utilisation and memory of a running job's GPUs, sampled with nvidia-smi

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01

Written beside other revisions on parallel branches: the merge chains them one after the other.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_gpu_sample",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.String(), sa.ForeignKey("job.id"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=False),
        sa.Column("utilization_pct", sa.Float(), nullable=False),
        sa.Column("memory_used_mib", sa.Integer(), nullable=False),
        sa.Column("memory_total_mib", sa.Integer(), nullable=False),
    )
    op.create_index("ix_job_gpu_sample_job_id", "job_gpu_sample", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_job_gpu_sample_job_id", table_name="job_gpu_sample")
    op.drop_table("job_gpu_sample")

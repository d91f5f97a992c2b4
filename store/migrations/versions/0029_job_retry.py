"""job retry: a job's `retry` policy, its attempts, and one record per attempt

`job.retry`: the policy as asked (JSON; null: no restarts); `job.attempts`: attempts made so far
(1 for every job before); `job.attempt_log`: per attempt, its allocation, where its output starts in
the job's one log, and how it ended (store/jobs.py).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | Sequence[str] | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.add_column(sa.Column("retry", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(sa.Column("attempt_log", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job") as batch:
        batch.drop_column("attempt_log")
        batch.drop_column("attempts")
        batch.drop_column("retry")

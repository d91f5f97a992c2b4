"""acceptance lane: one acceptance run at a time per connection

`acceptance_lane (connection_id, run_id, taken_at)`: the run under way on a connection, taken by the
API before it starts a run and let go when the run records its result (store/acceptance_runs.py).
Runs started at once on one account failed each other — a zone's stock taken by the other's
machines, each one's machines the other's leftovers — and doubled the spend (`make fuzz` started 22
on one connection).
Runs from before this revision hold no lane.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0036"
down_revision: str | Sequence[str] | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "acceptance_lane",
        sa.Column("connection_id", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("connection_id"))


def downgrade() -> None:
    op.drop_table("acceptance_lane")

"""spend days: the closed intervals' cost per UTC day, so the spend card stops re-adding its window

`spend_day (project, job_type, day, cost)`: what the closed intervals accrued each UTC day. A closed
interval never changes, so `close_interval` adds its cost here once; the spend card (`GET /spend`)
reads these rows and sums only the intervals not in them (the open ones), instead of every interval
of its 30-day window at each request.
`spend_interval.rolled_up`: true once the interval's cost is in `spend_day`, set in the same
transaction. This upgrade adds the intervals already closed, so the first read is already the short one.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | Sequence[str] | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_interval = sa.table("spend_interval", sa.column("id", sa.Integer()), sa.column("project", sa.String()),
                     sa.column("job_type", sa.String()), sa.column("rate_per_hour", sa.Float()),
                     sa.column("started_at", sa.DateTime(timezone=True)),
                     sa.column("ended_at", sa.DateTime(timezone=True)),
                     sa.column("rolled_up", sa.Boolean()))


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)  # SQLite drops the zone: it is UTC


def _shares(start: datetime, end: datetime, rate: float) -> list[tuple[date, float]]:
    """[start, end)'s cost at `rate` $/hr per UTC day (store/spend.py `day_shares` as of this revision)."""
    shares, day = [], start.astimezone(UTC).date()
    while (midnight := datetime.combine(day, datetime.min.time(), tzinfo=UTC)) < end:
        hours = (min(end, midnight + timedelta(days=1)) - max(start, midnight)).total_seconds() / 3600.0
        if rate * hours > 0.0:
            shares.append((day, rate * hours))
        day += timedelta(days=1)
    return shares


def upgrade() -> None:
    op.create_table(
        "spend_day",
        sa.Column("project", sa.String(), nullable=False),
        sa.Column("job_type", sa.String(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("project", "job_type", "day"))
    with op.batch_alter_table("spend_interval") as batch:
        batch.add_column(sa.Column("rolled_up", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index("ix_spend_interval_rolled_up_project", "spend_interval", ["rolled_up", "project"])

    conn = op.get_bind()
    totals: dict[tuple[str, str, date], float] = defaultdict(float)
    closed = conn.execute(sa.select(_interval.c.project, _interval.c.job_type, _interval.c.rate_per_hour,
                                    _interval.c.started_at, _interval.c.ended_at)
                          .where(_interval.c.ended_at.is_not(None)))
    for project, job_type, rate, started, ended in closed:
        for day, cost in _shares(_aware(started), _aware(ended), rate):
            totals[project, job_type, day] += cost
    if totals:
        days = sa.table("spend_day", sa.column("project", sa.String()), sa.column("job_type", sa.String()),
                        sa.column("day", sa.Date()), sa.column("cost", sa.Float()))
        conn.execute(sa.insert(days), [dict(project=p, job_type=j, day=d, cost=c)
                                       for (p, j, d), c in totals.items()])
    conn.execute(sa.update(_interval).where(_interval.c.ended_at.is_not(None)).values(rolled_up=True))


def downgrade() -> None:
    op.drop_index("ix_spend_interval_rolled_up_project", "spend_interval")
    with op.batch_alter_table("spend_interval") as batch:
        batch.drop_column("rolled_up")
    op.drop_table("spend_day")

"""acceptance lane: one acceptance run at a time per cloud account, not per connection

0036 keyed the lane by connection: one cloud key connected twice (two projects sharing it, or a
connection made again) let two runs share the account — the capacity, the rate limits and the
"nothing billable" listing the lane is there to keep to one run, and the 409 already said "one run
at a time per account". The key is now a digest of the identity the connection verified as
(`connection.account`, with its cloud), or of the connection's id when it has none.

The lanes held at the upgrade are kept, re-keyed; where two runs held lanes on one account, the one
that took its lane first keeps it (the other runs on, but no new run starts beside either).

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-08
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0037"
down_revision: str | Sequence[str] | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_WHEN = sa.DateTime(timezone=True)  # typed, so SQLite's text comes back a datetime to insert again
_LANE = sa.table("acceptance_lane", sa.column("account_key", sa.String()),
                 sa.column("connection_id", sa.String()), sa.column("run_id", sa.String()),
                 sa.column("taken_at", _WHEN))


def _key(provider: str, account: str | None, connection_id: str) -> str:
    """store/acceptance_runs.py lane_key as of this revision (a migration keeps its own copy)."""
    who = f"{provider}\0{account}" if account else f"connection\0{connection_id}"
    return hashlib.sha256(who.encode()).hexdigest()[:32]


def _rekey(held: str, key_column: str, key_of: Callable[[sa.Row[Any]], str]) -> None:
    """Make the table again keyed by `key_column`, each lane of the query `held` (its run_id and
    taken_at, oldest first) under `key_of(row)`: where two fall on one key, the first taken keeps it."""
    found = op.get_bind().execute(sa.text(held).columns(taken_at=_WHEN)).all()
    rows: dict[str, tuple[str, datetime]] = {}
    for row in found:
        rows.setdefault(key_of(row), (row.run_id, row.taken_at))
    op.drop_table("acceptance_lane")
    op.create_table(
        "acceptance_lane",
        sa.Column(key_column, sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(key_column))
    if rows:
        op.bulk_insert(_LANE, [{key_column: k, "run_id": run_id, "taken_at": at}
                               for k, (run_id, at) in rows.items()])


def upgrade() -> None:
    _rekey("SELECT c.provider, c.account, l.connection_id, l.run_id, l.taken_at FROM acceptance_lane l "
           "JOIN connection c ON c.id = l.connection_id ORDER BY l.taken_at, l.run_id",
           "account_key", lambda r: _key(r.provider, r.account, r.connection_id))


def downgrade() -> None:
    # Back to a connection's lane: each held lane's run names its connection (a run whose row is
    # not made yet, an instant at its start, is dropped).
    _rekey("SELECT r.connection_id, l.run_id, l.taken_at FROM acceptance_lane l "
           "JOIN acceptance_runs r ON r.id = l.run_id ORDER BY l.taken_at, l.run_id",
           "connection_id", lambda r: str(r.connection_id))

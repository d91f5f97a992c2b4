"""Rows of a select of columns as named tuples: read by attribute as the model's objects are, for the
lists that read many rows and write none (the console's).

An ORM object per row costs ~20 µs to build; a Row's attribute lookup ~10x a named tuple's
(0.7-1.6 µs against 0.08 measured here), which a list's helpers pay tens of times a row. A record is
neither: one C-level tuple per row, its type made once per shape of select."""

from __future__ import annotations

import collections
import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session


@functools.cache
def _record_type(fields: tuple[str, ...]) -> Any:
    return collections.namedtuple("Record", fields)


def records(rows: Sequence[sa.Row[*tuple[Any, ...]]]) -> list[Any]:
    """`rows` (of one select, of any columns) as named tuples of their columns' keys."""
    if not rows:
        return []
    record = _record_type(tuple(rows[0]._fields))
    return [record._make(row) for row in rows]


def bound_records(session: Session, stmt: sa.Executable, params: dict[str, Any]) -> list[Any]:
    """The rows of `stmt` — a select of columns built once, its values bound by name (`params`) — as
    records, run on the session's connection. For the lists the console refreshes: building a
    statement at each request, and the ORM's execute path (which a select of columns does not use),
    cost them more than the database's read (bench/RESULTS.md, thirty-second round). Past the ORM it
    does not flush first: for a session with nothing pending (a read session, where a flush raises)."""
    return records(session.connection().execute(stmt, params).all())

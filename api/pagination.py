"""One page shape for every list: `?limit=1..200&cursor=<opaque>` in, `{"items", "next_cursor"}` out.

Database lists page by keyset — the sort key (created_at, id) of the last row shown — never by
offset, so rows inserted between two requests are neither skipped nor repeated. Lists computed per
request (live offers) page by offset. Either way the cursor is opaque to clients: base64url of a
small JSON object naming the list it belongs to, so a cursor handed to another list (or mangled)
is a 422 with the reason instead of a wrong page.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, Generic, TypeVar

import sqlalchemy as sa
from fastapi import HTTPException, Query, status
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session
from sqlmodel.sql.expression import SelectOfScalar

from api import strict_json
from store.records import bound_records

T = TypeVar("T")
Row = TypeVar("Row")

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
_CURSOR_VERSION = 1


class Page(BaseModel, Generic[T]):
    """One page of a list. Pass `next_cursor` back as `cursor` for the next page; null: the last page."""

    items: list[T]
    next_cursor: str | None = None


class PageQuery(BaseModel):
    """The paging query parameters every list route takes."""

    model_config = ConfigDict(frozen=True)

    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="items per page")
    cursor: str | None = Field(None, min_length=1, max_length=1000,
                               description="`next_cursor` of the previous page (opaque)")


PageDep = Annotated[PageQuery, Query()]


def bad_cursor(reason: str) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"invalid cursor: {reason}")


def encode_cursor(kind: str, **position: Any) -> str:
    payload = {"v": _CURSOR_VERSION, "k": kind, **position}
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, kind: str) -> dict[str, Any]:
    """The position inside `cursor`; HTTP 422 when it is not a cursor of list `kind`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        # Strict: a forged cursor's NaN or lone surrogate would otherwise reach the database (a 500).
        payload = strict_json.loads(raw, root="cursor")
    except (binascii.Error, ValueError, RecursionError):
        raise bad_cursor("not a cursor this API issued (pass next_cursor back unchanged)") from None
    if not isinstance(payload, dict) or payload.get("v") != _CURSOR_VERSION:
        raise bad_cursor("not a cursor this API issued (pass next_cursor back unchanged)")
    if payload.get("k") != kind:
        raise bad_cursor(f"it belongs to another list, not {kind}")
    return payload


# --------------------------------------------------------------------------- keyset (database)

# fetch_built's bound values: the cursor's position and the rows read (a page's and one more).
_AT, _ID, _LIMIT = "keyset_at", "keyset_id", "keyset_limit"
_MAX_BUILT = 32  # paged statements a keyset keeps: two per base (a list's filters), far from this


@dataclass(frozen=True)
class Keyset:
    """A list ordered by (created_at, id), newest first (`descending`) or oldest first."""

    kind: str
    created_at: Any  # the mapped column
    id: Any
    descending: bool
    # fetch_built's paged statements: (id of the base statement, after a cursor) -> statement
    _built: dict[tuple[int, bool], Any] = field(default_factory=dict, init=False, compare=False, repr=False)

    def position(self, cursor: str | None) -> tuple[datetime, str] | None:
        if cursor is None:
            return None
        payload = decode_cursor(cursor, self.kind)
        try:
            at, key = datetime.fromisoformat(payload["t"]), payload["i"]
        except (KeyError, TypeError, ValueError):
            raise bad_cursor("its position is malformed") from None
        if not isinstance(key, str):
            raise bad_cursor("its position is malformed")
        return at, key

    def fetch(self, session: Session, stmt: SelectOfScalar[Row],
              page: PageQuery) -> tuple[list[Row], str | None]:
        """Rows of `stmt` (filtered, not yet ordered) after the cursor, and the next cursor."""
        return self._fetch(session, stmt, page)

    def fetch_built(self, session: Session, base: sa.Select[Any], params: dict[str, Any],
                    page: PageQuery) -> tuple[list[tuple[Any, ...]], str | None]:
        """`fetch` for a select of columns built once, its values bound by name (`params`): its rows
        as records (store/records.py), read by attribute as the model's would be, without the ORM
        building an object per row (a 200-row page of instances: 6.0 -> 3.1 ms) or a Row's slow
        attribute lookup (its fields: 7.3 -> 2.8 ms). Its paged forms (ordered, limited, after a
        cursor) are built once too, and run on the session's connection: building a statement, and
        the ORM's execute path around a select of columns, cost a console list more than the
        database's read (bench/RESULTS.md, thirty-second round).
        `base` must live as long as the process (a module's constant, or a cached builder's)."""
        after = self.position(page.cursor)
        key = (id(base), after is not None)
        stmt = self._built.get(key)
        if stmt is None:  # two threads may both build it: the same statement, either is kept
            if len(self._built) >= _MAX_BUILT:  # a base built per request would grow this without end
                raise RuntimeError(f"{self.kind}: fetch_built takes a statement built once, not per request")
            stmt = self._built[key] = self._paged(base, sa.bindparam(_AT), sa.bindparam(_ID),
                                                  sa.bindparam(_LIMIT), after=after is not None)
        values = {**params, _LIMIT: page.limit + 1}
        if after is not None:
            values[_AT], values[_ID] = after
        return self._cut(bound_records(session, stmt, values), page)

    def _paged(self, stmt: Any, at: Any, key: Any, limit: Any, *, after: bool) -> Any:
        """`stmt` in the list's order, `limit` rows, after the position (`at`, `key`) if `after`."""
        at_col, id_col = self.created_at, self.id
        if after:
            if self.descending:
                stmt = stmt.where(sa.or_(at_col < at, sa.and_(at_col == at, id_col < key)))
            else:
                stmt = stmt.where(sa.or_(at_col > at, sa.and_(at_col == at, id_col > key)))
        order = (at_col.desc(), id_col.desc()) if self.descending else (at_col.asc(), id_col.asc())
        return stmt.order_by(*order).limit(limit)

    def _fetch(self, session: Session, stmt: Any, page: PageQuery) -> tuple[list[Any], str | None]:
        after = self.position(page.cursor)
        at, key = after if after is not None else (None, None)
        rows = list(session.exec(self._paged(stmt, at, key, page.limit + 1, after=after is not None)).all())
        return self._cut(rows, page)

    def _cut(self, rows: Sequence[Any], page: PageQuery) -> tuple[list[Any], str | None]:
        """The page of `rows` (up to `limit` + 1 read) and the next page's cursor, if there is one."""
        at_col, id_col = self.created_at, self.id
        rows = list(rows)
        if len(rows) <= page.limit:
            return rows, None
        rows = rows[:page.limit]
        last = rows[-1]
        at_value = getattr(last, at_col.key)
        return rows, encode_cursor(self.kind, t=at_value.isoformat(), i=getattr(last, id_col.key))


# --------------------------------------------------------------------------- offset (computed lists)


def offset_of(kind: str, page: PageQuery, *, query: str = "") -> int:
    """Where an offset-paged list's page starts: its cursor's offset (0 without one). `query`
    fingerprints the filters: a cursor is only valid with the filters it was issued for."""
    if page.cursor is None:
        return 0
    payload = decode_cursor(page.cursor, kind)
    offset = payload.get("o")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise bad_cursor("its position is malformed")
    if payload.get("q", "") != query:
        raise bad_cursor("it was issued for other filters (start again without a cursor)")
    return offset


def offset_cursor(kind: str, end: int, more: bool, *, query: str = "") -> str | None:
    """The next page's cursor of an offset-paged list whose page ended before `end`."""
    return encode_cursor(kind, o=end, q=query) if more else None


def offset_page(kind: str, items: Sequence[T], page: PageQuery, *, query: str = "") -> Page[T]:
    """A page of a list computed per request (see `offset_of`)."""
    start = offset_of(kind, page, query=query)
    end = start + page.limit
    following = offset_cursor(kind, end, end < len(items), query=query)
    return Page(items=list(items[start:end]), next_cursor=following)

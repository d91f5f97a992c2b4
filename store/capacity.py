"""Capacity memory (store/models.py CapacityRefusal): every capacity or quota refusal a create met,
remembered per connection with its scope, so the next allocation tries the offers it covers last
instead of rediscovering the same sold-out region (activities/capacity_memory.py).

Decay: a first refusal is remembered FIRST_SPAN; a repeat while still remembered doubles the span
(from the repeat), up to MAX_SPAN; one after the memory ran out starts again at FIRST_SPAN. A
successful create clears every remembered scope that covers its offer."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select
from sqlmodel.sql.expression import SelectOfScalar

from store.clock import aware
from store.models import CapacityRefusal, Connection

FIRST_SPAN = timedelta(minutes=5)
MAX_SPAN = timedelta(minutes=60)
MAX_REASON = 500  # characters of the cloud's message kept

Kind = Literal["capacity", "quota"]
KINDS: tuple[Kind, ...] = ("capacity", "quota")


@dataclass(frozen=True)
class Scope:
    """What a refusal names on one connection: a region at least; a zone, a type, when the cloud said."""

    provider: str
    connection_id: str
    region: str
    zone: str | None = None
    instance_type: str | None = None


def scope_id(scope: Scope, kind: str) -> str:
    parts = [scope.provider, scope.connection_id, scope.region, scope.zone, scope.instance_type, kind]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def span(refusals: int) -> timedelta:
    """How long a scope refused `refusals` times in a row is remembered after the last refusal."""
    return min(MAX_SPAN, FIRST_SPAN * 2 ** max(0, min(refusals - 1, 16)))


def remember_refusal(session: Session, scope: Scope, kind: str, reason: str, now: datetime,
                     *, _retry: bool = True) -> CapacityRefusal:
    """Remember (or remember again, longer) that `scope` refused a create for `kind`."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    key = scope_id(scope, kind)
    row = session.get(CapacityRefusal, key, with_for_update=True)
    reason = reason[:MAX_REASON]
    if row is None:
        row = CapacityRefusal(id=key, provider=scope.provider, connection_id=scope.connection_id,
                              region=scope.region, zone=scope.zone, instance_type=scope.instance_type,
                              kind=kind, reason=reason, refusals=1, first_at=now, last_at=now,
                              until=now + span(1))
    elif aware(row.until) > now:  # a repeat while remembered: longer
        row.refusals += 1
        row.reason, row.last_at, row.until = reason, now, now + span(row.refusals)
    else:  # forgotten already: a new run of refusals
        row.refusals, row.reason, row.first_at, row.last_at, row.until = 1, reason, now, now, now + span(1)
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # another worker remembered the same scope first: count on its row
        session.rollback()
        if not _retry:
            raise
        return remember_refusal(session, scope, kind, reason, now, _retry=False)
    session.refresh(row)
    return row


def _covering(provider: str, connection_id: str, region: str, zone: str | None,
              instance_type: str | None) -> list[sa.ColumnElement[bool]]:
    """Rows whose scope covers that offer: every field a row sets matches it."""
    return [col(CapacityRefusal.provider) == provider, col(CapacityRefusal.connection_id) == connection_id,
            col(CapacityRefusal.region) == region,
            sa.or_(col(CapacityRefusal.zone).is_(None), col(CapacityRefusal.zone) == zone),
            sa.or_(col(CapacityRefusal.instance_type).is_(None),
                   col(CapacityRefusal.instance_type) == instance_type)]


def clear_success(session: Session, provider: str, connection_id: str, region: str, zone: str | None,
                  instance_type: str | None, now: datetime) -> int:
    """A create of that offer succeeded: forget every refusal whose scope covers it (expired or not).
    How many rows went."""
    del now  # the success clears whatever is remembered, whenever it would have been forgotten
    result = session.execute(sa.delete(CapacityRefusal).where(
        *_covering(provider, connection_id, region, zone, instance_type)))
    session.commit()
    return int(getattr(result, "rowcount", 0) or 0)


def live_refusals(session: Session, connection_ids: Sequence[str], now: datetime) -> list[CapacityRefusal]:
    """The refusals still remembered on these connections."""
    if not connection_ids:
        return []
    return list(session.exec(select(CapacityRefusal).where(
        col(CapacityRefusal.connection_id).in_(list(connection_ids)),
        col(CapacityRefusal.until) > now)).all())


def live_in_project(project: str, now: datetime) -> SelectOfScalar[CapacityRefusal]:
    """The refusals still remembered on the project's connections, unordered (the API pages it by
    first_at: api/routers/capacity.py). Only the project's own connections: memory never crosses."""
    return (select(CapacityRefusal)
            .join(Connection, col(Connection.id) == col(CapacityRefusal.connection_id))
            .where(col(Connection.project) == project, col(CapacityRefusal.until) > now))


def forget_expired(session: Session, now: datetime) -> int:
    """Delete the rows no longer remembered; how many."""
    result = session.execute(sa.delete(CapacityRefusal).where(col(CapacityRefusal.until) <= now))
    session.commit()
    return int(getattr(result, "rowcount", 0) or 0)

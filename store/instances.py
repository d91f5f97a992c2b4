"""Instances (store/models.py Instance): the rows of allocations, their launch attempts and their
status/phase events.

Functions take an open Session and commit only where they say so, so a caller can group writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm.util import identity_key
from sqlmodel import Session, col, select

from messages.enums import AllocationStatus
from store.db import dialect_insert
from store.models import Attempt, Instance, InstanceEvent, table_of, utcnow

# Instance statuses while a cloud machine may exist (or be about to).
LIVE_STATUSES = frozenset(s.value for s in AllocationStatus if s.live)


def is_live() -> sa.ColumnElement[bool]:
    """`instance.status IN (the live statuses)` with the list written into the SQL, not bound: only
    then can a planner see that it is the live rows' partial indexes' predicate (store/models.py
    LIVE_PREDICATE) and read those instead of every row of the project."""
    live: sa.BindParameter[list[str]] = sa.bindparam("live", sorted(LIVE_STATUSES), expanding=True,
                                                     literal_execute=True)
    return col(Instance.status).in_(live)


_INSTANCE, _EVENT, _ATTEMPT = table_of(Instance), table_of(InstanceEvent), table_of(Attempt)
# What a later snapshot of an attempt may change (not its instance, seq, or when it began).
_ATTEMPT_FIELDS = ("provider", "instance_type", "region", "spot", "price_per_hour", "outcome", "reason")


def list_instances(session: Session, *, project: str | None = None, status: str | None = None,
                   connection_id: str | None = None) -> Sequence[Instance]:
    stmt = select(Instance)
    if project is not None:
        stmt = stmt.where(Instance.project == project)
    if status is not None:
        stmt = stmt.where(Instance.status == status)
    if connection_id is not None:
        stmt = stmt.where(Instance.connection_id == connection_id)
    return session.exec(stmt.order_by(col(Instance.created_at).desc(), col(Instance.id))).all()


def live_instances(session: Session, connection_id: str) -> list[Instance]:
    """Instances of a connection that may still hold (or be about to hold) a cloud machine."""
    return [i for i in list_instances(session, connection_id=connection_id) if i.status in LIVE_STATUSES]


def get_instance(session: Session, instance_id: str) -> Instance | None:
    return session.get(Instance, instance_id)


def insert_instance_if_absent(session: Session, row: Instance) -> bool:
    """Insert `row` unless its id exists (the allocation's workflow may have written it first:
    whichever comes first wins, the other completes it) and commit. True if this call inserted it."""
    if session.get(Instance, row.id) is not None:
        return False
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # written concurrently by the workflow's record activity
        session.rollback()
        return False
    return True


def add_instance_if_absent(session: Session, row: Instance) -> None:
    """Insert `row` unless its id exists, in the caller's transaction (no commit). For a writer that
    read no row and may meet one the API inserts meanwhile (insert_instance_if_absent): an insert
    that found the id taken would fail the caller's whole transaction; this one does nothing."""
    insert = dialect_insert(session)
    values = {c.name: value for c in _INSTANCE.columns if (value := getattr(row, c.name)) is not None}
    session.execute(insert(_INSTANCE).values(values).on_conflict_do_nothing(index_elements=[_INSTANCE.c.id]))


def update_instance(session: Session, instance_id: str, **fields: Any) -> Instance | None:
    """Set fields on an instance row (bumping updated_at) and commit. Unknown fields raise."""
    row = session.get(Instance, instance_id)
    if row is None:
        return None
    for name, value in fields.items():
        if name not in Instance.model_fields:
            raise AttributeError(f"Instance has no field {name!r}")
        setattr(row, name, value)
    row.updated_at = utcnow()
    session.add(row)
    session.commit()
    return row


def attempts_of(session: Session, instance_id: str) -> Sequence[Attempt]:
    stmt = select(Attempt).where(Attempt.instance_id == instance_id).order_by(col(Attempt.seq))
    return session.exec(stmt).all()


def events_of(session: Session, instance_id: str, after: int = 0) -> Sequence[InstanceEvent]:
    """Status/phase transitions in order; `after` skips those already seen (by event id)."""
    stmt = (select(InstanceEvent)
            .where(InstanceEvent.instance_id == instance_id, col(InstanceEvent.id) > after)
            .order_by(col(InstanceEvent.id)))
    return session.exec(stmt).all()


def record_attempt(session: Session, attempt: Attempt, *, commit: bool = True) -> None:
    """Insert or update the attempt (instance_id, seq): activities retry, rows must not double.
    An update keeps the row's `at` (when the attempt began). `commit=False` leaves the commit to
    a caller writing more in the same transaction. Statements, as mark_phases: every snapshot an
    allocation records comes here once per attempt."""
    found = session.execute(sa.select(_ATTEMPT.c.id).where(_ATTEMPT.c.instance_id == attempt.instance_id,
                                                           _ATTEMPT.c.seq == attempt.seq)).first()
    values = {name: getattr(attempt, name) for name in _ATTEMPT_FIELDS}
    if found is None:
        session.execute(sa.insert(_ATTEMPT).values(instance_id=attempt.instance_id, seq=attempt.seq,
                                                   at=attempt.at, **values))
    else:
        session.execute(sa.update(_ATTEMPT).where(_ATTEMPT.c.id == found.id).values(**values))
        _expire_held(session, Attempt, found.id)
    if commit:
        session.commit()


def has_events(session: Session, instance_id: str) -> bool:
    """Whether the instance has any event yet (an allocation's first record logs its state)."""
    stmt = sa.select(_EVENT.c.id).where(_EVENT.c.instance_id == instance_id).limit(1)
    return session.execute(stmt).first() is not None


def _event_row(instance_id: str, state: tuple[str, str], at: datetime) -> dict[str, Any]:
    """An event row's values, for an insert statement."""
    return {"instance_id": instance_id, "status": state[0], "phase": state[1], "at": at}


def add_event(session: Session, instance_id: str, state: tuple[str, str]) -> None:
    """Append one (status, phase) event; the caller commits."""
    session.execute(sa.insert(_EVENT).values(**_event_row(instance_id, state, utcnow())))


def _expire_held(session: Session, model: type, key: object) -> None:
    """A row written with a statement: an object of it this session already holds would read the old
    values, so it reloads when next read."""
    held = session.identity_map.get(identity_key(model, key))
    if held is not None:
        session.expire(held)


def mark_phases(session: Session, instance_id: str, marks: Sequence[tuple[str, str]], *,
                commit: bool = True, after: tuple[str, str] | None = None) -> None:
    """Move the row through (status, phase) marks in order, one event per change, and commit
    (`commit=False`: the caller commits, with whatever else belongs in the same transaction).
    A retried call changes nothing (each mark equal to the row's state is skipped). A row whose
    allocation has ended (terminated, failed, lost) takes no mark: an activity the workflow
    cancelled without waiting for it may still be running after the end was recorded, and a step
    it then marks (SET_UP_MACHINE marks each as it starts) would show the machine provisioning
    again, for good. `after`: mark only a row still at that (status, phase) — a step marked by the
    activity that marked the one before, which must not undo what its workflow recorded since (a
    teardown begun while the activity had not yet seen its cancel).

    Statements on the tables, not the ORM: every step of every allocation comes here, and loading
    the whole row as an object to change two of its columns was half of each call's time."""
    if not marks:
        return
    found = session.execute(sa.select(_INSTANCE.c.status, _INSTANCE.c.phase)
                            .where(_INSTANCE.c.id == instance_id)).first()
    if found is None or not AllocationStatus(found.status).live:  # ended: terminated, failed, lost
        return
    state = (found.status, found.phase)
    if after is not None and state != tuple(after):
        return
    now, events = utcnow(), []
    for mark in marks:
        if tuple(mark) != state:
            state = (mark[0], mark[1])
            events.append(_event_row(instance_id, state, now))
    if events:
        session.execute(sa.insert(_EVENT), events)
    session.execute(sa.update(_INSTANCE).where(_INSTANCE.c.id == instance_id)
                    .values(status=state[0], phase=state[1], updated_at=now))
    _expire_held(session, Instance, instance_id)
    if commit:
        session.commit()

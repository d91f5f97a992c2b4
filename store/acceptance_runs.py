"""Acceptance runs (store/models.py AcceptanceRun): written by the run's workflow as it goes, read by
the API and the CLI, and exported as the committed results file's entries (providers/support.py).
One run at a time per connection (AcceptanceLane): the API takes the lane before it makes a run's row
and starts it, and the run's last record — its result — lets it go."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa
from sqlmodel import Session, col, select

from messages.acceptance import AcceptanceResult, AcceptanceState, RecordAcceptanceInput
from store.clock import aware
from store.models import AcceptanceLane, AcceptanceRun, utcnow

_TAKE = sa.text("INSERT INTO acceptance_lane (connection_id, run_id, taken_at) "
                "VALUES (:connection_id, :run_id, :now) ON CONFLICT (connection_id) DO NOTHING")
_TAKE_OVER = sa.text("UPDATE acceptance_lane SET run_id = :run_id, taken_at = :now "
                     "WHERE connection_id = :connection_id AND run_id = :holder")
_LET_GO = sa.text("DELETE FROM acceptance_lane WHERE run_id = :run_id")  # a run holds one lane at most


def save(session: Session, inp: RecordAcceptanceInput) -> None:
    """The run's row, made at its start and brought up to date at each record (idempotent: a retried
    record writes the same)."""
    row = session.get(AcceptanceRun, inp.run_id) or AcceptanceRun(
        id=inp.run_id, project=inp.project, connection_id=inp.connection_id, cloud=inp.state.cloud,
        state=inp.state.model_dump_json())
    row.state = inp.state.model_dump_json()
    if inp.result is not None:
        row.result = inp.result.model_dump_json()
        row.finished_at = row.finished_at or utcnow()
        session.execute(_LET_GO, {"run_id": row.id})
    session.add(row)
    session.commit()


def forget(session: Session, run_id: str) -> None:
    """Remove a run's row, if made, and let its lane go (its workflow never started)."""
    session.execute(_LET_GO, {"run_id": run_id})
    row = session.get(AcceptanceRun, run_id)
    if row is not None:
        session.delete(row)
    session.commit()


def has_ended(session: Session, run_id: str) -> bool:
    """Whether the run recorded its end (its result)."""
    row = session.get(AcceptanceRun, run_id)
    return row is not None and row.result is not None


class Lane(NamedTuple):
    """Who holds a connection's lane, since when."""

    run_id: str
    taken_at: datetime


def take_lane(session: Session, connection_id: str, run_id: str, *, holder: str | None = None) -> Lane | None:
    """Take `connection_id`'s lane for `run_id`: None when taken, else who holds it. `holder`: take it
    from that run (one that is not under way), unless another took it since."""
    for _ in range(3):  # the lane let go between the insert and the read: try again
        args = {"connection_id": connection_id, "run_id": run_id, "holder": holder, "now": utcnow()}
        taken = session.connection().execute(_TAKE if holder is None else _TAKE_OVER, args).rowcount
        session.commit()
        if taken == 1:
            return None
        lane = session.get(AcceptanceLane, connection_id)
        if lane is not None:
            return Lane(lane.run_id, aware(lane.taken_at))
        holder = None
    raise RuntimeError(f"the acceptance lane of {connection_id} was taken and let go three times over")


def get(session: Session, project: str, run_id: str) -> AcceptanceRun | None:
    row = session.get(AcceptanceRun, run_id)
    return row if row is not None and row.project == project else None


def state_of(row: AcceptanceRun) -> AcceptanceState:
    return AcceptanceState.model_validate_json(row.state)


def result_of(row: AcceptanceRun) -> AcceptanceResult | None:
    return AcceptanceResult.model_validate_json(row.result) if row.result else None


def results(session: Session, *, project: str | None = None,
            clouds: Sequence[str] | None = None) -> list[AcceptanceResult]:
    """Every ended run's result (of `project` and `clouds`, or all), oldest first: with the committed
    file's, what each cloud's support status is derived from on this deployment."""
    stmt = select(AcceptanceRun).where(col(AcceptanceRun.result).is_not(None))
    if project is not None:
        stmt = stmt.where(AcceptanceRun.project == project)
    if clouds is not None:
        stmt = stmt.where(col(AcceptanceRun.cloud).in_(list(clouds)))
    rows = session.exec(stmt.order_by(col(AcceptanceRun.created_at), col(AcceptanceRun.id))).all()
    return [r for r in (result_of(row) for row in rows) if r is not None]

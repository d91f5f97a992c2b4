"""Acceptance runs (store/models.py AcceptanceRun): written by the run's workflow as it goes, read by
the API and the CLI, and exported as the committed results file's entries (providers/support.py)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlmodel import Session, col, select

from messages.acceptance import AcceptanceResult, AcceptanceState, RecordAcceptanceInput
from store.models import AcceptanceRun, utcnow


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
    session.add(row)
    session.commit()


def forget(session: Session, run_id: str) -> None:
    """Remove a run's row (its workflow never started)."""
    row = session.get(AcceptanceRun, run_id)
    if row is not None:
        session.delete(row)
        session.commit()


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

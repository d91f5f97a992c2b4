"""Query helpers for reported workloads (store/models.py ReportedWorkload): work run elsewhere that
the Workload Queue lists beside gpuprov's own jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlmodel import Session, col, select

from store.models import ReportedWorkload, utcnow


def get_reported(session: Session, project: str, workload_id: str) -> ReportedWorkload | None:
    return session.get(ReportedWorkload, (project, workload_id))


def reported_of(session: Session, project: str) -> Sequence[ReportedWorkload]:
    return session.exec(select(ReportedWorkload).where(ReportedWorkload.project == project)
                        .order_by(col(ReportedWorkload.created_at))).all()


def report(session: Session, project: str, workload_id: str,
           fields: dict[str, Any]) -> tuple[ReportedWorkload, bool]:
    """Insert or replace the reported workload and commit; True when it is new. `created_at` is
    the first report's: a later report updates the row, it does not make it newer."""
    row = session.get(ReportedWorkload, (project, workload_id))
    created = row is None
    if row is None:
        row = ReportedWorkload(project=project, id=workload_id, **fields)
    else:
        for name, value in fields.items():
            setattr(row, name, value)
        row.updated_at = utcnow()
    session.add(row)
    session.commit()
    session.refresh(row)
    return row, created


def forget(session: Session, project: str, workload_id: str) -> bool:
    row = session.get(ReportedWorkload, (project, workload_id))
    if row is None:
        return False
    session.delete(row)
    session.commit()
    return True

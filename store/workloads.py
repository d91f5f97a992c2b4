"""Query helpers for the Workload Queue's sources: reported workloads (store/models.py
ReportedWorkload, work run elsewhere) and gpuprov's own managed jobs with their machines."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlmodel import Session, col, select

from store.models import Instance, Job, ReportedWorkload, utcnow


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


def jobs_of(session: Session, project: str) -> Sequence[Job]:
    """The project's managed jobs (the queue's other source)."""
    return session.exec(select(Job).where(Job.project == project)).all()


def machines_of(session: Session, jobs: Sequence[Job]) -> dict[str, Instance]:
    """The instances the jobs' machines are, by allocation id."""
    ids = [j.allocation_id for j in jobs if j.allocation_id]
    if not ids:
        return {}
    return {i.id: i for i in session.exec(select(Instance).where(col(Instance.id).in_(ids))).all()}

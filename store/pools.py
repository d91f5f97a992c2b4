"""Query helpers for pools (store/models.py Pool): the desired spec the API writes and ScaleWorkflow
reads each pass, and the last reconcile's view the workflow writes back."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlmodel import Session, col, select

from messages.pool import PoolStatus
from store.db import commit_unless_gone
from store.models import Pool, utcnow


def get_pool(session: Session, project: str, name: str) -> Pool | None:
    return session.exec(select(Pool).where(Pool.project == project, Pool.name == name)).first()


def list_pools(session: Session, project: str) -> Sequence[Pool]:
    return session.exec(select(Pool).where(Pool.project == project).order_by(col(Pool.name))).all()


def save_pool(session: Session, row: Pool) -> Pool:
    row.updated_at = utcnow()
    session.add(row)
    session.commit()
    session.refresh(row)
    return row


def mark_deleting(session: Session, pool_id: str) -> Pool | None:
    """Desired size 0, then forgotten by its workflow once the cloud shows none of its machines."""
    row = session.get(Pool, pool_id)
    if row is not None:
        row.status, row.updated_at = PoolStatus.DELETING, utcnow()
        session.add(row)
        session.commit()
        session.refresh(row)
    return row


def record_reconcile(session: Session, pool_id: str, *, machines: list[dict[str, Any]], errors: list[str],
                     reconciled_at: datetime) -> None:
    row = session.get(Pool, pool_id)
    if row is None:
        return  # forgotten meanwhile
    row.machines, row.errors, row.reconciled_at = machines, errors, reconciled_at
    session.add(row)
    commit_unless_gone(session)


def record_errors(session: Session, pool_id: str, errors: list[str]) -> None:
    """A pass that could not count the cloud: its errors, the last counted machines kept."""
    row = session.get(Pool, pool_id)
    if row is not None:
        row.errors = errors
        session.add(row)
        commit_unless_gone(session)


def forget(session: Session, pool_id: str) -> None:
    row = session.get(Pool, pool_id)
    if row is not None:
        session.delete(row)
        session.commit()

"""Idle samples of ready allocations (store/models.py MachineIdle): written by the watch each round
(activities/idle.py), read by the `idle` When and the `terminate_idle` Then (activities/policy.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlmodel import Session, col, select

from messages.enums import AllocationStatus
from messages.workloads import ACTIVE
from store.models import Instance, Job, MachineIdle

IDLE_GPU_PCT = 5.0  # a GPU under this is idle (issue 11)
# A sample older than this (or than the When's minutes, if longer) says nothing about now: the watch
# stopped sampling the machine (its worker down, the cloud not answering). Such a machine is not idle.
FRESH_MINUTES = 10.0


def running_jobs(session: Session, allocation_ids: Sequence[str]) -> dict[str, str]:
    """allocation id -> the job on it now, for those of `allocation_ids` that have one not ended — a
    job still provisioning counts: its command is about to start there."""
    if not allocation_ids:
        return {}
    active = [s.value for s in ACTIVE]
    rows = session.exec(select(Job.allocation_id, Job.id).where(
        col(Job.allocation_id).in_(list(allocation_ids)), col(Job.status).in_(active))).all()
    return {str(a): j for a, j in rows}


def is_idle(gpu_max_pct: float | None, sessions: int, job_id: str | None) -> bool:
    return (gpu_max_pct is None or gpu_max_pct < IDLE_GPU_PCT) and sessions == 0 and job_id is None


def record_sample(session: Session, *, allocation_id: str, project: str, at: datetime,
                  gpu_max_pct: float | None = None, sessions: int | None = None, job_id: str | None = None,
                  error: str | None = None) -> MachineIdle:
    """Store one sample: an idle one keeps the running `idle_since` (or starts it at `at`); a busy or
    failed one clears it."""
    row = session.get(MachineIdle, allocation_id)
    if row is None:
        row = MachineIdle(allocation_id=allocation_id, project=project, sampled_at=at)
    idle = error is None and sessions is not None and is_idle(gpu_max_pct, sessions, job_id)
    row.idle_since = (row.idle_since or at) if idle else None
    row.sampled_at, row.gpu_max_pct, row.sessions = at, gpu_max_pct, sessions
    row.job_id, row.error = job_id, error
    session.add(row)
    session.commit()
    session.refresh(row)
    return row


def idle_longer_than(session: Session, project: str, minutes: float, now: datetime) -> list[Instance]:
    """The project's ready allocations idle for more than `minutes` (oldest idle first). A machine
    no longer ready, or whose last sample is stale (FRESH_MINUTES), is not counted."""
    since = now - timedelta(minutes=minutes)
    fresh = now - timedelta(minutes=max(minutes, FRESH_MINUTES))
    rows = session.exec(select(Instance).join(MachineIdle, col(MachineIdle.allocation_id) == col(Instance.id))
                        .where(col(MachineIdle.project) == project, col(MachineIdle.idle_since).is_not(None),
                               col(MachineIdle.idle_since) <= since, col(MachineIdle.sampled_at) >= fresh,
                               col(Instance.status) == AllocationStatus.READY)
                        .order_by(col(MachineIdle.idle_since))).all()
    return list(rows)


def get(session: Session, allocation_id: str) -> MachineIdle | None:
    return session.get(MachineIdle, allocation_id)

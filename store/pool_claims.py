"""Jobs on a pool's machines: which of a pool's machines are ready, which run a job (busy), and the
claim a job takes on one free machine.

A claim is the job's row naming the machine: `Job.allocation_id` = the pool machine's allocation id
(messages/pool.py `pl<pool id>-<name>-s<slot>g<gen>`), held while the job has not ended. A machine is
busy while a job that has not ended names it; the job's end (its row recorded ended) releases the
claim — the machine stays in the pool.

Race-free: `claim` is one transaction whose first statement writes the queue's lock row
(store/queue.py `take_turn`), so claims take turns with each other (and with admissions): each one
reads the claims as the previous one committed them, and two jobs never claim one machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlmodel import Session, col, select

from messages.enums import AllocationStatus
from messages.job import JobStatus
from messages.pool import PoolStatus, pool_allocation_id
from store.models import Instance, Job, Pool, utcnow
from store.queue import take_turn

ENDED = sorted(s.value for s in JobStatus if s.ended)


def machine_prefix(pool: Pool) -> str:
    """Every allocation id of the pool's machines starts with this (any slot, any generation)."""
    return pool_allocation_id(pool.id, pool.name, 0, 0).rsplit("-s", 1)[0] + "-s"


def ready_machines(session: Session, pool: Pool) -> Sequence[Instance]:
    """The pool's machines whose allocation is ready, oldest first (claims take the oldest: the
    scale-down takes the newest idle ones)."""
    return session.exec(select(Instance).where(col(Instance.id).startswith(machine_prefix(pool)),
                                               Instance.status == AllocationStatus.READY)
                        .order_by(col(Instance.created_at), col(Instance.id))).all()


def busy(session: Session, allocation_ids: Iterable[str]) -> set[str]:
    """Of these machines, those a job that has not ended has claimed."""
    ids = list(allocation_ids)
    if not ids:
        return set()
    rows = session.exec(select(Job.allocation_id).where(col(Job.allocation_id).in_(ids),
                                                        col(Job.status).not_in(ENDED))).all()
    return {a for a in rows if a is not None}


@dataclass
class Claim:
    machine: Instance | None = None  # the claimed machine (None: none free yet, or `gone`)
    gone: str | None = None  # why the job can never get one (the pool or the job is gone)


def claim(session: Session, job_id: str, pool_id: str) -> Claim:
    """Claim a ready machine of the pool that runs no other job for the job (commits). A job that
    holds a claim already gets the same machine back (a retried claim)."""
    take_turn(session)
    job = session.get(Job, job_id)
    pool = session.get(Pool, pool_id)
    if job is None or JobStatus(job.status).ended:
        session.commit()
        return Claim(gone="the job has ended")
    if pool is None or pool.status != PoolStatus.ACTIVE:
        session.commit()
        return Claim(gone="its pool was deleted")
    if job.allocation_id is not None and job.allocation_id.startswith(machine_prefix(pool)):
        mine = session.get(Instance, job.allocation_id)
        session.commit()
        return Claim(machine=mine)
    ready = ready_machines(session, pool)
    taken = busy(session, (m.id for m in ready))
    free = next((m for m in ready if m.id not in taken), None)
    if free is not None:
        job.allocation_id, job.updated_at = free.id, utcnow()
        session.add(job)
    session.commit()
    return Claim(machine=free)

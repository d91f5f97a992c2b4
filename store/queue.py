"""The job queue: limits per project and for the installation (max concurrent GPUs, max $/hr),
admission in order, and the ledger of grants.

Order. Waiting jobs (queueable types, not yet granted) are ordered by priority (higher first), then
round-robin between projects at equal priority (each project's jobs ranked by age; rank 0 of every
project before any rank 1), then age. A job's PRI is its 1-based place in that order.

Admission. A JobWorkflow asks `admit` (an activity) until it is granted. `admit` is one database
transaction whose first statement writes the single `job_queue_lock` row: on PostgreSQL that row
lock, on SQLite the database's write lock, makes admissions take turns — each one reads the grants
and limits as the previous one committed them, so two jobs can never both take the last slot. Inside
it the order is walked with the capacity in use (every grant not yet released): a job that fits is
counted as granted (a job ahead keeps its place even before its own workflow asks again); a job
that does not fit blocks those behind it in its project (a project's order is strict), and one over
the installation's limit blocks everything behind it. A job over a limit on its own (with nothing
else running) is passed over instead: it could start only once that limit is raised, and would
block the rest until then. The API refuses such a job (409, the limit named): one is in the queue
only when a limit was lowered under it. The asking job is granted only if the walk grants it. A
grant is the job's row (`granted_at`, the GPUs and $/hr it holds); it is released (`released_at`)
when the job ends, after its machine is verified gone — so the ledger of grants bounds the machines
that exist. A retried `admit` finds its grant and answers granted again.

Jobs of types that are not queued (serving, task, kb_compile) are granted in the same kind of
transaction when the API accepts them, or refused with the limit they would exceed.

Held jobs. A waiting job is passed over — it keeps its place and its PRI, gets no grant, holds no
capacity and blocks no one behind it — while its project's queue group (messages/queue_groups.py:
sft covers sft and dpo, grpo covers grpo and ppo) is paused (`QueuePause`: the pause_queue policy
action, POST /queue/pause; lifted by POST /queue/resume), or while its project's daily budget is
reached (store/policies.py budget_refusal: new machines wait for tomorrow or a raised budget).
`held` says why, for the job's `waiting_reason`; for a job not held, the same walk as admission
says what it waits for (`Held.waiting`): the limit it would exceed, the job ahead of it that
blocks it, or nothing but its next ask (it fits now) — a waiting job always has a reason.

A job counts against a $/hr limit at its max_price_per_hour (its machine costs at most that); where
a $/hr limit applies, a job must name one. GPUs: gpu_count when it asks for a GPU, else 0.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlmodel import Session, col, select

from messages.job import JobStatus, JobType
from messages.queue_groups import group_of
from messages.workloads import queue_order as workload_order
from store import policies
from store.models import Job, JobLimit, ProjectBudget, QueueLock, QueuePause, utcnow
from store.records import bound_records

GLOBAL = "*"  # JobLimit.scope of the installation's limits (project ids are slugs: never "*")
QUEUEABLE = sorted(t.value for t in JobType if t.queueable)


@dataclass
class Usage:
    gpus: int = 0
    usd_per_hour: float = 0.0

    def add(self, gpus: int, usd: float) -> None:
        self.gpus += gpus
        self.usd_per_hour += usd


@dataclass
class Limits:
    by_scope: dict[str, JobLimit] = field(default_factory=dict)

    def over(self, scope: str, used: Usage | None, gpus: int, usd: float) -> str | None:
        """The limit of `scope` that `gpus` and `usd` more would exceed, named; None if it fits.
        `used` None: nothing else in use (the job alone)."""
        lim = self.by_scope.get(scope)
        if lim is None:
            return None
        who = "the installation's" if scope == GLOBAL else f"project {scope}'s"
        now = used if used is not None else Usage()
        if lim.max_gpus is not None and now.gpus + gpus > lim.max_gpus:
            in_use = f"{now.gpus} in use, " if used is not None else ""
            return f"{who} limit of {lim.max_gpus} GPUs ({in_use}this job needs {gpus})"
        if lim.max_usd_per_hour is not None and now.usd_per_hour + usd > lim.max_usd_per_hour + 1e-9:
            in_use = f"${now.usd_per_hour:g}/h in use, " if used is not None else ""
            return f"{who} limit of ${lim.max_usd_per_hour:g}/h ({in_use}this job up to ${usd:g}/h)"
        return None

    def never_fits(self, project: str, gpus: int, usd: float) -> str | None:
        """The limit (the installation's or the project's) that the job exceeds on its own, with
        nothing else running, named: it cannot start until that limit is raised. None: it can."""
        return self.over(GLOBAL, None, gpus, usd) or self.over(project, None, gpus, usd)

    def needs_price(self, project: str) -> bool:
        return any(lim.max_usd_per_hour is not None
                   for s, lim in self.by_scope.items() if s in (project, GLOBAL))


def gpus_of(job: Job) -> int:
    return (job.gpu_count or 1) if job.gpu else 0


def usd_of(job: Job) -> float:
    return job.max_price_per_hour or 0.0


def queue_order(waiting: Iterable[Job]) -> list[Job]:
    """Priority, then round-robin between projects at equal priority, then age: the Workload
    Queue's one order (messages/workloads.py queue_order), applied to job rows or records."""
    return workload_order(waiting)


def waits(job: Job) -> bool:
    """Whether `job` is in the queue `positions` numbers: what `_waiting` selects, for a job in hand."""
    return job.status == JobStatus.QUEUED and job.granted_at is None and job.type in QUEUEABLE


def _waiting(stmt: Any, project: Any) -> Any:
    """`stmt` narrowed to the waiting jobs: every project's (`project` None), or one project's (its
    name, or a bound parameter)."""
    stmt = stmt.where(col(Job.status) == JobStatus.QUEUED, col(Job.granted_at).is_(None),
                      col(Job.type).in_(QUEUEABLE))
    return stmt if project is None else stmt.where(col(Job.project) == project)


def waiting_jobs(session: Session, project: str | None = None) -> Sequence[Job]:
    """Every waiting job, or `project`'s: ORM rows, for admission to grant."""
    return session.exec(_waiting(select(Job), project)).all()


# What the queue's order and its walk read of a waiting job (`queue_order`, `gpus_of`, `usd_of`,
# `Held.why`).
_WALKED = tuple(col(c) for c in (Job.id, Job.project, Job.priority, Job.created_at, Job.type, Job.gpu,
                                 Job.gpu_count, Job.max_price_per_hour))


def waiting_records(session: Session, project: str | None = None) -> list[Job]:
    """`waiting_jobs` as records of what the order and the walk read (store/records.py): for the
    reads that grant nothing — an ORM object per waiting job cost the installation's whole queue
    at every job list (5,000 waiting: 160 ms)."""
    stmt = _waiting_records_statement(project is not None)
    return cast(list[Job], bound_records(session, stmt, {} if project is None else {"project": project}))


@functools.cache
def _waiting_records_statement(of_project: bool) -> Any:
    """`waiting_records`' select, built once: the installation's queue, or one project's (bound)."""
    return _waiting(sa.select(*_WALKED), sa.bindparam("project") if of_project else None)


def positions(session: Session, project: str | None = None) -> dict[str, int]:
    """Job id -> PRI (1-based queue position) of every waiting job: in the installation's one order,
    or, with `project`, that project's jobs only, numbered among themselves in the same order (what
    a tenant is shown: how many of its own jobs are ahead, nothing about other projects')."""
    # One project's jobs keep their order among themselves whatever other projects wait: priority
    # first, and at equal priority the round-robin ranks a project's jobs by age among its own, so
    # other projects' jobs only interleave. So a project's numbers come from its own jobs alone —
    # each list request reads the project's queue, not every tenant's.
    order = queue_order(waiting_records(session, project))
    return {j.id: i for i, j in enumerate(order, start=1)}


def load_limits(session: Session) -> Limits:
    return Limits({lim.scope: lim for lim in session.exec(select(JobLimit)).all()})


def in_use(session: Session) -> tuple[dict[str, Usage], Usage]:
    """Capacity held by grants not yet released: per project, and in all."""
    per: dict[str, Usage] = defaultdict(Usage)
    total = Usage()
    held_now = sa.select(col(Job.project), col(Job.granted_gpus), col(Job.granted_usd_per_hour)).where(
        col(Job.granted_at).is_not(None), col(Job.released_at).is_(None))
    for project, gpus, usd in session.execute(held_now).all():
        per[project].add(gpus, usd)
        total.add(gpus, usd)
    return per, total


def take_turn(session: Session) -> None:
    """The admission lock (see the module's docstring): the transaction's first statement."""
    session.execute(sa.update(QueueLock).where(col(QueueLock.id) == 1)
                    .values(turns=col(QueueLock.turns) + 1))


def _grant(session: Session, job: Job) -> None:
    job.granted_at, job.granted_gpus, job.granted_usd_per_hour = utcnow(), gpus_of(job), usd_of(job)
    session.add(job)


# --------------------------------------------------------------------------- held: paused, over budget


def pauses(session: Session, project: str | None = None) -> dict[tuple[str, str], QueuePause]:
    """(project, group) -> its pause; of one project, or of all."""
    q = select(QueuePause) if project is None else select(QueuePause).where(QueuePause.project == project)
    return {(p.project, p.type): p for p in session.exec(q).all()}


def pause_reason(p: QueuePause) -> str:
    by = "by hand" if p.by == "api" else f"by policy {p.by}"
    return (f"the {p.type} queue of project {p.project} is paused ({by}, since "
            f"{p.paused_at:%Y-%m-%d %H:%M} UTC): POST /api/compute/queue/resume admits it again")


def over_budget(session: Session, projects: Iterable[str], now: datetime) -> dict[str, str]:
    """Project -> why it may start no new machine (its daily budget is reached), of those given."""
    wanted = set(projects)
    if not wanted:
        return {}
    budgeted = session.exec(select(ProjectBudget.project).where(col(ProjectBudget.project).in_(wanted))).all()
    return {p: why for p in budgeted if (why := policies.budget_refusal(session, p, now)) is not None}


@dataclass
class Held:
    """Why waiting jobs are passed over now: paused groups, projects over their budget; and (when
    explained) why each other waiting job has no grant yet."""

    paused: dict[tuple[str, str], QueuePause]
    budget: dict[str, str]
    waiting: dict[str, str] = field(default_factory=dict)  # job id -> what it waits for, if not held

    def why(self, job: Job) -> str | None:
        """Why the job is passed over (paused, over budget); None: it takes its turn."""
        group = group_of(job.type)
        p = self.paused.get((job.project, group)) if group is not None else None
        if p is not None:
            return pause_reason(p)
        return self.budget.get(job.project)

    def reason(self, job: Job) -> str:
        """A waiting job's `waiting_reason`: held, or what it waits for; never empty."""
        return self.why(job) or self.waiting.get(job.id) or WAITS_ITS_TURN


WAITS_ITS_TURN = "waiting its turn in the queue"
NEVER_FITS = "waiting for a higher limit (passed over meanwhile: it blocks no one)"
FITS_NOW = "fits the limits now: granted at its next admission check"


def held(session: Session, waiting: Iterable[Job], now: datetime | None = None, *,
         explain: bool = True) -> Held:
    """What holds the `waiting` jobs; `explain`: also why each of them not held is not granted yet
    (the admission walk without granting; admission itself passes False)."""
    jobs = list(waiting)
    if not jobs:  # nothing to explain (a page of jobs none of which waits): no walk
        return Held({}, {})
    now = now or utcnow()
    found = Held(pauses(session), over_budget(session, {j.project for j in jobs}, now))
    if explain:
        found.waiting = waiting_reasons(session, now, of={j.id for j in jobs}, paused=found.paused)
    return found


def waiting_reasons(session: Session, now: datetime | None = None, *, of: set[str] | None = None,
                    paused: dict[tuple[str, str], QueuePause] | None = None) -> dict[str, str]:
    """Job id -> why it still waits, for every waiting job not held (`of`: at least for those): `admit`'s
    walk (same order, same limits, same blocking) without granting. A job over a limit names the limit;
    one behind it, the job ahead that blocks it (its own project's, by id; the installation's, unnamed);
    one that fits has only its next ask to wait for. `paused`: the pauses already read (`held`'s)."""
    waiting = queue_order(waiting_records(session))
    if not waiting:
        return {}
    limits = load_limits(session)
    per, total = in_use(session)
    holds = Held(pauses(session) if paused is None else paused,
                 over_budget(session, {w.project for w in waiting}, now or utcnow()))
    any_held = bool(holds.paused or holds.budget)  # else no job's `why` need be asked
    reasons: dict[str, str] = {}
    behind: dict[str, str] = {}  # project -> why its later jobs wait (a project's order is strict)
    full: str | None = None  # the installation is full: everything behind waits
    never_fits: dict[tuple[str, int, float], str | None] = {}  # a job's own limits, by what it asks
    unexplained = len(of) if of is not None else -1
    for w in waiting:
        if unexplained == 0:
            break  # every job asked about is explained: nothing behind them changes their reasons
        if of is not None and w.id in of:
            unexplained -= 1
        if any_held and holds.why(w) is not None:
            continue
        g, usd = gpus_of(w), usd_of(w)
        asks = (w.project, g, usd)
        if asks not in never_fits:
            never_fits[asks] = limits.never_fits(w.project, g, usd)
        if (never := never_fits[asks]) is not None:
            reasons[w.id] = f"{NEVER_FITS}: over {never}"
            continue
        if full is not None:
            reasons[w.id] = full
            continue
        if w.project in behind:
            reasons[w.id] = behind[w.project]
            continue
        if (over := limits.over(GLOBAL, total, g, usd)) is not None:
            reasons[w.id] = f"waiting for capacity: over {over}"
            full = f"behind a job ahead in the queue that waits for capacity: {over.split(' (')[0]}"
            continue
        if (over := limits.over(w.project, per[w.project], g, usd)) is not None:
            reasons[w.id] = f"waiting for capacity: over {over}"
            behind[w.project] = (f"behind job {w.id} of project {w.project} (its jobs start in order), "
                                 f"which waits for capacity: over {over.split(' (')[0]}")
            continue
        per[w.project].add(g, usd)
        total.add(g, usd)
        reasons[w.id] = FITS_NOW
    return reasons


def pause(session: Session, project: str, group: str, by: str, run_id: str | None = None) -> tuple[
        QueuePause, bool]:
    """Pause the project's queue group: (its pause, whether this call made it). Pausing a paused
    group changes nothing (its first pause stays). Takes the admission lock, so no admission is
    halfway past it when it commits. Commits."""
    take_turn(session)
    row = session.get(QueuePause, (project, group))
    if row is not None:
        session.commit()
        return row, False
    row = QueuePause(project=project, type=group, by=by, run_id=run_id)
    session.add(row)
    session.commit()
    session.refresh(row)
    return row, True


def resume(session: Session, project: str, group: str) -> bool:
    """Lift the pause (whether there was one). Commits."""
    take_turn(session)
    row = session.get(QueuePause, (project, group))
    if row is not None:
        session.delete(row)
    session.commit()
    return row is not None


# --------------------------------------------------------------------------- admission


def admit(session: Session, job_id: str) -> bool:
    """Grant the job its capacity if the queue's order and the limits allow it now, and it is not
    held (commits)."""
    take_turn(session)
    job = session.get(Job, job_id)
    if job is None or job.granted_at is not None or JobStatus(job.status).ended:
        session.commit()
        return job is not None and job.granted_at is not None
    limits = load_limits(session)
    per, total = in_use(session)
    blocked: set[str] = set()
    granted = False
    waiting = queue_order(waiting_jobs(session))
    holds = held(session, waiting, explain=False)
    for w in waiting:
        if w.project in blocked or holds.why(w) is not None:
            continue
        g, usd = gpus_of(w), usd_of(w)
        if limits.never_fits(w.project, g, usd) is not None:
            continue  # over a limit on its own (lowered since it queued): it would block everyone forever
        if limits.over(GLOBAL, total, g, usd) is not None:
            break  # the installation is full: nothing behind it goes first
        if limits.over(w.project, per[w.project], g, usd) is not None:
            blocked.add(w.project)
            continue
        per[w.project].add(g, usd)
        total.add(g, usd)
        if w.id == job_id:
            _grant(session, w)
            granted = True
            break
    session.commit()
    return granted


def admit_now(session: Session, job: Job) -> str | None:
    """For a job that is not queued: insert it granted if it fits now (commits); else the limit it
    would exceed (nothing inserted)."""
    take_turn(session)
    limits = load_limits(session)
    per, total = in_use(session)
    g, usd = gpus_of(job), usd_of(job)
    why = limits.over(job.project, per[job.project], g, usd) or limits.over(GLOBAL, total, g, usd)
    if why is not None:
        session.rollback()
        return why
    _grant(session, job)
    session.commit()
    return None


def release(job: Job) -> None:
    """The job has ended and its machine is gone: its capacity is free (the caller commits)."""
    if job.granted_at is not None and job.released_at is None:
        job.released_at = utcnow()


def over_on_their_own(session: Session, project: str | None = None) -> int:
    """How many waiting jobs — `project`'s, or every project's — exceed a limit on their own now:
    passed over until it is raised (what an administrator lowering a limit should hear of)."""
    limits = load_limits(session)
    return sum(1 for j in waiting_records(session, project)
               if limits.never_fits(j.project, gpus_of(j), usd_of(j)) is not None)


def set_limits(session: Session, scope: str, max_gpus: int | None,
               max_usd_per_hour: float | None) -> JobLimit:
    row = session.get(JobLimit, scope) or JobLimit(scope=scope)
    row.max_gpus, row.max_usd_per_hour, row.updated_at = max_gpus, max_usd_per_hour, utcnow()
    session.add(row)
    session.commit()
    return row

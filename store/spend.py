"""The spend ledger: intervals (start, end, $/hr) written by the allocation's activities, and the
arithmetic that turns them into daily totals and breakdowns.

Writes are idempotent, so a retried activity or a crash between write and answer neither loses nor
doubles time: an interval is opened once per attempt key (insert-if-absent on a unique key, the
first start wins), and closing sets `ended_at` only while it is empty. A closed interval never changes,
so closing also adds its cost per UTC day to `spend_day`, once, and the spend card reads those rows in
place of the closed intervals (`day_costs`): each request sums only the open ones."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, NamedTuple, Protocol

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from store.clock import aware
from store.db import dialect_insert
from store.models import SpendDay, SpendInterval

MANUAL = "manual"  # the job type of instances allocated by hand
_HOUR_S = 3600.0
_DAY_S = 86400.0


def start_of(created_at: datetime | None, *, now: datetime, not_before: datetime | None = None) -> datetime:
    """When a machine starts accruing: the cloud's own creation time where its API gives one (what it
    bills from; also when the create's answer was lost and the machine was found later), else `now`
    (the answer, or the first sighting). The cloud's clock is not ours: a time after `now` is taken as
    `now`, and one before `not_before` (before the create can have been sent) as `not_before`."""
    if created_at is None:
        return now
    start = min(aware(created_at), now)
    if not_before is not None:
        start = max(start, min(aware(not_before), now))
    return start


# --------------------------------------------------------------------------- writes


def open_interval(session: Session, *, key: str, instance_id: str, project: str, connection_id: str,
                  provider: str, rate_per_hour: float, started_at: datetime,
                  job_type: str = MANUAL) -> bool:
    """Open the attempt `key`'s interval unless it is open (or closed) already, and commit. True if
    this call opened it. A retry — or a later activity that found the machine — leaves the first
    start, so no accrued time is lost or counted twice."""
    if session.exec(select(SpendInterval.id).where(SpendInterval.key == key)).first() is not None:
        return False
    session.add(SpendInterval(key=key, instance_id=instance_id, project=project, connection_id=connection_id,
                              provider=provider, job_type=job_type, rate_per_hour=rate_per_hour,
                              started_at=aware(started_at)))
    try:
        session.commit()
    except IntegrityError:  # opened concurrently (a retried activity on another worker)
        session.rollback()
        return False
    return True


def close_interval(session: Session, key: str, ended_at: datetime) -> bool:
    """Close the attempt `key`'s interval at `ended_at` (never before its start) if it is open, add
    its cost to `spend_day`, and commit. True if this call closed it; a second close changes nothing."""
    row = session.exec(select(SpendInterval).where(SpendInterval.key == key)).first()
    if row is None or row.ended_at is not None:
        return False
    end = max(aware(ended_at), aware(row.started_at))
    # A conditional update: of two concurrent closes, only the first sets it (PostgreSQL's second
    # waits on the row's lock, then finds it closed), and only that one adds the cost — under the
    # job type the row has as it is closed (RETURNING), not as read above: `set_job_type` may have
    # changed it in between.
    closed = session.execute(sa.update(SpendInterval)
                             .where(col(SpendInterval.key) == key, col(SpendInterval.ended_at).is_(None))
                             .values(ended_at=end, rolled_up=True)
                             .returning(col(SpendInterval.project), col(SpendInterval.job_type))).first()
    if closed is None:
        session.rollback()
        return False
    _add_to_days(session, closed.project, closed.job_type, day_shares(row.started_at, end, row.rate_per_hour))
    session.commit()
    return True


# What moving or rolling up an interval's cost reads of it.
_ACCRUAL = tuple(col(c) for c in (SpendInterval.id, SpendInterval.project, SpendInterval.job_type,
                                  SpendInterval.rolled_up, SpendInterval.rate_per_hour,
                                  SpendInterval.started_at, SpendInterval.ended_at))


def set_job_type(session: Session, instance_id: str, job_type: str) -> None:
    """Count the allocation's intervals under `job_type` (the job's, once it runs on the machine),
    a closed one's cost in `spend_day` moving with it. Not committed. Each row is changed only as it
    was read (its job type and whether it is rolled up), so a close in between is seen, not undone."""
    read = sa.select(*_ACCRUAL)
    pending = list(session.execute(read.where(col(SpendInterval.instance_id) == instance_id)))
    while pending:
        row = pending.pop()
        if row.job_type == job_type:
            continue
        changed = session.execute(sa.update(SpendInterval)
                                  .where(col(SpendInterval.id) == row.id,
                                         col(SpendInterval.job_type) == row.job_type,
                                         col(SpendInterval.rolled_up) == row.rolled_up)
                                  .values(job_type=job_type))
        if not getattr(changed, "rowcount", 0):  # closed (or retyped) meanwhile: read it again
            pending.extend(session.execute(read.where(col(SpendInterval.id) == row.id)))
            continue
        if row.rolled_up and row.ended_at is not None:
            shares = day_shares(row.started_at, row.ended_at, row.rate_per_hour)
            _add_to_days(session, row.project, row.job_type, [(day, -cost) for day, cost in shares])
            _add_to_days(session, row.project, job_type, shares)
            # A day the old type no longer accrued on is gone, not a row of float dust.
            session.execute(sa.delete(SpendDay).where(
                col(SpendDay.project) == row.project, col(SpendDay.job_type) == row.job_type,
                col(SpendDay.day).in_([day for day, _ in shares]), sa.func.abs(col(SpendDay.cost)) < 1e-9))


def roll_up_closed(session: Session) -> int:
    """Add the closed intervals not yet in `spend_day` to it, and commit; how many. `close_interval`
    does this for each as it closes; what else wrote an end (a process from before 0031 still running
    beside a new one, or rows written directly) leaves them to this, which each worker runs as it
    starts. Reads count them either way. The update that marks them returns them, so of two calls at
    once each adds only what its own update changed (PostgreSQL's second waits on the rows' locks,
    then finds them rolled up; SQLite runs one writer at a time)."""
    marked = session.execute(sa.update(SpendInterval)
                             .where(col(SpendInterval.ended_at).is_not(None),
                                    col(SpendInterval.rolled_up) == sa.false())
                             .values(rolled_up=True)
                             .returning(*_ACCRUAL)).all()
    totals: dict[tuple[str, str], dict[date, float]] = defaultdict(lambda: defaultdict(float))
    for row in marked:
        for day, cost in day_shares(row.started_at, row.ended_at, row.rate_per_hour):
            totals[row.project, row.job_type][day] += cost
    for (project, job_type), days in totals.items():
        _add_to_days(session, project, job_type, sorted(days.items()))
    session.commit()
    return len(marked)


def day_shares(start: datetime, end: datetime, rate_per_hour: float) -> list[tuple[date, float]]:
    """What [start, end) at `rate_per_hour` costs on each UTC day it accrues on (none: not listed)."""
    start, end = aware(start), aware(end)
    shares, day = [], start.astimezone(UTC).date()
    while _midnight(day) < end:
        next_day = day + timedelta(days=1)
        cost = rate_per_hour * overlap_hours(start, end, _midnight(day), _midnight(next_day), end)
        if cost > 0.0:
            shares.append((day, cost))
        day = next_day
    return shares


def _add_to_days(session: Session, project: str, job_type: str, shares: list[tuple[date, float]]) -> None:
    """Add each (day, cost) to the project's and job type's `spend_day` row (made if absent)."""
    if not shares:
        return
    insert = dialect_insert(session)
    stmt = insert(SpendDay).values([dict(project=project, job_type=job_type, day=day, cost=cost)
                                    for day, cost in shares])
    session.execute(stmt.on_conflict_do_update(index_elements=["project", "job_type", "day"],
                                               set_={"cost": col(SpendDay.cost) + stmt.excluded.cost}))


def intervals_of(session: Session, instance_id: str) -> Sequence[SpendInterval]:
    stmt = select(SpendInterval).where(SpendInterval.instance_id == instance_id).order_by(
        col(SpendInterval.started_at), col(SpendInterval.id))
    return session.exec(stmt).all()


# --------------------------------------------------------------------------- arithmetic


def overlap_hours(start: datetime, end: datetime | None, lo: datetime, hi: datetime, now: datetime) -> float:
    """Hours of [start, end) — an open interval (end None) runs until `now` — within [lo, hi)."""
    stop = aware(end) if end is not None else now
    a, b = max(aware(start), lo), min(stop, hi, now)
    return max(0.0, (b - a).total_seconds() / _HOUR_S)


def day_range(days: int, now: datetime) -> list[date]:
    """The last `days` UTC days, oldest first, ending with today."""
    today = now.astimezone(UTC).date()
    return [today - timedelta(days=n) for n in range(days - 1, -1, -1)]


def _midnight(d: date) -> datetime:
    return datetime.combine(d, time(0), tzinfo=UTC)


class Accrual(Protocol):
    """What `summarize` reads of an interval (a SpendInterval)."""

    @property
    def project(self) -> str: ...
    @property
    def job_type(self) -> str: ...
    @property
    def rate_per_hour(self) -> float: ...
    @property
    def started_at(self) -> datetime: ...
    @property
    def ended_at(self) -> datetime | None: ...


@dataclass
class SpendSummary:
    daily: list[tuple[date, float]]  # every day of the window, zero-filled
    by_job_type: dict[str, float] = field(default_factory=dict)
    by_project: dict[str, float] = field(default_factory=dict)
    total: float = 0.0


def summarize(intervals: Iterable[Accrual], days: int, now: datetime) -> SpendSummary:
    """Cost per day over the last `days` UTC days (each interval's rate × its overlap with the day;
    an open one up to `now`), and the window's cost by job type and by project. The arithmetic as
    written down: the spend card has the database do it (`day_costs`), checked against this."""
    now = aware(now)
    window = day_range(days, now)
    # What accrued nothing (no time in the day, or a free machine's zero rate) is not listed.
    costs = [DayCost(k, iv.project, iv.job_type, cost) for iv in intervals
             for k, d in enumerate(window)
             if (cost := iv.rate_per_hour * overlap_hours(iv.started_at, iv.ended_at, _midnight(d),
                                                          _midnight(d + timedelta(days=1)), now)) > 0.0]
    return summarize_day_costs(costs, days, now)


class DayCost(NamedTuple):
    """What one (day, project, job type) of the window accrued: a row of `day_costs`."""

    day: int  # the window's day, 0 the oldest
    project: str
    job_type: str
    cost: float


def summarize_day_costs(costs: Iterable[DayCost], days: int, now: datetime) -> SpendSummary:
    """The window's daily totals (zero-filled) and breakdowns from its day costs."""
    window = day_range(days, aware(now))
    per_day = [0.0] * days
    by_job: dict[str, float] = defaultdict(float)
    by_project: dict[str, float] = defaultdict(float)
    for c in costs:
        per_day[c.day] += c.cost
        by_job[c.job_type] += c.cost
        by_project[c.project] += c.cost
    return SpendSummary(daily=list(zip(window, per_day, strict=True)), by_job_type=dict(by_job),
                        by_project=dict(by_project), total=sum(per_day))


def _window_filter(stmt: Any, *, lo: Any, now: Any, projects: Any) -> Any:
    """Intervals begun before `now` and not ended by `lo` (of `projects`, a list or a bound list;
    None: every project)."""
    stmt = stmt.where(col(SpendInterval.started_at) < now,
                      sa.or_(col(SpendInterval.ended_at).is_(None), col(SpendInterval.ended_at) > lo))
    if projects is not None:
        stmt = stmt.where(col(SpendInterval.project).in_(projects))
    return stmt


def window_intervals(session: Session, *, days: int, now: datetime,
                     projects: Collection[str] | None = None) -> Sequence[SpendInterval]:
    """The intervals that overlap the last `days` UTC days (of `projects`; None: every project)."""
    lo = _midnight(day_range(days, now)[0])
    return session.exec(_window_filter(select(SpendInterval), lo=lo, now=now,
                                       projects=None if projects is None else list(projects))).all()


def day_costs(session: Session, *, days: int, now: datetime,
              projects: Collection[str] | None = None) -> list[DayCost]:
    """What each day of the last `days` UTC days accrued, per project and job type: `summarize`'s
    arithmetic, with the database doing the sums. It reads the closed intervals' `spend_day` rows of
    the window, and sums the intervals not in them (the open ones: the machines billing now) — one
    statement, so an interval closing meanwhile is counted once, from one side or the other.

    An interval in the window runs from `s` to `e` seconds after the window's start (clamped to it,
    an open one up to now). It accrues on its first day from `s` to that day's end, every whole day
    between at 24 h, and on its last day from that day's start to `e` (one day: `e - s`). Each of
    those is linear in `s` and `e`, so a group of intervals with the same first and last day is
    summed by Σ rate, Σ rate × s and Σ rate × e alone."""
    now = aware(now)
    window = day_range(days, now)
    lo = _midnight(window[0])
    params: dict[str, Any] = dict(lo=lo.timestamp(), end=now.timestamp(), lo_at=lo, now_at=now,
                                  first_day=window[0], last_day=window[-1])
    if projects is not None:
        params["projects"] = list(projects)
    stmt = _day_costs_statement(session.get_bind().dialect.name, projects is not None)
    costs = []
    for a, b, project, job_type, rates, rate_s, rate_e, cost in session.connection().execute(stmt, params):
        if cost is not None:
            costs.append(DayCost(a, project, job_type, cost))
        elif a == b:
            costs.append(DayCost(a, project, job_type, (rate_e - rate_s) / _HOUR_S))
        else:
            costs.append(DayCost(a, project, job_type, (rates * (a + 1) * _DAY_S - rate_s) / _HOUR_S))
            costs.extend(DayCost(k, project, job_type, rates * 24.0) for k in range(a + 1, b))
            costs.append(DayCost(b, project, job_type, (rate_e - rates * b * _DAY_S) / _HOUR_S))
    return costs


@functools.cache
def _day_costs_statement(dialect: str, of_projects: bool) -> Any:
    """`day_costs`' statement, built once per dialect (building it took more of a request's time
    than running it): the window's `lo` and `end` (epoch seconds; `lo_at`, `now_at` the same as
    timestamps), its `first_day` and `last_day`, and `projects` when `of_projects` are bound."""
    sqlite = dialect == "sqlite"
    # LEAST and GREATEST are SQLite's two-argument min() and max(); its CAST to INTEGER truncates
    # (the same as FLOOR for what is never negative), PostgreSQL's rounds.
    least, greatest = (sa.func.min, sa.func.max) if sqlite else (sa.func.least, sa.func.greatest)

    def epoch(column: Any) -> Any:
        """A timestamp (or a date: its midnight) as float seconds since the epoch. SQLite stores it as
        ISO text (UTC), which julianday() reads with its fraction: a day is 86,400 s from 2440587.5."""
        if sqlite:
            return (sa.func.julianday(column) - 2440587.5) * 86400.0
        return sa.cast(sa.extract("epoch", column), sa.Float)

    def day_of(seconds: Any) -> Any:
        days_in = seconds / _DAY_S
        return sa.cast(days_in if sqlite else sa.func.floor(days_in), sa.Integer)

    lo, end = sa.bindparam("lo", type_=sa.Float), sa.bindparam("end", type_=sa.Float)
    projects: Any = sa.bindparam("projects", expanding=True) if of_projects else None
    ended = least(sa.func.coalesce(epoch(col(SpendInterval.ended_at)), end), end)
    s = greatest(epoch(col(SpendInterval.started_at)), lo) - lo
    e = ended - lo
    rate = col(SpendInterval.rate_per_hour)
    first, last = day_of(s), day_of(e)
    none = sa.cast(sa.null(), sa.Float)
    summed = _window_filter(sa.select(first, last, col(SpendInterval.project), col(SpendInterval.job_type),
                                      sa.func.sum(rate), sa.func.sum(rate * s), sa.func.sum(rate * e), none),
                            lo=sa.bindparam("lo_at"), now=sa.bindparam("now_at"), projects=projects)
    summed = (summed.where(col(SpendInterval.rolled_up) == sa.false(),
                           s < e, rate > 0)  # what accrues nothing is not listed, as in `summarize`
              .group_by(first, last, col(SpendInterval.project), col(SpendInterval.job_type)))
    k = day_of(epoch(col(SpendDay.day)) - lo)
    rolled = (sa.select(k, k, col(SpendDay.project), col(SpendDay.job_type), none, none, none,
                        col(SpendDay.cost))
              .where(col(SpendDay.day) >= sa.bindparam("first_day"),
                     col(SpendDay.day) <= sa.bindparam("last_day")))
    if projects is not None:
        rolled = rolled.where(col(SpendDay.project).in_(projects))
    return sa.union_all(summed, rolled)


def any_recorded(session: Session, projects: Collection[str] | None = None) -> bool:
    stmt = select(SpendInterval.id)
    if projects is not None:
        stmt = stmt.where(col(SpendInterval.project).in_(list(projects)))
    return session.exec(stmt.limit(1)).first() is not None


# --------------------------------------------------------------------------- policies and budgets


def spent_since(session: Session, project: str, since: datetime, now: datetime) -> float:
    """The project's cost over [since, now): each interval's rate × its overlap (an open one up to now)."""
    since, now = aware(since), aware(now)
    stmt = select(SpendInterval).where(SpendInterval.project == project, col(SpendInterval.started_at) < now,
                                       sa.or_(col(SpendInterval.ended_at).is_(None),
                                              col(SpendInterval.ended_at) > since))
    return sum(iv.rate_per_hour * overlap_hours(iv.started_at, iv.ended_at, since, now, now)
               for iv in session.exec(stmt).all())


def spent_today(session: Session, project: str, now: datetime) -> float:
    """The project's cost since UTC midnight (the daily budget's day)."""
    return spent_since(session, project, _midnight(aware(now).astimezone(UTC).date()), now)


def running_rate(session: Session, project: str) -> float:
    """$/hr of the project's machines billing now: the sum of its open intervals' rates."""
    stmt = select(SpendInterval.rate_per_hour).where(SpendInterval.project == project,
                                                     col(SpendInterval.ended_at).is_(None))
    return float(sum(session.exec(stmt).all()))

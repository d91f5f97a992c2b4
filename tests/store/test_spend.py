"""The spend ledger's arithmetic (cost = rate × overlap with each UTC day, open intervals up to now,
every day of the window present) and its idempotent writes, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from store import migrate, spend
from store.models import SpendDay, SpendInterval

NOW = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)  # 06:00 on the window's last day


def iv(start: datetime, end: datetime | None, rate: float = 1.0, **kw: Any) -> SpendInterval:
    fields: dict[str, Any] = dict(key=f"k-{start.isoformat()}-{rate}", instance_id="al-1", project="default",
                                  connection_id="c1", provider="fake", rate_per_hour=rate)
    fields.update(kw)
    return SpendInterval(started_at=start, ended_at=end, **fields)


def at(day: int, hour: float) -> datetime:
    return datetime(2026, 11, day, tzinfo=UTC) + timedelta(hours=hour)


def daily(s: spend.SpendSummary) -> dict[date, float]:
    return {d: round(c, 9) for d, c in s.daily if c}


def test_an_interval_spanning_midnight_splits_between_the_days() -> None:
    s = spend.summarize([iv(at(28, 22), at(29, 3), rate=2.0)], days=7, now=NOW)
    assert daily(s) == {date(2026, 11, 28): 4.0, date(2026, 11, 29): 6.0}
    assert s.total == pytest.approx(10.0) and s.by_job_type == {"manual": pytest.approx(10.0)}


def test_an_open_interval_accrues_up_to_now_and_no_further() -> None:
    s = spend.summarize([iv(at(29, 20), None, rate=3.0)], days=7, now=NOW)
    assert daily(s) == {date(2026, 11, 29): 12.0, date(2026, 11, 30): 18.0}  # 4 h, then 6 h until 06:00
    later = spend.summarize([iv(at(29, 20), None, rate=3.0)], days=7, now=NOW + timedelta(hours=1))
    assert later.total == pytest.approx(s.total + 3.0)


def test_the_window_is_zero_filled_oldest_first_ending_today() -> None:
    s = spend.summarize([], days=30, now=NOW)
    assert len(s.daily) == 30 and all(c == 0 for _, c in s.daily)
    assert s.daily[0][0] == date(2026, 11, 1) and s.daily[-1][0] == date(2026, 11, 30)
    assert [d for d, _ in spend.summarize([], days=1, now=NOW).daily] == [date(2026, 11, 30)]


def test_only_the_part_inside_the_window_counts() -> None:
    # Began 3 days before a 2-day window (29th and 30th): only the window's hours count.
    s = spend.summarize([iv(at(26, 0), at(29, 12), rate=1.0)], days=2, now=NOW)
    assert daily(s) == {date(2026, 11, 29): 12.0} and s.total == pytest.approx(12.0)
    before = spend.summarize([iv(at(20, 0), at(21, 0))], days=2, now=NOW)
    assert before.total == 0 and before.by_project == {} and before.by_job_type == {}


def test_breakdowns_by_job_type_and_project() -> None:
    rows = [iv(at(29, 0), at(29, 2), rate=1.0),
            iv(at(29, 0), at(29, 1), rate=5.0, job_type="training", project="vision"),
            iv(at(29, 3), at(29, 4), rate=2.0, project="vision")]
    s = spend.summarize(rows, days=3, now=NOW)
    assert s.by_job_type == {"manual": pytest.approx(4.0), "training": pytest.approx(5.0)}
    assert s.by_project == {"default": pytest.approx(2.0), "vision": pytest.approx(7.0)}
    assert s.total == pytest.approx(9.0)


def test_an_interval_ending_before_its_start_costs_nothing() -> None:
    assert spend.overlap_hours(at(29, 5), at(29, 4), at(29, 0), at(30, 0), NOW) == 0.0


def test_a_machine_starts_at_the_clouds_creation_time_clamped_to_when_it_can_have_been_made() -> None:
    sent, made = at(30, 5), at(30, 5.5)
    assert spend.start_of(made, now=NOW, not_before=sent) == made  # the cloud's own time
    assert spend.start_of(None, now=NOW, not_before=sent) == NOW  # not told: first seen now
    # A cloud clock ahead of ours: never a start in the future (it would accrue nothing yet).
    assert spend.start_of(NOW + timedelta(minutes=3), now=NOW, not_before=sent) == NOW
    # Behind ours (or a stale value): never before the create can have been sent.
    assert spend.start_of(sent - timedelta(minutes=3), now=NOW, not_before=sent) == sent
    assert spend.start_of(at(1, 0), now=NOW) == at(1, 0)  # no floor known: the cloud's word
    # A floor from a clock ahead of ours (Temporal's) still never starts it after now.
    assert spend.start_of(at(30, 1), now=NOW, not_before=NOW + timedelta(minutes=1)) == NOW
    naive = made.replace(tzinfo=None)  # SQLite's kind of datetime: read as UTC
    assert spend.start_of(naive, now=NOW, not_before=sent) == made


@pytest.fixture
def session(migrated: sa.Engine):  # type: ignore[no-untyped-def]
    with Session(migrated, expire_on_commit=False) as s:
        yield s


def _open(session: Session, key: str, started: datetime, rate: float = 2.0) -> bool:
    return spend.open_interval(session, key=key, instance_id="al-1", project="default", connection_id="c1",
                               provider="fake", rate_per_hour=rate, started_at=started)


def test_opening_is_once_per_key_and_closing_sets_the_end_once(session: Session) -> None:
    assert _open(session, "al-1-1", at(29, 1)) is True
    assert _open(session, "al-1-1", at(29, 3), rate=9.0) is False  # a retry: the first start stands
    assert spend.close_interval(session, "al-1-1", at(29, 4)) is True
    assert spend.close_interval(session, "al-1-1", at(29, 9)) is False  # a retried close: the end stands
    assert spend.close_interval(session, "never-opened", at(29, 9)) is False
    [row] = spend.intervals_of(session, "al-1")
    session.refresh(row)
    start, end = row.started_at, row.ended_at
    assert end is not None
    assert (spend.aware(start), spend.aware(end), row.rate_per_hour) == (at(29, 1), at(29, 4), 2.0)
    s = spend.summarize(spend.window_intervals(session, days=3, now=NOW), days=3, now=NOW)
    assert s.total == pytest.approx(6.0)
    assert spend.any_recorded(session, ["default"]) and not spend.any_recorded(session, ["vision"])


def test_the_window_query_finds_open_and_overlapping_intervals_only(session: Session) -> None:
    _open(session, "old", at(1, 0))
    spend.close_interval(session, "old", at(1, 2))  # ended before a 3-day window
    _open(session, "open", at(2, 0))  # still running: overlaps every window
    _open(session, "future", NOW + timedelta(hours=1))  # not begun by `now`
    keys = {r.key for r in spend.window_intervals(session, days=3, now=NOW)}
    assert keys == {"open"}
    assert {r.key for r in spend.window_intervals(session, days=30, now=NOW)} == {"old", "open"}


def _stored(session: Session, key: str, start: datetime, end: datetime | None, rate: float, *,
            project: str = "default", job_type: str = spend.MANUAL) -> None:
    session.add(iv(start, end, rate, key=key, project=project, job_type=job_type))
    session.commit()


def _agrees_with_the_arithmetic(session: Session, now: datetime = NOW) -> None:
    """`day_costs` gives what `summarize` computes from the window's intervals one by one."""
    for days in (1, 3, 30):
        reference = spend.summarize(spend.window_intervals(session, days=days, now=now), days, now)
        summed = spend.summarize_day_costs(spend.day_costs(session, days=days, now=now), days, now)
        assert [d for d, _ in summed.daily] == [d for d, _ in reference.daily]
        assert [c for _, c in summed.daily] == pytest.approx([c for _, c in reference.daily], abs=1e-6)
        assert summed.by_job_type == pytest.approx(reference.by_job_type, abs=1e-6)
        assert summed.by_project == pytest.approx(reference.by_project, abs=1e-6)
        assert summed.total == pytest.approx(reference.total, abs=1e-6)


def test_the_database_sums_the_days_as_the_arithmetic_does(session: Session) -> None:
    """`day_costs` (what the spend card reads: the database sums each interval's share of the days it
    overlaps, or reads a closed one's from `spend_day`) gives what `summarize` computes from the
    intervals one by one — on odd instants, across midnights, open ones up to now, ones ending where
    they start or before the window, a zero rate, several projects and job types, summed or rolled
    up — on SQLite and PostgreSQL."""
    odd = timedelta(minutes=17, seconds=3, microseconds=654321)
    _stored(session, "a", at(28, 1) + odd, at(29, 4) + odd, 2.5)  # across a midnight
    _stored(session, "b", at(29, 20) + odd, None, 1.25, project="vision")  # still open: up to now
    _stored(session, "c", at(1, 0), at(1, 2), 9.0)  # before the window
    _stored(session, "d", at(20, 0), None, 0.75, job_type="training")  # began before it, still open
    _stored(session, "e", at(29, 12), at(29, 12), 5.0, project="instant")  # no time: not listed
    _stored(session, "f", at(30, 0), at(30, 5), 0.0, project="free")  # a zero rate: nothing, not listed
    _stored(session, "g", at(27, 23) + odd, at(30, 0), 3.0, project="vision", job_type="training")  # to 0:00
    _stored(session, "h", NOW + timedelta(minutes=5), None, 4.0)  # not begun by now
    _agrees_with_the_arithmetic(session)
    # The same once the closed ones (a, c, e, f, g) are in `spend_day`: read from there instead.
    assert spend.roll_up_closed(session) == 5
    assert spend.roll_up_closed(session) == 0  # each once
    _agrees_with_the_arithmetic(session)
    three = spend.summarize_day_costs(spend.day_costs(session, days=3, now=NOW), 3, NOW)
    open_hours = (NOW - at(29, 20) - odd).total_seconds() / 3600
    # By hand: a's 27 h, b's hours until now, d's 54 h of the window, g's 48 h of it (from the 28th).
    assert three.by_project == pytest.approx({"default": 2.5 * 27 + 0.75 * 54,
                                              "vision": 1.25 * open_hours + 3.0 * 48}, abs=1e-6)
    assert three.by_job_type == pytest.approx({"manual": 2.5 * 27 + 1.25 * open_hours,
                                               "training": 0.75 * 54 + 3.0 * 48}, abs=1e-6)
    mine = spend.day_costs(session, days=3, now=NOW, projects=["vision"])
    assert {c.project for c in mine} == {"vision"}


def _days(session: Session) -> dict[tuple[str, str, date], float]:
    rows = session.exec(sa.select(SpendDay.project, SpendDay.job_type, SpendDay.day, SpendDay.cost)).all()
    return {(p, j, d): round(c, 9) for p, j, d, c in rows}


def test_closing_adds_the_cost_to_its_days_once(session: Session) -> None:
    """A closed interval's cost goes to `spend_day` as it closes, split at UTC midnights and added to
    what other intervals of the project and job type accrued those days; a retried close adds nothing."""
    _open(session, "x", at(28, 22), rate=2.0)
    _open(session, "y", at(29, 1), rate=1.0)
    assert _days(session) == {}  # open: summed at each read
    assert spend.close_interval(session, "x", at(29, 3)) is True
    assert spend.close_interval(session, "x", at(29, 9)) is False
    assert _days(session) == {("default", "manual", date(2026, 11, 28)): 4.0,
                              ("default", "manual", date(2026, 11, 29)): 6.0}
    assert spend.close_interval(session, "y", at(29, 5)) is True
    assert _days(session)["default", "manual", date(2026, 11, 29)] == 10.0
    assert spend.roll_up_closed(session) == 0  # both went as they closed
    _agrees_with_the_arithmetic(session)


def test_two_closes_at_once_add_the_cost_once(migrated: sa.Engine) -> None:
    """Two workers closing the same interval together (a retried activity): one closes it and adds
    its cost, the other finds it closed — on PostgreSQL the second waits on the first's row lock."""
    with Session(migrated) as s:
        _open(s, "z", at(29, 0), rate=3.0)
    barrier = threading.Barrier(2)

    def close() -> bool:
        with Session(migrated) as s:
            barrier.wait()
            return spend.close_interval(s, "z", at(29, 2))

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: close(), range(2)))
    assert sorted(results) == [False, True]
    with Session(migrated) as s:
        assert _days(s) == {("default", "manual", date(2026, 11, 29)): 6.0}


def test_two_roll_ups_at_once_add_each_interval_once(migrated: sa.Engine) -> None:
    """Two workers starting together both roll up what an older process closed: each interval's
    cost goes to `spend_day` once (on SQLite too, where a select-then-update would let both read it)."""
    with Session(migrated) as s:
        _stored(s, "p", at(28, 22), at(29, 3), 2.0)  # closed by a process from before 0031
        _stored(s, "q", at(29, 1), at(29, 2), 1.0)
        _stored(s, "r", at(29, 4), None, 5.0)  # still open: not rolled up
    barrier = threading.Barrier(2)

    def roll_up() -> int:
        with Session(migrated) as s:
            barrier.wait()
            return spend.roll_up_closed(s)

    with ThreadPoolExecutor(2) as pool:
        counts = list(pool.map(lambda _: roll_up(), range(2)))
    assert sum(counts) == 2
    with Session(migrated) as s:
        assert _days(s) == {("default", "manual", date(2026, 11, 28)): 4.0,
                            ("default", "manual", date(2026, 11, 29)): 7.0}
        _agrees_with_the_arithmetic(s)


def test_the_upgrade_adds_the_intervals_already_closed(engine: sa.Engine) -> None:
    """0031 puts every interval closed before it into `spend_day` (and marks it), leaving the open
    ones to be summed: the first read after the upgrade agrees with the arithmetic."""
    migrate.upgrade(engine, "0030")
    rows = [("a", at(28, 22), at(29, 3), 2.0, "default"), ("b", at(29, 1), None, 1.5, "default"),
            ("c", at(27, 12), at(29, 12), 0.5, "vision")]
    with engine.begin() as conn:  # the table as 0030 left it: no `rolled_up`
        conn.execute(sa.insert(SpendInterval.__table__), [  # type: ignore[attr-defined]
            dict(key=key, instance_id="al-1", project=project, connection_id="c1", provider="fake",
                 job_type="manual", rate_per_hour=rate, started_at=start, ended_at=end)
            for key, start, end, rate, project in rows])
    migrate.upgrade(engine)
    with Session(engine) as session:
        assert _days(session) == {("default", "manual", date(2026, 11, 28)): 4.0,
                                  ("default", "manual", date(2026, 11, 29)): 6.0,
                                  ("vision", "manual", date(2026, 11, 27)): 6.0,
                                  ("vision", "manual", date(2026, 11, 28)): 12.0,
                                  ("vision", "manual", date(2026, 11, 29)): 6.0}
        flags = dict(session.exec(sa.select(SpendInterval.key, SpendInterval.rolled_up)).all())
        assert flags == {"a": True, "b": False, "c": True}
        _agrees_with_the_arithmetic(session)


def test_a_jobs_type_moves_a_closed_intervals_cost_with_it(session: Session) -> None:
    """A job's machine counts under the job's type once it runs (activities/jobs.py record_job) — the
    allocation's earlier attempts too, whose intervals may be closed and rolled up under `manual`
    already: their cost moves in `spend_day` with them, and no empty `manual` day is left."""
    _open(session, "try-1", at(29, 1), rate=2.0)  # a first attempt, ended before the job ran
    assert spend.close_interval(session, "try-1", at(29, 3)) is True
    _open(session, "try-2", at(29, 4), rate=2.0)  # the machine the job runs on, still open
    spend.set_job_type(session, "al-1", "sft")
    session.commit()
    assert _days(session) == {("default", "sft", date(2026, 11, 29)): 4.0}
    assert {iv.key: iv.job_type for iv in spend.intervals_of(session, "al-1")} == {"try-1": "sft",
                                                                                  "try-2": "sft"}
    _agrees_with_the_arithmetic(session)
    spend.set_job_type(session, "al-1", "sft")  # again: nothing moves twice
    session.commit()
    assert _days(session) == {("default", "sft", date(2026, 11, 29)): 4.0}
    assert spend.close_interval(session, "try-2", at(29, 6)) is True  # closes under the job's type
    assert _days(session) == {("default", "sft", date(2026, 11, 29)): 8.0}


def test_a_retype_between_a_closes_read_and_its_update_counts_under_the_new_type(
        migrated: sa.Engine) -> None:
    """`close_interval` reads the row (job type `manual`); the job's type is set and committed before
    its update: the cost goes under the type the row has as it closes, not the one it read."""
    with Session(migrated) as s:
        _open(s, "k", at(29, 0), rate=1.0)
    retyped: list[bool] = []

    def retype_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE SPEND_INTERVAL SET ENDED_AT") and not retyped:
            retyped.append(True)
            with Session(migrated) as other:
                spend.set_job_type(other, "al-1", "grpo")
                other.commit()

    sa.event.listen(migrated, "before_cursor_execute", retype_first)
    try:
        with Session(migrated) as s:
            assert spend.close_interval(s, "k", at(29, 2)) is True
    finally:
        sa.event.remove(migrated, "before_cursor_execute", retype_first)
    assert retyped
    with Session(migrated) as s:
        assert _days(s) == {("default", "grpo", date(2026, 11, 29)): 2.0}
        _agrees_with_the_arithmetic(s)

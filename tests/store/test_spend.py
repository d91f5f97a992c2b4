"""The spend ledger's arithmetic (cost = rate × overlap with each UTC day, open intervals up to now,
every day of the window present) and its idempotent writes, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from store import spend
from store.models import SpendInterval

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
    assert spend.summarize([iv(at(20, 0), at(21, 0))], days=2, now=NOW).intervals == 0


def test_breakdowns_by_job_type_and_project() -> None:
    rows = [iv(at(29, 0), at(29, 2), rate=1.0),
            iv(at(29, 0), at(29, 1), rate=5.0, job_type="training", project="vision"),
            iv(at(29, 3), at(29, 4), rate=2.0, project="vision")]
    s = spend.summarize(rows, days=3, now=NOW)
    assert s.by_job_type == {"manual": pytest.approx(4.0), "training": pytest.approx(5.0)}
    assert s.by_project == {"default": pytest.approx(2.0), "vision": pytest.approx(7.0)}
    assert s.total == pytest.approx(9.0) and s.intervals == 3


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


def test_the_spend_card_reads_times_as_epoch_seconds_the_database_computes(session: Session) -> None:
    """`window_rows` has the database turn each timestamp into epoch seconds (julianday() on SQLite,
    EXTRACT(EPOCH) on PostgreSQL): the same instants, to well under a millisecond, as the ORM's
    datetimes, and the same sums."""
    odd = timedelta(minutes=17, seconds=3, microseconds=654321)
    _open(session, "a", at(28, 1) + odd, rate=2.5)
    spend.close_interval(session, "a", at(29, 4) + odd)
    _open(session, "b", at(29, 20) + odd, rate=1.25)  # still open
    _open(session, "c", at(1, 0))
    spend.close_interval(session, "c", at(1, 2))  # before the window: not read
    rows = spend.window_rows(session, days=3, now=NOW)
    orm = spend.window_intervals(session, days=3, now=NOW)
    assert len(rows) == len(orm) == 2
    by_start = sorted(orm, key=lambda r: spend.aware(r.started_at))
    for row, iv in zip(sorted(rows, key=lambda r: r.started_s), by_start, strict=True):
        assert row.started_s == pytest.approx(spend.aware(iv.started_at).timestamp(), abs=1e-3)
        assert (row.ended_s is None) == (iv.ended_at is None)
        if iv.ended_at is not None:
            assert row.ended_s == pytest.approx(spend.aware(iv.ended_at).timestamp(), abs=1e-3)
    fast, slow = spend.summarize_rows(rows, 3, NOW), spend.summarize(orm, 3, NOW)
    assert [d for d, _ in fast.daily] == [d for d, _ in slow.daily]
    assert [c for _, c in fast.daily] == pytest.approx([c for _, c in slow.daily], abs=1e-6)
    assert fast.total == pytest.approx(2.5 * 27 + 1.25 * (NOW - at(29, 20) - odd).total_seconds() / 3600)

"""A cloud key's calls paced across hosts through the database (store/pacing_slots.py): a lane's row
lock held for a call, the next holder's turn on PostgreSQL's clock, none of it on SQLite; a host that
holds too long, or a database that does not answer, costs a call no more than a warning."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from store import migrate, pacing_slots
from store.db import make_engine
from tests.store.conftest import postgres_schema, postgres_url  # noqa: F401 — postgres_url: a fixture

INTERVAL = 1000.0  # seconds: what the statements' own time takes on a busy box is far below it


@pytest.fixture
def pg(postgres_url: str) -> Iterator[sa.Engine]:  # noqa: F811
    with postgres_schema(postgres_url) as engine:
        migrate.upgrade(engine)
        yield engine


@pytest.fixture
def lanes(pg: sa.Engine) -> Iterator[pacing_slots.DatabaseLanes]:
    held = pacing_slots.DatabaseLanes(pg)
    yield held
    held.dispose()


@pytest.fixture
def warnings(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> pytest.LogCaptureFixture:
    """The pacing warnings, with another host's hold waited for 5 s at most (not 60)."""
    monkeypatch.setattr(pacing_slots, "LOCK_TIMEOUT_MS", 5000)
    caplog.set_level(logging.WARNING, logger="gpuprov.pacing")
    return caplog


def test_sqlite_has_one_host_and_no_lanes(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'gpuprov.db'}")
    try:
        assert pacing_slots.lanes(engine) is None  # the host's lock files suffice
    finally:
        engine.dispose()


async def test_the_next_holder_waits_for_the_last_call_to_end_and_its_interval(
        lanes: pacing_slots.DatabaseLanes, warnings: pytest.LogCaptureFixture) -> None:
    """Two holders of one lane through one process's lanes, as two event loops of a process share
    them (pacers are per event loop): the second waits on the lane's thread while the first holds,
    and the first lets go all the same (not queued behind that wait: it would time out, and say so)."""
    order: list[str] = []
    a_holds = asyncio.Event()

    async def a() -> None:
        async with lanes.held("key.calls", INTERVAL) as wait:
            assert wait == 0.0  # the lane's first call
            a_holds.set()
            await asyncio.sleep(0.3)  # the call under way: the other hold waits meanwhile
            order.append("a answered")

    async def b() -> float:
        await a_holds.wait()
        async with lanes.held("key.calls", INTERVAL) as wait:
            order.append("b holds")
            return wait

    _, b_wait = await asyncio.gather(a(), b())
    assert order == ["a answered", "b holds"] and "skipped" not in warnings.text
    # Its turn: INTERVAL after a's call ended, by the server's clock, less what passed since.
    assert INTERVAL - 60 < b_wait <= INTERVAL
    async with lanes.held("key.launches", INTERVAL) as other_lane:
        assert other_lane == 0.0


async def test_a_hold_not_let_go_is_waited_for_only_so_long(
        pg: sa.Engine, lanes: pacing_slots.DatabaseLanes, warnings: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that vanished mid-call without closing its connection keeps the row locked until the
    server notices: after LOCK_TIMEOUT_MS the call goes without the lane, and says so."""
    monkeypatch.setattr(pacing_slots, "LOCK_TIMEOUT_MS", 200)
    async with lanes.held("stuck.calls", 1.0):
        pass  # the row exists
    with pg.connect() as vanished:
        vanished.execute(sa.text("SELECT 1 FROM pacing_slot WHERE lane = 'stuck.calls' FOR UPDATE"))
        async with lanes.held("stuck.calls", 1.0) as wait:
            assert wait == 0.0
    assert "pacing across hosts skipped for one call (OperationalError)" in warnings.text


async def test_a_cancelled_wait_lets_the_lane_go(pg: sa.Engine, lanes: pacing_slots.DatabaseLanes,
                                                 warnings: pytest.LogCaptureFixture) -> None:
    """A caller cancelled while its hold waits for another host's: the hold it then gets is let go,
    so the lane is not left locked (the next caller would time out on it, and say so)."""
    async with lanes.held("cancelled.calls", 1.0):
        pass
    with pg.connect() as other_host:
        other_host.execute(sa.text("SELECT 1 FROM pacing_slot WHERE lane = 'cancelled.calls' FOR UPDATE"))
        waiting = asyncio.ensure_future(lanes.held("cancelled.calls", 1.0).__aenter__())
        await asyncio.sleep(0.2)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        other_host.rollback()  # the other host lets go: the cancelled take gets the lock, then lets go
    async with lanes.held("cancelled.calls", 1.0) as wait:
        assert 0.0 <= wait <= 1.0
    assert "skipped" not in warnings.text  # taken, not timed out: the cancelled caller let it go


async def test_a_database_that_does_not_answer_costs_no_wait(warnings: pytest.LogCaptureFixture) -> None:
    gone = make_engine("postgresql://postgres@127.0.0.1:1/gpuprov?connect_timeout=5")  # nothing listens
    lanes = pacing_slots.DatabaseLanes(gone)
    try:
        async with lanes.held("key.calls", 1.0) as wait:
            assert wait == 0.0
        assert "pacing across hosts skipped for one call (OperationalError)" in warnings.text
    finally:
        lanes.dispose()
        gone.dispose()

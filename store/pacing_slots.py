"""A cloud key's calls paced across every host, on PostgreSQL.

The processes of one host pace a key together through lock files (providers/pacing.py HostLock);
processes on other hosts — workers of one installation on several machines, sharing its database —
would each spend the key's whole budget. Here a paced call also holds the row lock of the key's lane
(its calls, or its launches) while it waits its turn and is sent and answered, as the host's lock file
is held: the row says when the next call may leave, on the database server's clock — one clock for
every host, so no host's clock skew matters — and the holder writes it (its answer's time plus the
interval) as it lets go. The next holder cannot read it before then, so the cloud sees two calls of
the lane at least the interval apart, however late either host sent.

The lock is waited for on a thread of the lane's own, never on an event loop or the loop's shared
threads (the calls of one event loop take the lane one at a time already: the pacer's own lock).
SQLite has one host by nature: nothing is held there (`lanes` is None).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager

import sqlalchemy as sa

log = logging.getLogger("gpuprov.pacing")

# How long a call waits for another host's hold before going without it: a host that vanished
# without closing its connection holds the lock until the server notices (TCP keepalives: minutes).
LOCK_TIMEOUT_MS = 60_000

_ENSURE = sa.text("INSERT INTO pacing_slot (lane, next_at) VALUES (:lane, 0) ON CONFLICT (lane) DO NOTHING")
_HOLD = sa.text("SELECT next_at - extract(epoch FROM clock_timestamp())::float8 FROM pacing_slot "
                "WHERE lane = :lane FOR UPDATE")
_LET_GO = sa.text("UPDATE pacing_slot SET next_at = extract(epoch FROM clock_timestamp())::float8 "
                  "+ :interval WHERE lane = :lane")

Held = Callable[[str, float], AbstractAsyncContextManager[float]]


class DatabaseLanes:
    """`held(lane, interval)`: the lane's row lock for the block, which is given the seconds to wait
    before sending (by the database server's clock; at most `interval`: a later time was written
    before the server's clock was set back)."""

    def __init__(self, engine: sa.Engine) -> None:
        # Connections of their own, one per lane held: a hold lasts a cloud call, and must neither wait
        # for the pool the activities' statements share nor hold one of its connections meanwhile.
        self.engine = sa.create_engine(engine.url, pool_size=1, max_overflow=-1, pool_pre_ping=True)
        self._threads: dict[str, ThreadPoolExecutor] = {}
        self._guard = threading.Lock()

    def _thread(self, lane: str) -> ThreadPoolExecutor:
        with self._guard:
            if lane not in self._threads:
                self._threads[lane] = ThreadPoolExecutor(1, thread_name_prefix="gpuprov-pacing")
            return self._threads[lane]

    def _take(self, lane: str, interval: float) -> tuple[sa.Connection, float]:
        conn = self.engine.connect()
        try:
            conn.execute(sa.text(f"SET LOCAL lock_timeout = {int(LOCK_TIMEOUT_MS)}"))
            conn.execute(_ENSURE, {"lane": lane})
            wait = float(conn.execute(_HOLD, {"lane": lane}).scalar_one())
        except BaseException:
            conn.close()  # rolls back: nothing held
            raise
        return conn, min(max(wait, 0.0), interval)

    @staticmethod
    def _let_go(conn: sa.Connection, lane: str, interval: float) -> None:
        try:
            conn.execute(_LET_GO, {"lane": lane, "interval": interval})
            conn.commit()
        finally:
            conn.close()

    def dispose(self) -> None:
        self.engine.dispose()

    @contextlib.asynccontextmanager
    async def held(self, lane: str, interval: float) -> AsyncIterator[float]:
        loop = asyncio.get_running_loop()
        thread = self._thread(lane)
        taking = loop.run_in_executor(thread, self._take, lane, interval)
        try:
            conn, wait = await asyncio.shield(taking)
        except asyncio.CancelledError:
            # The take goes on in its thread: let go of whatever it gets.
            taking.add_done_callback(lambda f: None if f.cancelled() or f.exception() is not None
                                     else loop.run_in_executor(None, self._let_go, f.result()[0], lane, 0.0))
            raise
        except sa.exc.SQLAlchemyError as exc:
            log.warning("pacing across hosts skipped for one call (%s): the database did not give the "
                        "lane", type(exc).__name__)
            yield 0.0
            return
        try:
            yield wait
        finally:
            # Not on the lane's thread: another event loop of this process may be waiting there for
            # this very lock (a statement on a row already held never waits).
            await asyncio.shield(loop.run_in_executor(None, self._let_go, conn, lane, interval))


def lanes(engine: sa.Engine) -> Held | None:
    """What `providers.pacing.cross_host` should be for this database: PostgreSQL's lane locks, None
    on SQLite."""
    return DatabaseLanes(engine).held if engine.dialect.name == "postgresql" else None

"""Engine and sessions. SQLite (WAL) by default, PostgreSQL via GPUPROV_DATABASE_URL."""

from __future__ import annotations

import re
import select
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any
from weakref import WeakKeyDictionary

import sqlalchemy as sa
from sqlalchemy.orm.exc import StaleDataError
from sqlmodel import Session, create_engine

# Connections kept open between requests. SQLAlchemy's default (5) is below the API's concurrency (its
# threadpool serves dozens of requests at once): every request beyond the fifth opened a connection
# and closed it again (on SQLite re-running the pragmas below; on PostgreSQL a new backend process).
POOL_SIZE = 16
POOL_OVERFLOW = 16
# A PostgreSQL connection back from the pool is pinged first only when it sat unused this long, or
# when the server has sent it something since it was last used. Pinging every checkout (SQLAlchemy's
# pool_pre_ping) cost a round trip per session — two of a console request's eight. A server that
# closes a connection (a restart, pg_terminate_backend, an idle timeout) sends its FATAL message and
# end-of-file, which sit readable on the socket: a poll of the socket with no wait sees them without
# a round trip. What neither check sees at once is a server gone without closing (a host lost, a
# network cut): that waits for the ping after the idle interval, or fails the one statement that
# finds out.
PING_AFTER_IDLE_S = 10.0


def make_engine(url: str) -> sa.Engine:
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               **_pool_of(url))

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    # LIFO: the connection given back last goes out next, so a light load keeps to a few warm server
    # backends (their caches and psycopg's prepared statements, made per connection after five
    # runs of a statement) and the rest sit idle; FIFO cycled every request through all sixteen.
    engine = create_engine(url, pool_use_lifo=True, **_pool_of(url))
    sa.event.listen(engine, "checkin", _note_idle)

    @sa.event.listens_for(engine, "checkout")
    def _ping_if_idle_or_closed(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        # SQLAlchemy's pessimistic disconnect handling, for the connections that may be dead:
        # raising DisconnectionError here makes the pool drop this connection and hand out a fresh
        # one. Only this one: after a restart each of the others shows its own close on its socket
        # (and fails its ping at once, the server's message already there), while a server that
        # closed one idle connection has left the rest working.
        since = record.info.get("idle_since")  # None: connected just now
        if since is None or (time.monotonic() - since < PING_AFTER_IDLE_S and not _sent_since(dbapi_conn)):
            return
        try:
            engine.dialect.do_ping(dbapi_conn)  # ";" outside a transaction
        except Exception as e:  # a dead socket: psycopg's OperationalError, or worse
            raise sa.exc.DisconnectionError(f"a pooled connection no longer answers: {e!r}") from e

    return engine


def _note_idle(_dbapi_conn: Any, record: Any) -> None:
    record.info["idle_since"] = time.monotonic()


def _sent_since(dbapi_conn: Any) -> bool:
    """Whether anything waits to be read on a connection that sat in the pool: between statements a
    live server sends nothing unasked (no LISTEN here), a closing one its FATAL and end-of-file.
    poll, not select: select fails on a descriptor numbered 1024 or more. A connection closed on
    this side has no socket left: True, and its ping fails."""
    try:
        fd = dbapi_conn.fileno()
    except Exception:  # psycopg: "the connection is closed"
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def dialect_insert(session: Any) -> Any:
    """The INSERT construct of `session`'s database, the one with ON CONFLICT clauses (SQLite's or
    PostgreSQL's: the two this project stores in)."""
    from sqlalchemy.dialects import postgresql, sqlite

    return sqlite.insert if session.get_bind().dialect.name == "sqlite" else postgresql.insert


def in_memory_sqlite(url: str | sa.URL) -> bool:
    """Whether `url` names an in-memory SQLite database (no file: one connection holds it)."""
    parsed = sa.make_url(url)
    return parsed.get_backend_name() == "sqlite" and (
        parsed.database in (None, "", ":memory:") or parsed.query.get("mode") == "memory")


def _pool_of(url: str) -> dict[str, int]:
    # An in-memory SQLite database lives in one connection (SQLAlchemy's SingletonThreadPool): no sizes.
    if in_memory_sqlite(url):
        return {}
    return {"pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW}


_READS: WeakKeyDictionary[sa.Engine, sa.Engine] = WeakKeyDictionary()
# How a statement that reads begins. A keyword check, not a parser (PostgreSQL's read-only
# transactions would be exact, at a round trip a checkout).
_READING = frozenset({"SELECT", "WITH", "SHOW", "EXPLAIN", "VALUES", "TABLE"})
# Two of those may still write: a WITH whose part is an INSERT, UPDATE or DELETE (PostgreSQL's
# data-modifying CTE), and an EXPLAIN ANALYZE, which runs what it explains. For them alone (a read
# route's WITH is rare) any such word refuses the statement, a column named so too: a false refusal
# is a loud bug found in a test, a write let through a silent one.
_MAY_WRITE = frozenset({"WITH", "EXPLAIN"})
_WRITING_WORD = re.compile(r"\b(INSERT|UPDATE|DELETE|MERGE)\b", re.IGNORECASE)
READ_ONLY = "a ReadSession writes nothing: open a Session to write"


def reads(engine: sa.Engine) -> sa.Engine:
    """`engine` for work that only reads: any statement through it that does not begin as a read
    raises before it is sent (an ORM write, and a text() or Core one alike). On PostgreSQL its
    connections run in autocommit: no BEGIN and ROLLBACK, two round trips a session. At PostgreSQL's
    READ COMMITTED each statement sees its own snapshot whether in a transaction or not, so the
    reads lose no consistency. On SQLite its transactions are `engine`'s own: there a transaction is
    what gives several reads one snapshot, and switching its mode costs more than it saves."""
    found = _READS.get(engine)
    if found is None:
        autocommit = {"isolation_level": "AUTOCOMMIT"} if engine.dialect.name == "postgresql" else {}
        found = _READS[engine] = engine.execution_options(**autocommit)
        # An engine made by execution_options shares `engine`'s pool; listeners added to it are its own.
        sa.event.listen(found, "before_cursor_execute", _refuse_writes)
    return found


def _refuse_writes(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
    words = statement.split(None, 1)
    if not words or words[0].upper() not in _READING:
        refused = words[0].upper() if words else "an empty"
        raise RuntimeError(f"{READ_ONLY} ({refused} statement refused)")
    if words[0].upper() in _MAY_WRITE and (writing := _WRITING_WORD.search(statement)):
        raise RuntimeError(f"{READ_ONLY} ({words[0].upper()} with {writing[1].upper()} refused)")


class ReadSession(Session):
    """A session that only reads (see `reads`). Any write through it raises: on PostgreSQL each
    statement would commit on its own, so several writes would not be one transaction."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__(reads(engine), expire_on_commit=False)


@sa.event.listens_for(ReadSession, "before_flush")
def _no_flush(session: Session, *_: Any) -> None:
    if session.new or session.dirty or session.deleted:
        raise RuntimeError(READ_ONLY)


@lru_cache
def default_engine() -> sa.Engine:
    from settings import get_settings

    s = get_settings()
    s.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    return make_engine(s.resolved_database_url())


@contextmanager
def session_scope(engine: sa.Engine | None = None) -> Iterator[Session]:
    with Session(engine or default_engine(), expire_on_commit=False) as session:
        yield session


def commit_unless_gone(session: Session) -> bool:
    """Commit the session's changes to rows it read; False (rolled back, the session usable) when
    one was deleted meanwhile — by a request between this session's read and its write, as an
    activity's record of a fleet, policy or pool another request just removed (`make fuzz` deleted
    a fleet mid-probe: the activity failed with StaleDataError, and Temporal retried it to find the
    row gone). Its callers skip such a record, as they do a row already gone when read."""
    try:
        session.commit()
    except StaleDataError:
        session.rollback()
        return False
    return True

"""Engine and sessions. SQLite (WAL) by default, PostgreSQL via GPUPROV_DATABASE_URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

import sqlalchemy as sa
from sqlmodel import Session, create_engine

# Connections kept open between requests. SQLAlchemy's default (5) is below the API's concurrency (its
# threadpool serves dozens of requests at once): every request beyond the fifth opened a connection
# and closed it again (on SQLite re-running the pragmas below; on PostgreSQL a new backend process).
POOL_SIZE = 16
POOL_OVERFLOW = 16


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
    return create_engine(url, pool_pre_ping=True, pool_size=POOL_SIZE, max_overflow=POOL_OVERFLOW)


def _pool_of(url: str) -> dict[str, int]:
    # An in-memory SQLite database lives in one connection (SQLAlchemy's SingletonThreadPool): no sizes.
    if url in ("sqlite://", "sqlite:///:memory:") or "mode=memory" in url:
        return {}
    return {"pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW}


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

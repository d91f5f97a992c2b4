"""Engine and sessions. SQLite (WAL) by default, PostgreSQL via GPUPROV_DATABASE_URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

import sqlalchemy as sa
from sqlmodel import Session, create_engine


def make_engine(url: str) -> sa.Engine:
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


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

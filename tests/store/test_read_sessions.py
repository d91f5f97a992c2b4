"""store/db.py's connections as the API's reads use them: a ReadSession holds no transaction on
PostgreSQL (no BEGIN and ROLLBACK on the wire) and refuses any write on both databases; a pooled
PostgreSQL connection is pinged only after sitting idle, and one found dead then is replaced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg.pq import TransactionStatus
from sqlmodel import Session, select

from store import db
from store.models import Project


@pytest.fixture
def pg(postgres_url: str) -> Iterator[sa.Engine]:
    engine = db.make_engine(postgres_url)
    yield engine
    engine.dispose()


def _in_transaction(session: Session) -> bool:
    dbapi = session.connection().connection.dbapi_connection
    assert isinstance(dbapi, psycopg.Connection)
    return dbapi.info.transaction_status != TransactionStatus.IDLE


def test_a_read_session_reads_outside_a_transaction_on_postgresql(pg: sa.Engine) -> None:
    with db.ReadSession(pg) as reads, Session(pg) as plain:
        assert reads.execute(sa.text("SELECT 1")).scalar_one() == 1
        assert plain.execute(sa.text("SELECT 1")).scalar_one() == 1
        assert not _in_transaction(reads)
        assert _in_transaction(plain)
    assert db.reads(pg) is db.reads(pg)  # one per engine, not one per session
    assert pg.pool.checkedout() == 0
    with Session(pg) as session:  # a connection a read session used is back in its own mode
        session.execute(sa.text("SELECT 1"))
        assert _in_transaction(session)


def test_on_sqlite_a_read_session_is_the_engines_own(tmp_path: Path) -> None:
    # There a transaction is what gives several reads one snapshot.
    engine = db.make_engine(f"sqlite:///{tmp_path / 'gpuprov.db'}")
    assert db.reads(engine) is engine
    engine.dispose()


def test_a_read_session_refuses_every_write(migrated: sa.Engine) -> None:
    with db.ReadSession(migrated) as reads:
        reads.add(Project(id="vision"))
        with pytest.raises(RuntimeError, match="writes nothing"):
            reads.flush()
        reads.rollback()
        with pytest.raises(RuntimeError, match="writes nothing"):
            reads.execute(sa.insert(Project).values(id="audio"))
    with Session(migrated) as session:
        assert set(session.exec(select(Project.id)).all()) == {"default"}


def _backend_pid(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(postgres_url: str, pid: int) -> None:
    other = db.make_engine(postgres_url)
    try:
        with other.connect() as conn:
            assert conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
    finally:
        other.dispose()


def test_a_connection_used_lately_is_not_pinged_an_idle_one_is(pg: sa.Engine,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pings = []
    real = pg.dialect.do_ping

    def counted(conn: Any) -> bool:
        pings.append(1)
        return real(conn)

    monkeypatch.setattr(pg.dialect, "do_ping", counted)
    first = _backend_pid(pg)
    assert _backend_pid(pg) == first  # the same connection again (the pool is LIFO), not pinged
    assert pings == []
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.0)  # every connection back in the pool is idle
    assert _backend_pid(pg) == first
    assert pings == [1]


def test_an_idle_connection_found_dead_is_replaced_before_use(pg: sa.Engine, postgres_url: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    dead = _backend_pid(pg)
    _terminate(postgres_url, dead)  # as a server restart or an idle timeout would
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.0)
    assert _backend_pid(pg) != dead  # the ping failed, the pool connected anew, the read worked


def test_a_dead_connection_used_lately_fails_one_statement_then_the_pool_recovers(
        pg: sa.Engine, postgres_url: str) -> None:
    # The trade PING_AFTER_IDLE_S makes: no ping for a connection used within the interval, so a
    # server that went away just now fails the one statement that finds out.
    dead = _backend_pid(pg)
    _terminate(postgres_url, dead)
    with pytest.raises(sa.exc.OperationalError):
        _backend_pid(pg)
    assert _backend_pid(pg) != dead

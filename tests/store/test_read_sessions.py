"""store/db.py's connections as the API's reads use them: a ReadSession holds no transaction on
PostgreSQL (no BEGIN and ROLLBACK on the wire) and refuses any write on both databases; a pooled
PostgreSQL connection is pinged only after sitting idle or when the server closed it, and one found
dead then is replaced before use (it alone: the others keep their backends)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from select import POLLIN, poll
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg.pq import TransactionStatus
from sqlmodel import Session, select

from store import db
from store.models import Project
from tests.store.conftest import terminate_backends


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


def test_on_sqlite_a_read_session_keeps_the_engines_transactions(tmp_path: Path) -> None:
    # There a transaction is what gives several reads one snapshot: no autocommit, the same pool.
    engine = db.make_engine(f"sqlite:///{tmp_path / 'gpuprov.db'}")
    assert db.reads(engine) is db.reads(engine) and db.reads(engine).pool is engine.pool
    assert "isolation_level" not in db.reads(engine).get_execution_options()
    engine.dispose()


def test_a_read_session_refuses_every_write(migrated: sa.Engine) -> None:
    with db.ReadSession(migrated) as reads:
        reads.add(Project(id="vision"))
        with pytest.raises(RuntimeError, match="writes nothing"):
            reads.flush()
        reads.rollback()
        with pytest.raises(RuntimeError, match="writes nothing"):
            reads.execute(sa.insert(Project).values(id="audio"))
        # Past the ORM too: on PostgreSQL (autocommit) either would have committed at once.
        with pytest.raises(RuntimeError, match="INSERT statement refused"):
            reads.execute(sa.text("INSERT INTO project (id) VALUES ('speech')"))
        with pytest.raises(RuntimeError, match="DELETE statement refused"):
            reads.connection().execute(sa.text("DELETE FROM project"))
        assert reads.execute(sa.text("SELECT count(*) FROM project")).scalar_one() == 1  # reads still do
        # A statement that begins as a read and writes: refused, on either database.
        with pytest.raises(RuntimeError, match="WITH with DELETE refused"):
            reads.execute(sa.text("WITH gone AS (DELETE FROM project RETURNING id) SELECT id FROM gone"))
        with pytest.raises(RuntimeError, match="EXPLAIN with INSERT refused"):
            reads.execute(sa.text("EXPLAIN ANALYZE INSERT INTO project (id) VALUES ('speech')"))
        # A WITH that only reads, with a column whose name holds such a word, still reads.
        cte = sa.select(Project.id.label("updated_id")).cte("recent")
        assert reads.execute(sa.select(sa.func.count()).select_from(cte)).scalar_one() == 1
    with Session(migrated) as session:
        assert set(session.exec(select(Project.id)).all()) == {"default"}


def _backend_pid(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def _elsewhere(postgres_url: str, statement: str, **params: Any) -> None:
    """Run `statement` on a connection of an engine of its own (committed)."""
    other = db.make_engine(postgres_url)
    try:
        with other.begin() as conn:
            conn.execute(sa.text(statement), params)
    finally:
        other.dispose()


def _counting_pings(engine: sa.Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    pings: list[int] = []
    real = engine.dialect.do_ping

    def counted(conn: Any) -> bool:
        pings.append(1)
        return real(conn)

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    return pings


def test_a_connection_used_lately_is_not_pinged_an_idle_one_is(pg: sa.Engine,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    pings = _counting_pings(pg, monkeypatch)
    first = _backend_pid(pg)
    assert _backend_pid(pg) == first  # the same connection again (the pool is LIFO), not pinged
    assert pings == []
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.0)  # every connection back in the pool is idle
    assert _backend_pid(pg) == first
    assert pings == [1]


def test_an_idle_connection_found_dead_is_replaced_before_use(pg: sa.Engine, postgres_url: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    dead = _backend_pid(pg)
    terminate_backends(postgres_url, [dead])  # as a server restart or an idle timeout would
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.0)
    assert _backend_pid(pg) != dead  # the ping failed, the pool connected anew, the read worked


def test_a_connection_the_server_closed_is_replaced_before_use(pg: sa.Engine, postgres_url: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Used a moment ago, so not pinged for being idle: its socket shows the server's close.
    pings = _counting_pings(pg, monkeypatch)
    dead = _backend_pid(pg)
    terminate_backends(postgres_url, [dead])
    assert _backend_pid(pg) != dead  # no error: the read ran on a fresh connection
    assert pings == [1]


def _two_pids(engine: sa.Engine) -> list[int]:
    """The backends of two connections checked out at once (the LIFO pool's two newest)."""
    with engine.connect() as a, engine.connect() as b:
        return [int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()) for conn in (a, b)]


def test_after_a_restart_each_dead_connection_is_replaced(pg: sa.Engine, postgres_url: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    dead = set(_two_pids(pg))
    pings = _counting_pings(pg, monkeypatch)
    terminate_backends(postgres_url, dead)  # every backend of the pool gone, as a restart leaves it
    now = set(_two_pids(pg))
    assert len(now) == 2 and not now & dead
    assert pings == [1, 1]  # each found by its own socket; no statement failed


def test_one_connection_closed_leaves_the_others_open(pg: sa.Engine, postgres_url: str) -> None:
    # An idle timeout closes one connection: the pool replaces it alone, not every other.
    first, second = _two_pids(pg)
    terminate_backends(postgres_url, [first])
    now = _two_pids(pg)
    assert first not in now and second in now  # the survivor is still the same backend


def test_a_live_connection_the_server_wrote_to_is_pinged_and_kept(pg: sa.Engine, postgres_url: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Something readable is not proof of a close: the ping decides (here a notification waits).
    with pg.connect() as conn:
        first = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
        conn.execute(sa.text("LISTEN gpuprov_test"))
        conn.commit()
        fileno = conn.connection.dbapi_connection.fileno()  # type: ignore[union-attr]
    _elsewhere(postgres_url, "NOTIFY gpuprov_test")
    poller = poll()
    poller.register(fileno, POLLIN)
    assert poller.poll(30_000)  # the notification has arrived
    pings = _counting_pings(pg, monkeypatch)
    assert _backend_pid(pg) == first
    assert pings == [1]


def test_a_connection_closed_on_this_side_counts_as_closed(postgres_url: str) -> None:
    conn = psycopg.connect(postgres_url)
    try:
        assert not db._sent_since(conn)  # open, nothing sent
    finally:
        conn.close()
    assert db._sent_since(conn)  # no socket to poll: the ping decides, and fails

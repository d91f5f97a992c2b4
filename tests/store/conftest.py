"""Store tests run on SQLite and on PostgreSQL.

PostgreSQL comes from a testcontainers PostgresContainer when a Docker engine answers, else
from GPUPROV_TEST_POSTGRES_URL (default: a local trust-auth server). Each test gets its own
schema, dropped afterwards, so concurrent runs never collide."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from store import migrate
from store.db import make_engine
from tests.migrated import sqlite_engine

DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"


def _docker_answers() -> bool:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            s.connect(host.removeprefix("unix://"))
            s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n")
            return b"OK" in s.recv(1024)
    except OSError:
        return False


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as pg:
            yield pg.get_connection_url()
        return
    yield os.environ.get("GPUPROV_TEST_POSTGRES_URL", DEFAULT_PG)


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path) -> Iterator[sa.Engine]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        eng = make_engine(f"sqlite:///{tmp_path / 'gpuprov.db'}")
        yield eng
        eng.dispose()
        return
    with postgres_schema(request.getfixturevalue("postgres_url")) as eng:
        yield eng


@contextmanager
def postgres_schema(base: str) -> Iterator[sa.Engine]:
    """An engine on `base`'s server whose connections use a new schema of their own, dropped
    afterwards. The schema's name is each connection's application_name too: a test finds its
    backends by it (pg_stat_activity)."""
    schema = f"gpuprov_test_{uuid.uuid4().hex[:12]}"
    admin = make_engine(base)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in base else "?"
    eng = make_engine(f"{base}{sep}application_name={schema}&options={quote(f'-csearch_path={schema}')}")
    try:
        yield eng
    finally:
        eng.dispose()
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def terminate_backends(server_url: str, pids: Iterable[int]) -> None:
    """Close these server backends as a restart would, returning once each has exited (its FATAL
    message and end-of-file are then on the client's socket): pg_terminate_backend's own wait."""
    admin = make_engine(server_url)
    try:
        with admin.connect() as conn:
            for pid in pids:
                ended = conn.execute(sa.text("SELECT pg_terminate_backend(:pid, 30000)"), {"pid": pid})
                assert ended.scalar()
    finally:
        admin.dispose()


@pytest.fixture
def migrated(engine: sa.Engine) -> Iterator[sa.Engine]:
    """`engine`'s kind of database at the migrations' head, for tests of what is stored rather than
    of the migrations (tests/store/test_migrations.py): on SQLite a copy of a template migrated once
    per process (tests/migrated.py), on PostgreSQL this test's schema migrated here."""
    if engine.dialect.name != "sqlite":
        migrate.upgrade(engine)
        yield engine
        return
    assert engine.url.database is not None
    copy = sqlite_engine(Path(engine.url.database).with_name("migrated.db"))
    try:
        yield copy
    finally:
        copy.dispose()

"""The API on PostgreSQL across a server restart: the console's next requests are answered, not
failed, though every pooled connection they would have used was closed by the server
(store/db.py: a checkout sees the close on the socket and renews the pool)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa

from store import migrate
from store.db import make_engine
from tests.api.conftest import make_project
from tests.store.conftest import postgres_url  # noqa: F401 — fixture: the test server

pytestmark = pytest.mark.usefixtures("fake_cloud")


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:  # noqa: F811 — the API's engine, on PostgreSQL
    """The app's engine on a schema of its own, its connections named so the test can find them."""
    name = f"gpuprov_test_{uuid.uuid4().hex[:12]}"
    admin = make_engine(postgres_url)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{name}"'))
    sep = "&" if "?" in postgres_url else "?"
    eng = make_engine(f"{postgres_url}{sep}application_name={name}&options={quote(f'-csearch_path={name}')}")
    migrate.upgrade(eng)
    try:
        yield eng
    finally:
        eng.dispose()
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA "{name}" CASCADE'))
        admin.dispose()


def _restart_as_seen_by(engine: sa.Engine, server_url: str) -> set[int]:
    """Close every server connection `engine` holds, as a server restart does, once each backend has
    exited (pg_terminate_backend's own wait); their pids."""
    admin = make_engine(server_url)
    try:
        with admin.begin() as conn:
            pids = set(conn.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :n"),
                                    {"n": engine.url.query["application_name"]}).scalars())
            for pid in pids:
                terminated = conn.execute(sa.text("SELECT pg_terminate_backend(:pid, 30000)"), {"pid": pid})
                assert terminated.scalar()
    finally:
        admin.dispose()
    return pids


async def test_the_console_is_answered_right_after_a_database_restart(
        client: httpx.AsyncClient, engine: sa.Engine, postgres_url: str) -> None:  # noqa: F811
    token = await make_project(client, "vision")
    as_project = {"Authorization": f"Bearer {token}"}  # its lookup reads the database, as a console's does
    lists = ("/api/compute/instances?status=active", "/api/compute/providers", "/api/compute/spend?days=30")
    for path in lists:
        assert (await client.get(path, headers=as_project)).status_code == 200
    closed = _restart_as_seen_by(engine, postgres_url)
    assert closed  # the pool held connections, and now none of them is alive
    for path in lists:
        r = await client.get(path, headers=as_project)
        assert r.status_code == 200, r.text

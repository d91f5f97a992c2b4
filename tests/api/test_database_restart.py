"""The API on PostgreSQL across a server restart: the console's next requests are answered, not
failed, though every pooled connection they would have used was closed by the server
(store/db.py: a checkout sees the close on the socket and replaces the connection)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from store import migrate
from store.db import make_engine
from tests.api.conftest import make_project
from tests.store.conftest import (  # noqa: F401 — postgres_url: a fixture
    postgres_schema,
    postgres_url,
    terminate_backends,
)

pytestmark = pytest.mark.usefixtures("fake_cloud")


@pytest.fixture
def engine(postgres_url: str) -> Iterator[sa.Engine]:  # noqa: F811 — the API's engine, on PostgreSQL
    with postgres_schema(postgres_url) as eng:
        migrate.upgrade(eng)
        yield eng


def _restart_as_seen_by(engine: sa.Engine, server_url: str) -> set[int]:
    """Close every server connection `engine` holds, as a server restart does; their pids."""
    admin = make_engine(server_url)
    try:
        with admin.connect() as conn:
            pids = set(conn.execute(sa.text("SELECT pid FROM pg_stat_activity WHERE application_name = :n"),
                                    {"n": engine.url.query["application_name"]}).scalars())
    finally:
        admin.dispose()
    terminate_backends(server_url, pids)
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

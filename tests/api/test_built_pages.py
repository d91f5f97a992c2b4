"""The console's lists read their pages with statements built once, their values bound
(api/pagination.py `Keyset.fetch_built`, store/records.py `bound_records`): walked page by page on
SQLite and on PostgreSQL, each list gives every row once, in its order, as an independent read of
the table does — the cursor's time bound as the column's type, each filter its own statement, the
first page's and the next pages' statements not mixed up, one project's rows never another's."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, col

from api.pagination import Keyset, PageQuery
from bench import api_scale
from providers import registry
from store import migrate, queue
from store.db import ReadSession
from store.models import Instance
from store.secrets import SecretBox
from tests import migrated
from tests.api.conftest import compute_client
from tests.store.conftest import engine, postgres_url  # noqa: F401 — fixtures: both databases

LIVE = ("provisioning", "ready", "terminating")


@pytest.fixture
def seeded(engine: sa.Engine) -> api_scale.Seeded:  # noqa: F811
    migrate.upgrade(engine)
    return api_scale.seed(engine, 600, random.Random(5), fleet_share=0.3)


async def _walk(client: httpx.AsyncClient, path: str, limit: int, **query: str) -> list[list[str]]:
    """Every page's ids of `path` (with `query`), following next_cursor to the end."""
    pages, cursor = [], None
    while len(pages) < 500:  # more: a page that does not move on
        r = await client.get(path, params={**query, "limit": limit, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        pages.append([item["id"] for item in r.json()["items"]])
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return pages
    raise AssertionError(f"{path} gave 500 pages and a cursor still")


def _instance_ids(engine: sa.Engine, project: str,  # noqa: F811
                  statuses: tuple[str, ...] | None) -> list[str]:
    """The project's instances newest first (ties by id), read here in plain SQL."""
    where = "project = :p" + (" AND status IN :s" if statuses else "")
    stmt = sa.text(f"SELECT id FROM instance WHERE {where} ORDER BY created_at DESC, id DESC")
    if statuses:
        stmt = stmt.bindparams(sa.bindparam("s", expanding=True))
    with engine.connect() as conn:
        values = {"p": project, **({"s": list(statuses)} if statuses else {})}
        return list(conn.execute(stmt, values).scalars())


def _backend_ids(engine: sa.Engine, project: str) -> list[str]:  # noqa: F811
    """The project's cloud connections and SSH fleets together, oldest first (ties by id)."""
    with engine.connect() as conn:
        rows: list[Any] = [*conn.execute(sa.text("SELECT created_at, id FROM connection WHERE project = :p"),
                                         {"p": project}),
                           *conn.execute(sa.text("SELECT created_at, id FROM fleet WHERE project = :p"),
                                         {"p": project})]
    return [i for _, i in sorted((str(at)[:26], i) for at, i in rows)]


@pytest.mark.parametrize(("status", "statuses", "limit"), [
    ("active", LIVE, 7),
    ("ready", ("ready",), 9),
    ("terminated", ("terminated",), 40),
    (None, None, 60),
])
async def test_the_instances_list_walks_every_row_once_in_order(
        engine: sa.Engine, seeded: api_scale.Seeded, box: SecretBox,  # noqa: F811
        status: str | None, statuses: tuple[str, ...] | None, limit: int) -> None:
    expected = _instance_ids(engine, api_scale.MEASURED, statuses)
    assert len(expected) > 2 * limit, "the walk must cross several pages"
    async with compute_client(engine, box, seeded.token) as client:
        # Another filter's first page in between: each filter is its own statement.
        other = (await client.get("/instances", params={"status": "failed", "limit": 3})).json()["items"]
        assert other and all(i["status"] == "failed" for i in other)
        pages = await _walk(client, "/instances", limit, **({"status": status} if status else {}))
    assert [i for page in pages for i in page] == expected
    assert all(len(page) == limit for page in pages[:-1]) and 0 < len(pages[-1]) <= limit


async def test_the_providers_list_walks_connections_and_fleets_once_in_order(
        engine: sa.Engine, seeded: api_scale.Seeded, box: SecretBox) -> None:  # noqa: F811
    expected = _backend_ids(engine, api_scale.MEASURED)
    assert len(expected) == len(api_scale.PROVIDERS) + 1  # each cloud's connection and the fleet
    async with compute_client(engine, box, seeded.token) as client:
        pages = await _walk(client, "/providers", 2)
        whole = (await client.get("/providers", params={"limit": 200})).json()["items"]
    assert [i for page in pages for i in page] == expected == [p["id"] for p in whole]
    fleet = next(p for p in whole if p["kind"] == "ssh_fleet")
    assert fleet["host_count"] == api_scale.FLEET_HOSTS  # its hosts read by the fleet's id
    # Each cloud row's live count is this project's alone (bound per request, not kept from another).
    with engine.connect() as conn:
        live = dict(conn.execute(sa.text(
            "SELECT connection_id, count(*) FROM instance WHERE project = :p AND status IN ('provisioning',"
            " 'ready', 'terminating') GROUP BY connection_id"), {"p": api_scale.MEASURED}).all())
    assert {p["id"]: p["instance_count"] for p in whole if p["kind"] == "cloud"} == {
        cid: live.get(cid, 0) for cid in expected if cid.startswith("c-")}


def test_a_statement_built_per_request_is_refused_before_it_grows_the_cache(tmp_path: Path) -> None:
    """fetch_built keeps each base's paged statements: one built anew at every request (a caller's
    mistake) would keep them all. It is refused once a keyset holds more than a list could need."""
    keyset = Keyset("scratch", Instance.created_at, Instance.id, descending=True)
    eng = migrated.sqlite_engine(tmp_path / "built.db")
    try:
        with ReadSession(eng) as session:
            shared = sa.select(col(Instance.id), col(Instance.created_at)).where(
                col(Instance.project) == sa.bindparam("project"))
            for _ in range(100):  # one base, asked again and again: built once
                keyset.fetch_built(session, shared, {"project": "p"}, PageQuery(limit=5))
            with pytest.raises(RuntimeError, match="built once, not per request"):
                for _ in range(100):
                    fresh = sa.select(col(Instance.id), col(Instance.created_at)).where(
                        col(Instance.project) == sa.bindparam("project"))
                    keyset.fetch_built(session, fresh, {"project": "p"}, PageQuery(limit=5))
    finally:
        eng.dispose()


async def test_the_workload_queue_walks_every_row_once_with_its_pri_and_machine(
        engine: sa.Engine, seeded: api_scale.Seeded, box: SecretBox) -> None:  # noqa: F811
    """The Workload Queue's rows (its jobs, their machines, its reported workloads, the waiting
    ones' PRI) read by statements built once: every job and reported workload of the project once,
    a waiting job's PRI its place in the project's queue, a placed job's location its machine's."""
    with engine.connect() as conn:
        jobs = {f"job:{i}": allocation for i, allocation in conn.execute(
            sa.text("SELECT id, allocation_id FROM job WHERE project = :p"), {"p": api_scale.MEASURED})}
        reported = set(conn.execute(sa.text("SELECT id FROM reported_workload WHERE project = :p"),
                                    {"p": api_scale.MEASURED}).scalars())
        machines = {i: (cloud, region) for i, cloud, region in conn.execute(
            sa.text("SELECT id, provider, COALESCE(offer_region, region) FROM instance"))}
        queued = set(conn.execute(sa.text("SELECT id FROM job WHERE status = 'queued'")).scalars())
    with Session(engine) as session:
        pri = {f"job:{i}": n for i, n in queue.positions(session, api_scale.MEASURED).items()}
    assert jobs and reported and pri, "the seed must hold jobs, reported workloads and waiting jobs"
    rows: list[dict[str, Any]] = []
    async with compute_client(engine, box, seeded.token) as client:
        cursor = None
        while True:
            r = await client.get("/workloads", params={"limit": 37, **({"cursor": cursor} if cursor else {})})
            assert r.status_code == 200, r.text
            rows += r.json()["items"]
            cursor = r.json()["next_cursor"]
            if cursor is None:
                break
    assert sorted(w["id"] for w in rows) == sorted([*jobs, *reported])
    shown = {w["id"]: w for w in rows}
    assert {i: w["pri"] for i, w in shown.items() if i in jobs and w["pri"] is not None} == pri
    placed = [i for i, allocation in jobs.items() if allocation in machines and i[4:] not in queued]
    assert {machines[jobs[i]][0] for i in placed} > {"ssh"}, "placed jobs on fleets and on clouds"
    for i in placed:  # the machine read for the row is the job's own
        cloud, region = machines[jobs[i]]
        name = registry.capabilities(cloud).display_name
        expected = "local cluster" if cloud == "ssh" else f"{name} · {region}"
        assert shown[i]["location"] == expected, i

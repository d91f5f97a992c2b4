"""The console's lists stay fast as a project grows (issue 24, "An API that stays fast"), checked
without timing: the SQL statements a list request makes do not grow with the rows stored (no N+1),
and the page queries the console makes use their indexes (migration 0027). The timing itself is the
bench's: `python -m bench.api_scale`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import sqlalchemy as sa

from bench import api_scale
from store.secrets import SecretBox
from tests import migrated
from tests.api.conftest import compute_client, statements


def _client(engine: sa.Engine, seeded: api_scale.Seeded,
            box: SecretBox) -> AbstractAsyncContextManager[httpx.AsyncClient]:
    """The API on `engine` (no Temporal), asked with the seeded project's token."""
    return compute_client(engine, box, seeded.token)


@pytest.fixture
def stores(tmp_path: Path, box: SecretBox) -> Iterator[dict[int, tuple[sa.Engine, api_scale.Seeded]]]:
    """Two stores, seeded as the bench seeds them with 200 and with 800 instances, half of them on
    SSH fleets (whose rows show their fleet host's and bastion's pinned keys)."""
    made = {}
    for rows in (200, 800):
        engine = migrated.sqlite_engine(tmp_path / f"{rows}.db")
        made[rows] = engine, api_scale.seed(engine, rows, fleet_share=0.5)
    yield made
    for engine, _ in made.values():
        engine.dispose()


async def _counts(engine: sa.Engine, seeded: api_scale.Seeded,
                  box: SecretBox) -> tuple[dict[str, int], set[str]]:
    """Statements per list request, and the clouds of the active instances' page."""
    async with _client(engine, seeded, box) as client:
        counts, clouds = {}, set()
        for name, path in api_scale.endpoints(seeded).items():
            await client.get(path)  # a first request may load what is cached afterwards
            with statements(engine) as seen:
                r = await client.get(path)
            assert r.status_code == 200, (name, r.text)
            counts[name] = len(seen)
            if name == "instances?status=active":
                clouds = {i["cloud"] for i in r.json()["items"]}
    return counts, clouds


async def test_a_list_request_makes_as_many_statements_with_4x_the_rows(
        stores: dict[int, tuple[sa.Engine, api_scale.Seeded]], box: SecretBox) -> None:
    small, clouds = await _counts(*stores[200], box)
    large, _ = await _counts(*stores[800], box)
    assert "ssh" in clouds and len(clouds) > 1, "the page must hold fleet rows and cloud rows"
    assert large == small, "a list's statements grew with its rows: a query per row (N+1)"


async def test_the_active_instances_page_uses_its_index(
        stores: dict[int, tuple[sa.Engine, api_scale.Seeded]], box: SecretBox) -> None:
    """The Cloud tab's page (`status=active`) reads the project's live rows in page order through
    ix_instance_live_project_created_at: its rows, not every live one to sort them, nor every
    instance the project ever had."""
    engine, seeded = stores[800]
    async with _client(engine, seeded, box) as client:
        with statements(engine) as seen:
            r = await client.get(api_scale.endpoints(seeded)["instances?status=active"])
    assert r.status_code == 200 and r.json()["items"]
    # The fleet rows' pins, read for the whole page at once, are each row's own.
    fleet = [i for i in r.json()["items"] if i["cloud"] == "ssh" and i["ssh"]]
    assert fleet and all(i["host_key"] and i["ssh"]["bastion"]["host_key"] for i in fleet)
    assert all(i["ssh"]["host"].endswith(".lab.internal") for i in fleet)
    [(query, params)] = [(s, p) for s, p in seen if "FROM instance" in s and "ORDER BY" in s]
    with engine.connect() as conn:
        plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {query}", params))
    assert "ix_instance_live_project_created_at" in plan and "ORDER BY" not in plan, plan


async def test_the_providers_live_totals_read_their_index_alone(
        stores: dict[int, tuple[sa.Engine, api_scale.Seeded]], box: SecretBox) -> None:
    """The providers list's live count and $/hr per connection come from the live rows' covering
    index (ix_instance_live_project_connection), not from every live row of the table."""
    engine, seeded = stores[800]
    async with _client(engine, seeded, box) as client:
        with statements(engine) as seen:
            r = await client.get(api_scale.endpoints(seeded)["providers"])
    assert r.status_code == 200 and any(p["instance_count"] for p in r.json()["items"])
    [(query, params)] = [(s, p) for s, p in seen if "FROM instance" in s and "GROUP BY" in s]
    with engine.connect() as conn:
        plan = " ".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {query}", params))
    assert "COVERING INDEX ix_instance_live_project_connection" in plan, plan


async def test_the_workload_queue_reads_its_page_and_counts_from_indexes_alone(
        stores: dict[int, tuple[sa.Engine, api_scale.Seeded]], box: SecretBox) -> None:
    """The Workload Queue's page keys (jobs and reported workloads sorted together) and its counts
    per kind read the (project, kind, status, created_at, id) indexes, never the tables' rows."""
    engine, seeded = stores[800]
    async with _client(engine, seeded, box) as client:
        with statements(engine) as seen:
            r = await client.get(api_scale.endpoints(seeded)["workloads (with counts)"])
    assert r.status_code == 200 and r.json()["items"]
    reads = [(q, p) for q, p in seen if "UNION ALL" in q or ("count(*)" in q and "GROUP BY" in q)]
    assert len(reads) == 2, [q for q, _ in seen]  # the page's keys; the counts (jobs', reported ones') in one
    with engine.connect() as conn:
        plans = [" ".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {q}", p))
                 for q, p in reads]
    for plan in plans:
        tables = plan.split("SEARCH ")[1:]
        assert tables and all("USING COVERING INDEX ix_" in step for step in tables), plan


async def test_a_project_token_is_looked_up_once_per_request(
        stores: dict[int, tuple[sa.Engine, api_scale.Seeded]], box: SecretBox) -> None:
    """The edge guard checks the bearer token before any body is read; the route's caller is
    settled from what it found, not by a second lookup. A revoked token is refused at once."""
    engine, seeded = stores[200]
    async with _client(engine, seeded, box) as client:
        with statements(engine) as seen:
            r = await client.get("/providers")
        assert r.status_code == 200 and r.json()["items"]
        assert sum("FROM api_token" in s for s, _ in seen) == 1
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE api_token SET revoked_at = CURRENT_TIMESTAMP"))
        assert (await client.get("/providers")).status_code == 401


async def test_each_row_of_the_list_reads_as_the_instance_itself_does(
        stores: dict[int, tuple[sa.Engine, api_scale.Seeded]], box: SecretBox) -> None:
    """The list builds its page from plain rows in one validation (api/responses.py `json_page`), GET
    one from the ORM row through `InstanceOut.of`: the same fields either way, fleet rows (their
    host's and bastion's pins) and cloud rows (their own pin, when it is this machine's) alike."""
    engine, seeded = stores[200]
    with engine.begin() as conn:  # half the live cloud rows get a pin of their machine, one a stale pin
        live = conn.execute(sa.text(
            "SELECT id, key, cloud_instance_id FROM instance WHERE provider != 'ssh' AND ssh_host IS NOT NULL"
            " AND status IN ('ready', 'terminating') AND project = :p ORDER BY id"),
            {"p": api_scale.MEASURED}).all()
        key_line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDwTWPmgSchPjjY4fxu4N3PY0vTmDiWFQ5mK5wYzsjZD"
        for n, (iid, key, cloud_id) in enumerate(live[::2]):
            machine = f"{key or ''}/{cloud_id or ''}" if n else "an-earlier-attempt/i-0"
            conn.execute(sa.text("UPDATE instance SET host_key = :k, host_key_machine = :m WHERE id = :i"),
                         {"k": key_line, "m": machine, "i": iid})
    async with _client(engine, seeded, box) as client:
        listed = (await client.get("/instances?status=active&limit=200")).json()["items"]
        singles = {i["id"]: (await client.get(f"/instances/{i['id']}")).json() for i in listed}
    assert {i["cloud"] for i in listed} > {"ssh"} and len(live) > 2
    pinned = [i for i in listed if i["cloud"] != "ssh" and i["host_key"]]
    assert len(pinned) == len(live[::2]) - 1  # the stale pin is not this machine's
    assert all(i["host_key"]["known_hosts"].endswith(key_line) for i in pinned)
    for item in listed:
        single = singles[item["id"]]
        for shown in (item, single):
            assert (shown.pop("uptime_s") is None) == (item["status"] not in ("ready", "terminating"))
        single.pop("attempts"), single.pop("events")
        item.pop("attempts"), item.pop("events")
        assert item == single


def test_the_bench_asks_for_the_pages_the_console_shows() -> None:
    """bench.api_scale times the console's requests: its two long lists at the page size the Cloud
    tab and the Workload Queue ask for (their `PAGE`), so a console change does not leave the bench
    measuring another load."""
    static = Path(__file__).resolve().parents[2] / "api" / "console" / "static" / "js"
    paths = api_scale.endpoints(api_scale.Seeded(token="", job_id="j", active=0, counts={}))
    for script, name in (("cloud.js", "instances?status=active"), ("queue.js", "workloads (with counts)")):
        [page] = re.findall(r"^const PAGE = (\d+);", (static / script).read_text(), flags=re.MULTILINE)
        assert parse_qs(urlsplit(paths[name]).query)["limit"] == [page], (script, paths[name])

"""(api) An API that stays fast: p50/p99 latency of the lists the Compute console calls, over HTTP
against the real API (`python -m api.serve`, as `gpuprov dev` and the compose file run it: one
process, then two), with `rows` instances (and their jobs, reported workloads, spend intervals) seeded
across several projects, on PostgreSQL and on SQLite.

    python -m bench.api_scale [--rows 10000] [--clients 8] [--requests 400] [--console-refreshes 25]
                              [--processes N ...]

Two loads: `clients` clients each asking again as soon as answered (the saturated case; beside it
the same clients on a no-op route, the floor of the server and the box at that concurrency), and
the console's own: `clients` tabs each refreshing its page every 3 s, as the console does.

The schema is made by the project's own migrations (store/migrate.py); rows go in by bulk inserts
(SQLAlchemy core executemany) into the real tables, while the project and its token are made by
the store's own functions so the API's auth takes them. PostgreSQL is GPUPROV_TEST_POSTGRES_URL's
server (default postgres@127.0.0.1:5432) in a database of its own, `gpuprov_bench_api`, dropped
afterwards; SQLite a temp file. Requests are made as the console makes them: with the session
cookie its sign-in gives for a project token, the first page of each list at the console's page size.

The clients are bench/lean_http.py's (`--client httpx`: httpx's): they share the API's two cores, and
what a client spends reading a reply counts as the API's latency (httpx's: ~0.64 ms a request).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncssh
import httpx
import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session

from bench.api_clients import CLIENTS, Client, open_client
from store import migrate
from store import projects as project_store
from store import spend as spend_store
from store.db import make_engine
from store.models import (
    Attempt,
    Connection,
    Fleet,
    FleetHost,
    Instance,
    InstanceEvent,
    Job,
    JobGpuSample,
    JobLogChunk,
    ReportedWorkload,
    SpendInterval,
)
from store.secrets import SecretBox

ROOT = Path(__file__).resolve().parent.parent
TARGET_P99_MS = 20.0
PG_URL = os.environ.get("GPUPROV_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
PG_DATABASE = "gpuprov_bench_api"
BACKENDS = ("postgresql", "sqlite")
# The API's process counts measured side by side: one, and settings' default (GPUPROV_API_WORKERS)
PROCESSES = (1, 2)
# The measured project holds the largest share: the tenant whose console pages are slowest.
PROJECTS = {"research": 0.4, "prod": 0.3, "staging": 0.2, "default": 0.1}
MEASURED = "research"
PROVIDERS = {  # cloud -> (instance type, GPU, $/hr, region)
    "lambda": ("gpu_1x_h100_pcie", "H100", 2.49, "us-east-1"),
    "aws": ("p4d.24xlarge", "A100", 32.77, "us-east-1"),
    "gcp": ("a2-highgpu-1g", "A100", 3.67, "us-central1"),
    "runpod": ("NVIDIA RTX 4090", "RTX 4090", 0.69, "EU-RO-1"),
    "azure": ("Standard_NC24ads_A100_v4", "A100", 3.67, "eastus"),
}
FLEET = "ssh"  # each project also has an SSH fleet of FLEET_HOSTS hosts, where FLEET_SHARE of instances run
FLEET_HOSTS = 8
FLEET_SHARE = 0.05
ACTIVE_SHARE = 0.1  # ~1,000 of 10,000 instances may still bill: the rest ended
DAYS = 60
LOG_LINES = 3000
LOG_LINES_PER_CHUNK = 25  # the job's reader stores what each poll found: small chunks


@dataclass
class Seeded:
    token: str  # a project token of MEASURED
    job_id: str  # a job of MEASURED with LOG_LINES of output
    active: int  # MEASURED's live instances
    counts: dict[str, int]  # rows per table


def _at(rng: random.Random, now: datetime) -> datetime:
    return now - timedelta(seconds=rng.uniform(0, DAYS * 86400))


def _instances(rng: random.Random, rows: int, now: datetime, conns: dict[tuple[str, str], str],
               fleet_share: float) -> list[dict[str, Any]]:
    out = []
    projects, weights = list(PROJECTS), list(PROJECTS.values())
    for n in range(rows):
        project = rng.choices(projects, weights)[0]
        cloud = FLEET if rng.random() < fleet_share else rng.choice(list(PROVIDERS))
        itype, gpu, price, region = PROVIDERS.get(cloud, ("host", "H100", 0.0, "local"))
        created = _at(rng, now)
        if rng.random() < ACTIVE_SHARE:
            status = rng.choices(["provisioning", "ready", "terminating"], [5, 85, 10])[0]
            created = now - timedelta(hours=rng.uniform(0.1, 72))  # a live one was made lately
        else:
            status = rng.choices(["terminated", "failed", "lost"], [80, 15, 5])[0]
        booted = created + timedelta(minutes=rng.uniform(1, 8))
        ready = None if status in ("provisioning", "failed") else booted
        ended = None
        if status in ("terminated", "lost"):
            assert ready is not None
            ended = min(now, ready + timedelta(hours=rng.uniform(0.5, 72)))
        elif status == "failed":
            ended = created + timedelta(minutes=rng.uniform(1, 10))
        count = rng.choice([1, 1, 2, 4, 8])
        iid = f"i{n:06d}{rng.randrange(36 ** 3):03x}"
        host = (_fleet_host(project, rng.randrange(FLEET_HOSTS)) if cloud == FLEET
                else f"10.{n % 250}.{n // 250 % 250}.7")
        out.append(dict(
            id=iid, name=f"{project}-run-{n}", project=project, provider=cloud,
            connection_id=conns[project, cloud], workflow_id=f"allocation-{iid}", status=status,
            phase="ready" if status == "ready" else "validate" if status == "provisioning" else "done",
            gpu=gpu, gpu_count=count, region=region, spot=rng.random() < 0.2, instance_type=itype,
            offer_region=region, price_per_hour=round(price * count, 4), cloud_instance_id=f"cl-{iid}",
            key=f"gpuprov-{iid}-1", ssh_host=host if ready else None,
            ssh_port=22 if ready else None, ssh_user="ubuntu" if ready else None,
            gpus_found=[{"name": f"NVIDIA {gpu}", "memory_mib": 81920}] * count if ready else None,
            error="no capacity in any region" if status == "failed" else None, note=None,
            created_at=created, updated_at=ended or ready or created, ready_at=ready, terminated_at=ended,
            host_key=None, host_key_machine=None, host_key_pinned_at=None))
    return out


def _fleet_host(project: str, position: int) -> str:
    return f"gpu{position}.{project}.lab.internal"


Rows = list[dict[str, Any]]


def _fleets(now: datetime, box: SecretBox, host_key: str) -> tuple[Rows, Rows]:
    """One SSH fleet per project, behind a bastion, its hosts probed and pinned."""
    fleets, hosts = [], []
    for project in PROJECTS:
        fid = f"f-{project}"
        fleets.append(dict(id=fid, project=project, name=f"{project} lab", user="ubuntu", port=22,
                           secret=box.seal({"private_key": "bench"}), bastion_host="bastion.lab.internal",
                           bastion_port=22, bastion_user="jump", bastion_secret=None, probe_id="p1",
                           bastion_host_key=host_key, created_at=now - timedelta(days=DAYS + 2)))
        hosts += [dict(id=f"{fid}-{k}", fleet_id=fid, position=k, host=_fleet_host(project, k), probed_at=now,
                       reachable=True, reason=None, gpu_vendor="nvidia", gpu_name="H100", gpu_count=8,
                       gpu_memory_gb=80, gpu_summary="8× H100 (80GB) · 640GB total", docker=True, sudo=True,
                       tcp_forwarding=True, host_key=host_key, host_key_pinned_at=now)
                  for k in range(FLEET_HOSTS)]
    return fleets, hosts


def _jobs(rng: random.Random, instances: Rows, rows: int, now: datetime) -> Rows:
    kinds = ["sft", "dpo", "grpo", "ppo", "serving", "eval", "task", "kb_compile", "synthetic"]
    out = []
    for n, inst in enumerate(rng.sample(instances, rows)):
        status = rng.choices(["queued", "provisioning", "running", "succeeded", "failed", "cancelled"],
                             [3, 1, 2, 70, 16, 8])[0]
        created = inst["created_at"]
        started = None if status in ("queued", "provisioning") else created + timedelta(minutes=5)
        ended = (inst["terminated_at"] or now) if status in ("succeeded", "failed", "cancelled") else None
        granted = None if status == "queued" else created
        out.append(dict(
            id=f"j{n:06d}", project=inst["project"], name=f"train-{n}", type=rng.choice(kinds),
            command="python train.py --config configs/run.yaml", image="nvcr.io/nvidia/pytorch:24.05-py3",
            gpu=inst["gpu"], gpu_count=inst["gpu_count"], cloud=None, requested_by="alice@example.com",
            priority=rng.choice([0, 0, 0, 5, 10]), max_price_per_hour=None, workflow_id=f"job-j{n:06d}",
            status=status, allocation_id=None if status == "queued" else inst["id"],
            host=inst["ssh_host"], exit_code={"succeeded": 0, "failed": 1}.get(status),
            error=None, created_at=created, updated_at=ended or created, started_at=started, ended_at=ended,
            granted_at=granted, released_at=ended if granted else None,
            granted_gpus=inst["gpu_count"] if granted else 0,
            granted_usd_per_hour=inst["price_per_hour"] if granted else 0.0))
    return out


def _reported(rng: random.Random, rows: int, now: datetime) -> list[dict[str, Any]]:
    kinds = ["sft", "grpo", "serving", "eval", "synthetic"]
    projects, weights = list(PROJECTS), list(PROJECTS.values())
    out = []
    for n in range(rows):
        at = _at(rng, now)
        status = rng.choices(["queued", "running", "succeeded", "failed"], [5, 10, 75, 10])[0]
        out.append(dict(
            project=rng.choices(projects, weights)[0], id=f"run-{n}", name=f"reported-{n}",
            kind=rng.choice(kinds), status=status, source=rng.choice(["training", "model", "synthetic"]),
            gpu="H100", gpu_count=rng.choice([1, 8]), location="local cluster", priority=rng.randrange(5),
            progress_pct=rng.uniform(0, 100) if status == "running" else None, eta_at=None,
            requested_by="bob@example.com", created_at=at, updated_at=at))
    return out


def seed(engine: sa.Engine, rows: int, rng: random.Random | None = None,
         fleet_share: float = FLEET_SHARE) -> Seeded:
    """`rows` instances across PROJECTS (`fleet_share` of them on the projects' SSH fleets) and every
    table the console's lists read; the schema must be at the migrations' head."""
    rng = rng or random.Random(24)
    now = datetime.now(UTC)
    box = SecretBox(Fernet.generate_key())
    with Session(engine) as session:
        for project in PROJECTS:
            project_store.add_project(session, project)  # None for `default`: it exists
        _, token = project_store.add_token(session, MEASURED, "bench")
    conns: dict[tuple[str, str], str] = {}
    conn_rows = []
    for project in PROJECTS:
        for n, cloud in enumerate(PROVIDERS):
            cid = f"c-{project}-{cloud}"
            conns[project, cloud] = cid
            conn_rows.append(dict(
                id=cid, project=project, provider=cloud, name=f"{cloud} ({project})", endpoint=None,
                ca_bundle=None, account=f"acct-{n}", status="connected", error=None,
                secret=box.seal({"api_key": f"key-{cid}"}),
                created_at=now - timedelta(days=DAYS + 1, minutes=n),
                health_status="healthy", health_reason=None, health_checked_at=now, health_latency_ms=120))
    for project in PROJECTS:
        conns[project, FLEET] = f"f-{project}"
    host_key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    fleets, fleet_hosts = _fleets(now, box, host_key)
    instances = _instances(rng, rows, now, conns, fleet_share)
    attempts = [dict(instance_id=i["id"], seq=1, provider=i["provider"], instance_type=i["instance_type"],
                     region=i["region"], spot=i["spot"], price_per_hour=i["price_per_hour"],
                     outcome="failed" if i["status"] == "failed" else "launched", reason=None,
                     at=i["created_at"]) for i in instances]
    events = [dict(instance_id=i["id"], status=s, phase=p, at=i["created_at"])
              for i in instances for s, p in (("provisioning", "plan"), ("provisioning", "create"),
                                              (i["status"], i["phase"]))]
    spend = [dict(key=i["key"], instance_id=i["id"], project=i["project"], connection_id=i["connection_id"],
                  provider=i["provider"], job_type="manual", rate_per_hour=i["price_per_hour"],
                  started_at=i["ready_at"], ended_at=i["terminated_at"])
             for i in instances if i["ready_at"] is not None]
    jobs = _jobs(rng, instances, rows // 5, now)
    log_job = next(j for j in jobs if j["project"] == MEASURED and j["status"] == "succeeded")
    chunks, offset = [], 0
    for first in range(0, LOG_LINES, LOG_LINES_PER_CHUNK):
        lines = range(first, first + LOG_LINES_PER_CHUNK)
        data = "".join(f"step {n:6d} loss {2.5 / (n + 1) ** 0.3:.5f} lr 3.0e-05 tok/s "
                       f"{rng.randrange(9000, 11000)}\n" for n in lines).encode()
        chunks.append(dict(job_id=log_job["id"], offset=offset, data=data, at=now))
        offset += len(data)
    samples = [dict(job_id=log_job["id"], at=now - timedelta(seconds=30 * r), gpu=g,
                    utilization_pct=rng.uniform(80, 100), memory_used_mib=70000, memory_total_mib=81920)
               for r in range(60) for g in range(4)]
    reported = _reported(rng, rows // 10, now)
    tables: list[tuple[Any, list[dict[str, Any]]]] = [
        (Connection, conn_rows), (Fleet, fleets), (FleetHost, fleet_hosts), (Instance, instances),
        (Attempt, attempts), (InstanceEvent, events),
        (SpendInterval, spend), (Job, jobs), (JobLogChunk, chunks), (JobGpuSample, samples),
        (ReportedWorkload, reported)]
    with engine.begin() as conn:
        for model, values in tables:
            for start in range(0, len(values), 5000):
                conn.execute(sa.insert(model.__table__), values[start:start + 5000])  # executemany
    with Session(engine) as session:
        # Each closed interval's cost in `spend_day`, as `close_interval` leaves it when a machine ends.
        spend_store.roll_up_closed(session)
    if engine.dialect.name == "postgresql":
        # Fresh planner statistics, as autovacuum keeps them on a live server. Not on SQLite: nothing
        # in gpuprov runs ANALYZE there, so its planner works without statistics, as here. The
        # tables of the engine's own schema only: a bare ANALYZE visits every schema of the
        # database, and deadlocked with a test's schema being dropped beside it (tests on one server).
        with engine.connect() as conn:
            own = conn.execute(sa.text(
                "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = current_schema()")).scalars()
            conn.execute(sa.text(f"ANALYZE {', '.join(own)}"))
            conn.commit()
    live = ("provisioning", "ready", "terminating")
    return Seeded(token=token, job_id=log_job["id"],
                  active=sum(1 for i in instances if i["project"] == MEASURED and i["status"] in live),
                  counts={model.__tablename__: len(values) for model, values in tables})


# --------------------------------------------------------------------------- the API process


@contextmanager
def database(backend: str, folder: Path) -> Iterator[str]:
    """A new, empty database of `backend` (its URL), removed afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'gpuprov.db'}"
        return
    admin = make_engine(PG_URL).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:  # one left by an interrupted run goes first
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)'))
        conn.execute(sa.text(f'CREATE DATABASE "{PG_DATABASE}"'))
    try:
        yield urlunsplit(urlsplit(PG_URL)._replace(path=f"/{PG_DATABASE}"))
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{PG_DATABASE}" WITH (FORCE)'))
        admin.dispose()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def api_process(url: str, home: Path, processes: int) -> Iterator[str]:
    """The API as `gpuprov dev` starts it (`python -m api.serve`: uvicorn in `processes` processes),
    on `url`'s database: its base URL."""
    port = _free_port()
    env = {**os.environ, "GPUPROV_HOME": str(home), "GPUPROV_DATABASE_URL": url,
           "GPUPROV_SECRET_KEY": Fernet.generate_key().decode(),
           "GPUPROV_TEMPORAL_ADDRESS": f"127.0.0.1:{_free_port()}"}  # never called by these reads
    home.mkdir(mode=0o700, exist_ok=True)
    log = (home / "api.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-m", "api.serve", "--workers", str(processes),
                             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the API exited ({proc.returncode}); see {home / 'api.log'}")
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the API did not answer within 60 s; see {home / 'api.log'}")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


# --------------------------------------------------------------------------- measuring


def console_cookie(base: str, token: str) -> dict[str, str]:
    """The session cookie the console's sign-in trades `token` for (api/console/session.py): the
    console's pages send it, not the token, with every request they make."""
    r = httpx.post(f"{base}/api/console/session", headers={"Authorization": f"Bearer {token}"}, timeout=60)
    r.raise_for_status()
    return dict(r.cookies)


def endpoints(seeded: Seeded) -> dict[str, str]:
    """Report name -> path under /api/compute: each list as the console asks for its first page."""
    return {
        "instances?status=active": "/instances?status=active&limit=50",  # cloud.js PAGE: the page shown
        "workloads (with counts)": "/workloads?type=ALL&limit=50",  # queue.js PAGE: the page shown
        "providers": "/providers?limit=200",  # cloud.js all("/providers")
        "spend?days=30": "/spend?days=30",  # cloud.js
        "job log": f"/jobs/{seeded.job_id}/logs?offset=0",  # the whole output of one job
        "job detail (last lines)": f"/workloads/job:{seeded.job_id}",  # queue.js opens a row
    }


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def measure(client: Client, path: str, *, clients: int, requests: int) -> dict[str, Any]:
    """`requests` GETs of `path` by `clients` concurrent clients (after a warm-up): p50/p99 in ms."""
    first = await client.get(path)
    if first.status_code != 200:
        raise RuntimeError(f"GET {path}: {first.status_code} {first.text[:300]}")
    body = first.json() if first.headers.get("content-type", "").startswith("application/json") else None
    items = len(body["items"]) if isinstance(body, dict) and "items" in body else None
    for _ in range(clients * 2):
        await client.get(path)
    latencies: list[float] = []
    left = requests

    async def one_client() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            r = await client.get(path)
            latencies.append((time.perf_counter() - t0) * 1000)
            if r.status_code != 200:
                raise RuntimeError(f"GET {path}: {r.status_code}")

    await asyncio.gather(*(one_client() for _ in range(clients)))
    return {"p50_ms": percentile(latencies, 0.50), "p99_ms": percentile(latencies, 0.99),
            "requests": len(latencies), "items": items, "bytes": len(first.content)}


# The console's own load: each open tab refreshes its page every REFRESH_S (api/console/static/js/
# dom.js `live`), the Cloud tab its three lists at once (cloud.js), the Queue tab the workloads and
# the job it shows (queue.js). Half the tabs on each, their refreshes spread over the period. (Both
# tabs re-read only the pages they show: the first, 50 rows, until someone asks for more.)
REFRESH_S = 3.0
# Rounds per tab: 75 s. Half the tabs show each page, so at 8 tabs each list is asked 4 × 25 = 100
# times, and its p99 is the second-slowest request; at 15 (before 2026-12-05) it was 60 times, and
# the "p99" the slowest.
CONSOLE_REFRESHES = 25
CLOUD_TAB = ("providers", "instances?status=active", "spend?days=30")
QUEUE_TAB = ("workloads (with counts)", "job detail (last lines)")


async def console_latencies(client: Client, paths: dict[str, str], *, tabs: int, refreshes: int,
                            rng: random.Random) -> dict[str, list[float]]:
    """`tabs` console tabs refreshing every REFRESH_S for `refreshes` rounds, each list at `paths[name]`:
    every request's latency (ms) per list."""
    latencies: dict[str, list[float]] = {name: [] for name in (*CLOUD_TAB, *QUEUE_TAB)}

    async def timed(name: str) -> None:
        t0 = time.perf_counter()
        r = await client.get(paths[name])
        latencies[name].append((time.perf_counter() - t0) * 1000)
        if r.status_code != 200:
            raise RuntimeError(f"GET {paths[name]}: {r.status_code}")

    async def tab(page: tuple[str, ...], offset: float) -> None:
        await asyncio.sleep(offset)
        for _ in range(refreshes):
            started = time.perf_counter()
            if page == CLOUD_TAB:
                await asyncio.gather(*(timed(name) for name in page))
            else:
                for name in page:  # the list, then the job it shows
                    await timed(name)
            await asyncio.sleep(max(0.0, REFRESH_S - (time.perf_counter() - started)))

    await asyncio.gather(*(tab(CLOUD_TAB if n % 2 == 0 else QUEUE_TAB, rng.uniform(0, REFRESH_S))
                           for n in range(tabs)))
    return {name: samples for name, samples in latencies.items() if samples}  # one tab: no Queue tab


def summary(samples: list[float]) -> dict[str, float]:
    return {"p50_ms": percentile(samples, 0.50), "p99_ms": percentile(samples, 0.99),
            "requests": len(samples)}


async def measure_console(client: Client, seeded: Seeded, base: str, *, tabs: int, refreshes: int,
                          ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """The console's own load: p50/p99 ms per list; and its floor, the same load with a no-op route
    (/healthz) in every list's place. On a 2-core VM a request after an idle gap costs more than
    one straight after another (/healthz on the 2-core box of 2026-12-04: 1.2 ms back to back, 3.1 ms
    after 0.1 s idle): the console's bursts every 3 s pay that, so its floor is not the saturated one."""
    lists = console_latencies(client, endpoints(seeded), tabs=tabs, refreshes=refreshes, rng=random.Random(7))
    per_list = {name: summary(samples) for name, samples in (await lists).items()}
    no_op = dict.fromkeys((*CLOUD_TAB, *QUEUE_TAB), f"{base}/healthz")
    floor = await console_latencies(client, no_op, tabs=tabs, refreshes=refreshes, rng=random.Random(7))
    return per_list, summary([ms for samples in floor.values() for ms in samples])


async def run_backend(backend: str, rows: int, clients: int, requests: int,
                      progress: Callable[[str], None] | None = None,
                      console_refreshes: int = CONSOLE_REFRESHES,
                      processes: tuple[int, ...] = PROCESSES, client: str = CLIENTS[0],
                      ) -> dict[int, dict[str, Any]]:
    """One seeded database, measured behind the API run in each of `processes` processes in turn."""
    with tempfile.TemporaryDirectory(prefix="gpuprov-bench-api-") as tmp:
        folder = Path(tmp)
        with database(backend, folder) as url:
            engine = make_engine(url)
            try:
                t0 = time.perf_counter()
                migrate.upgrade(engine)
                seeded = seed(engine, rows)
                seed_s = time.perf_counter() - t0
            finally:
                engine.dispose()
            # This client's own full collections (seen: 4 of up to 88 ms in one run, over what
            # seeding left) would be read as the server's latency.
            gc.collect()
            gc.freeze()
            found = {}
            for n in processes:
                with api_process(url, folder / f"home-{n}", n) as base:
                    figures = await measure_api(base, seeded, clients, requests, f"{backend}/{n}", progress,
                                                console_refreshes, client)
                found[n] = {"seed_s": seed_s, "counts": seeded.counts, "active": seeded.active, **figures}
    return found


async def measure_api(base: str, seeded: Seeded, clients: int, requests: int, label: str,
                      progress: Callable[[str], None] | None, console_refreshes: int,
                      client_kind: str = CLIENTS[0]) -> dict[str, Any]:
    async with open_client(client_kind, base, console_cookie(base, seeded.token), clients) as client:
        # The floor: a route with no auth and no database, by the same clients in the same
        # run — what uvicorn and this box's two cores cost alone at this concurrency.
        floor = await measure(client, f"{base}/healthz", clients=clients, requests=requests)
        if progress is not None:
            progress(f"{label} floor (/healthz): p50 {floor['p50_ms']:.1f} ms p99 {floor['p99_ms']:.1f} ms")
        figures = {}
        for name, path in endpoints(seeded).items():
            figures[name] = f = await measure(client, path, clients=clients, requests=requests)
            if progress is not None:
                progress(f"{label} {name}: p50 {f['p50_ms']:.1f} ms p99 {f['p99_ms']:.1f} ms, "
                         f"{f['items']} items, {f['bytes']} bytes")
        console, console_floor = await measure_console(client, seeded, base, tabs=clients,
                                                       refreshes=console_refreshes)
    return {"endpoints": figures, "floor": floor, "console": console, "console_floor": console_floor}


async def run(rows: int = 10_000, clients: int = 8, requests: int = 400,
              backends: tuple[str, ...] = BACKENDS, progress: Callable[[str], None] | None = None,
              console_refreshes: int = CONSOLE_REFRESHES, processes: tuple[int, ...] = PROCESSES,
              client: str = CLIENTS[0]) -> dict[str, Any]:
    """Per backend and API process count (`backend/n`), per console list: p50/p99 ms of `requests`
    GETs by `clients` concurrent clients (each asking again as soon as answered: the saturated case)
    against the API over a store of `rows` instances, beside a no-op route's (the floor), and p50/p99
    under the console's own load: `clients` tabs refreshing every REFRESH_S."""
    found = {}
    for b in backends:
        for n, figures in (await run_backend(b, rows, clients, requests, progress, console_refreshes,
                                             processes, client)).items():
            found[f"{b}/{n}"] = figures
    return {"rows": rows, "clients": clients, "requests": requests, "target_p99_ms": TARGET_P99_MS,
            "client": client, "backends": found}


def report(result: dict[str, Any]) -> list[str]:
    lines = []
    for backend, figures in result["backends"].items():  # "postgresql/2": 2 API processes
        floor = figures["floor"]
        lines.append(f"(api) {backend:<12}  {'floor: GET /healthz':<24}  p50 {floor['p50_ms']:.1f} ms  "
                     f"p99 {floor['p99_ms']:.1f} ms  (no auth, no database: the server, the box and "
                     f"the {result['client']} client alone)")
        for name, f in figures["endpoints"].items():
            verdict = "ok" if f["p99_ms"] <= result["target_p99_ms"] else "MISSED"
            target = f"(target p99 <= {result['target_p99_ms']:.0f} ms)"
            lines.append(f"(api) {backend:<12}  {name:<24}  p50 {f['p50_ms']:.1f} ms  "
                         f"p99 {f['p99_ms']:.1f} ms  = {f['p99_ms'] / floor['p99_ms']:.1f}x the floor's  "
                         f"{target} {verdict}")
        cf = figures["console_floor"]
        lines.append(f"(api) {backend:<12}  {'console floor: /healthz':<24}  p50 {cf['p50_ms']:.1f} ms  "
                     f"p99 {cf['p99_ms']:.1f} ms  (the console's load, a no-op route in every list's place)")
        for name, f in figures["console"].items():
            verdict = "ok" if f["p99_ms"] <= result["target_p99_ms"] else "MISSED"
            lines.append(f"(api) {backend:<12}  {name:<24}  p50 {f['p50_ms']:.1f} ms  "
                         f"p99 {f['p99_ms']:.1f} ms  under the console's own load ({result['clients']} tabs "
                         f"refreshing every {REFRESH_S:g} s, {f['requests']} requests) {verdict}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.api_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000, help="instances seeded (default 10000)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients (default 8)")
    parser.add_argument("--requests", type=int, default=400, help="requests per list (default 400)")
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="only this one (repeatable)")
    parser.add_argument("--console-refreshes", type=int, default=CONSOLE_REFRESHES,
                        help=f"refreshes per console tab, each {REFRESH_S:g} s (default {CONSOLE_REFRESHES})")
    parser.add_argument("--processes", type=int, action="append",
                        help=f"API processes (repeatable; default {' and '.join(map(str, PROCESSES))})")
    parser.add_argument("--client", choices=CLIENTS, default=CLIENTS[0],
                        help="the measuring client: bench/lean_http.py's (default), or httpx's")
    parser.add_argument("-v", "--verbose", action="store_true", help="also print rows seeded and page sizes")
    args = parser.parse_args()
    progress = (lambda line: print(line, file=sys.stderr, flush=True)) if args.verbose else None
    result = asyncio.run(run(rows=args.rows, clients=args.clients, requests=args.requests,
                             console_refreshes=args.console_refreshes,
                             backends=tuple(args.backend or BACKENDS), progress=progress,
                             processes=tuple(args.processes or PROCESSES), client=args.client))
    if args.verbose:
        for backend, figures in result["backends"].items():
            print(f"{backend}: seeded in {figures['seed_s']:.1f}s {figures['counts']}, "
                  f"{figures['active']} active in {MEASURED}")
            for name, f in figures["endpoints"].items():
                print(f"    {name}: {f['items']} items, {f['bytes']} bytes")
    print("\n".join(report(result)))


if __name__ == "__main__":
    main()

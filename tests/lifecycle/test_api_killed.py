"""The API SIGKILLed with requests in flight, as real processes: the API (one uvicorn process, as
`python -m api.serve` runs each of its processes in production), one worker (`python worker.py`),
the simulated clouds (their own process), a fresh PostgreSQL app database, and the session's
Temporal dev server.

Creates: 20 clients, each with its own Idempotency-Key. Five answer; then the `instance` table is
locked, so the other fifteen start their workflows and hang before writing their rows — and the API
dies there. After a restart every client retries its same request until it gets a 2xx: each key
ends with exactly one allocation, one row, one workflow, one machine.

Terminates: five answer; then the worker is stopped (SIGSTOP), so the other fifteen updates are
sent but cannot be accepted — and the API dies there. After a restart every client retries: all
twenty end `terminated` and the cloud holds none of ours.

Every wait is a condition with a generous bound (the CI box is a busy 2-core machine)."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from api.idempotency import derived_id
from fakeclouds.server import FakeCloudProcess
from messages.ids import allocation_workflow_id
from store.db import make_engine
from tests import simclouds
from tests.processes import Process, free_port, fresh_postgres_database, simulation_process, until

ROOT = Path(__file__).resolve().parents[2]
# In the crash lane, not the stacks lane: the two process lanes stay near one length (tests/tiers.py).
TESTS_LANE = "crash"
CLIENTS, FIRST_WAVE = 20, 5
API_APP = "gpuprov-api"  # the API's PostgreSQL application_name: its lock waits are visible


@pytest.fixture
def app_database() -> Iterator[str]:
    with fresh_postgres_database("gpuprov_kill") as url:
        yield url


@pytest.fixture
def sim(tmp_path: Path, processes: None) -> Iterator[FakeCloudProcess]:
    state = tmp_path / "fakeclouds"
    with simulation_process(boot_delay=0.2, terminate_delay=0.05, state_dir=state) as server:
        server.admin.set_stock("cpu-small", "local-1", 2 * CLIENTS, facade="local")  # no failover needed
        yield server


@dataclass
class Stack:
    api: Process
    worker: Process
    url: str
    token: str
    queue: str
    engine: sa.Engine  # the app database, for the checks (AUTOCOMMIT)
    temporal: Client
    timings: dict[str, float] = field(default_factory=dict)

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url + "/api/compute", timeout=60,
                                 headers={"Authorization": f"Bearer {self.token}"},
                                 limits=httpx.Limits(max_connections=2 * CLIENTS))

    async def api_up(self) -> None:
        async def healthy() -> bool:
            assert self.api.proc.poll() is None, f"the API exited:\n{self.api.tail()}"
            try:
                async with httpx.AsyncClient(timeout=5) as c:
                    return (await c.get(self.url + "/healthz")).status_code == 200
            except httpx.HTTPError:
                return False

        await until(healthy, 60, "the API to answer")

    def scalar(self, sql: str, **params: Any) -> Any:
        with self.engine.connect() as conn:
            return conn.execute(sa.text(sql), params).scalar()

    def rows(self) -> dict[str, tuple[str, str]]:
        with self.engine.connect() as conn:
            return {r.id: (r.status, r.workflow_id)
                    for r in conn.execute(sa.text("SELECT id, status, workflow_id FROM instance"))}

    def api_lock_waits(self) -> int:
        return int(self.scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                               "AND application_name = :app AND wait_event_type = 'Lock'", app=API_APP))

    async def workflow_exists(self, workflow_id: str) -> bool:
        try:
            await self.temporal.get_workflow_handle(workflow_id).describe()
        except RPCError:
            return False
        return True

    async def allocation_workflows(self) -> set[str]:
        query = f"WorkflowType = 'AllocationWorkflow' AND TaskQueue = '{self.queue}'"
        return {w.id async for w in self.temporal.list_workflows(query)}


@pytest.fixture
async def stack(temporal_env: WorkflowEnvironment, app_database: str, tmp_path: Path,
                sim: FakeCloudProcess, processes: None) -> AsyncIterator[Stack]:
    token, queue, port = secrets.token_urlsafe(16), f"kill-{uuid.uuid4().hex[:8]}", free_port()
    shared = {
        **simclouds.allowed_env(sim),
        "GPUPROV_DATABASE_URL": app_database,
        "GPUPROV_TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
        "GPUPROV_SECRET_KEY": Fernet.generate_key().decode(),
        "GPUPROV_API_TOKEN": token,
        "GPUPROV_TASK_QUEUE": queue,
        "PYTHONPATH": str(ROOT),
    }

    def env(home: str, app: str) -> dict[str, str]:
        (tmp_path / home).mkdir()
        base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPROV_", "PG"))}
        return {**base, **shared, "GPUPROV_HOME": str(tmp_path / home), "PGAPPNAME": app}

    worker = Process("worker", [sys.executable, "worker.py"], env("worker", "gpuprov-worker"),
                     tmp_path / "worker.log")
    api = Process("api", [sys.executable, "-m", "uvicorn", "--factory", "api.app:build_app",
                          "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                  env("api", API_APP), tmp_path / "api.log")
    engine = make_engine(app_database).execution_options(isolation_level="AUTOCOMMIT")
    s = Stack(api, worker, f"http://127.0.0.1:{port}", token, queue, engine, temporal_env.client)
    try:
        await s.api_up()
        yield s
    finally:
        # The assertions are done: SIGKILL, not SIGTERM (the worker's 10 s grace period for nothing).
        api.kill()
        worker.kill()
        engine.dispose()
        print(f"\nkill test timings (s): {s.timings}")


async def retry_until_2xx(http: httpx.AsyncClient, method: str, url: str, deadline: float,
                          **kwargs: Any) -> httpx.Response:
    """What a client does when the API goes away: the same request again until it is answered."""
    while True:
        try:
            r = await http.request(method, url, **kwargs)
            if r.status_code < 500:
                assert r.is_success, f"{method} {url}: {r.status_code} {r.text}"
                return r
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{method} {url} never answered"
        await asyncio.sleep(0.2)


async def test_api_killed_mid_flight_loses_and_doubles_nothing(stack: Stack, sim: FakeCloudProcess) -> None:
    t0 = time.monotonic()
    deadline = t0 + 240
    user_key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    keys = [f"kill-test-{i}-{uuid.uuid4().hex[:6]}" for i in range(CLIENTS)]
    expected = {derived_id("instance", "default", k) for k in keys}

    async with stack.http() as api, asyncio.TaskGroup() as clients:
        r = await api.post("/connections", json={"provider": "local",
                                                 "credentials": simclouds.credentials(sim, "local"),
                                                 "endpoint": simclouds.endpoint(sim, "local")},
                           headers={"Idempotency-Key": "connect-local"})
        assert r.status_code == 201, f"{r.text}\n{stack.worker.tail()}"
        stack.timings["connected"] = round(time.monotonic() - t0, 1)

        # ------------------------------------------------------------------ 20 creates, API killed
        answers: dict[int, list[str]] = {i: [] for i in range(CLIENTS)}

        async def create(i: int) -> None:
            body = {"cloud": "local", "k3s": False, "ssh_public_keys": [user_key], "name": f"kill-{i}"}
            r = await retry_until_2xx(api, "POST", "/instances", deadline, json=body,
                                      headers={"Idempotency-Key": keys[i]})
            assert r.status_code == 202, r.text
            answers[i].append(r.json()["id"])

        first = [clients.create_task(create(i)) for i in range(FIRST_WAVE)]
        await asyncio.wait_for(asyncio.gather(*first), 60)
        with stack.engine.connect() as lock:
            # Rows cannot be written now: the next requests start their workflows, then hang.
            lock = lock.execution_options(isolation_level="READ COMMITTED")
            tx = lock.begin()
            lock.execute(sa.text("LOCK TABLE instance IN ACCESS EXCLUSIVE MODE"))
            rest = [clients.create_task(create(i)) for i in range(FIRST_WAVE, CLIENTS)]

            async def hanging_after_their_start() -> bool:
                return await asyncio.to_thread(stack.api_lock_waits) >= 5

            await until(hanging_after_their_start, 60, "requests hanging after their workflow started")
            stack.api.kill()
            # The rows as the API left them (read under the lock: nothing has written since).
            rows_at_kill = {r.id: r.workflow_id
                            for r in lock.execute(sa.text("SELECT id, workflow_id FROM instance"))}
            tx.rollback()
        started = {iid for iid in expected if await stack.workflow_exists(allocation_workflow_id(iid))}
        assert sum(1 for i in answers if not answers[i]) == CLIENTS - FIRST_WAVE  # in flight when killed
        # Workflows without rows (their own record writes them), but never a row without a workflow.
        assert set(rows_at_kill) < started, (rows_at_kill, started)
        assert {allocation_workflow_id(i) for i in rows_at_kill} == set(rows_at_kill.values())
        stack.timings["creates: API killed"] = round(time.monotonic() - t0, 1)

        stack.api.restart()
        await stack.api_up()
        await asyncio.wait_for(asyncio.gather(*rest), 120)
        # Every client asks once more: the same answer (the id), nothing new.
        await asyncio.gather(*[create(i) for i in range(CLIENTS)])
        ids = {i: set(a) for i, a in answers.items()}
        assert all(len(v) == 1 for v in ids.values()), ids  # one allocation per key, same id every time
        assert {next(iter(v)) for v in ids.values()} == expected

        async def all_ready() -> bool:
            statuses = {iid: s for iid, (s, _) in stack.rows().items()}
            assert set(statuses) <= expected, statuses
            assert not {s for s in statuses.values()} & {"failed", "terminated", "lost"}, statuses
            return set(statuses) == expected and set(statuses.values()) == {"ready"}

        await until(all_ready, 150, f"all {CLIENTS} allocations ready")
        stack.timings["creates: all ready"] = round(time.monotonic() - t0, 1)
        rows = stack.rows()
        assert set(rows) == expected
        assert {wf for _, wf in rows.values()} == {allocation_workflow_id(i) for i in expected}

        async def same_workflows() -> bool:
            return await stack.allocation_workflows() == {allocation_workflow_id(i) for i in expected}

        await until(same_workflows, 30, "exactly one workflow per allocation")
        for _, workflow_id in rows.values():  # no row without a workflow (and it is running)
            desc = await stack.temporal.get_workflow_handle(workflow_id).describe()
            assert desc.status is not None and desc.status.name == "RUNNING", (workflow_id, desc.status)

        admin = sim.admin.aio
        machines = await admin.machines()
        live = [m for m in machines if m["status"] != "terminated"]
        owners = [(m.get("labels") or {}).get("gpuprov-allocation") for m in live]
        assert sorted(owners) == sorted(expected), live  # 20 of ours, one each; no unknown machine
        assert len(machines) == CLIENTS  # none was made and thrown away either

        # ------------------------------------------------------------------ 20 terminates, API killed
        order = sorted(expected)
        done: dict[str, list[str]] = {iid: [] for iid in order}

        async def terminate(iid: str) -> None:
            r = await retry_until_2xx(api, "POST", f"/instances/{iid}/terminate", deadline)
            assert r.status_code == 202 and r.json()["status"] in ("terminating", "terminated"), r.text
            done[iid].append(r.json()["status"])

        await asyncio.wait_for(asyncio.gather(*[terminate(i) for i in order[:FIRST_WAVE]]), 60)
        stack.worker.pause()  # updates can be sent, not accepted: the next requests hang after sending
        try:
            rest = [clients.create_task(terminate(i)) for i in order[FIRST_WAVE:]]

            async def updates_sent() -> bool:
                pending = 0
                for iid in order[FIRST_WAVE:]:
                    desc = await stack.temporal.get_workflow_handle(allocation_workflow_id(iid)).describe()
                    pending += desc.raw_description.HasField("pending_workflow_task")
                return pending >= 5

            await until(updates_sent, 60, "terminate updates sent and waiting for the worker")
            stack.api.kill()
        finally:
            stack.worker.resume()
        assert sum(1 for v in done.values() if not v) == CLIENTS - FIRST_WAVE
        stack.timings["terminates: API killed"] = round(time.monotonic() - t0, 1)

        stack.api.restart()
        await stack.api_up()
        await asyncio.wait_for(asyncio.gather(*rest), 120)
        await asyncio.gather(*[terminate(i) for i in order])  # asked again: accepted again

        async def all_terminated() -> bool:
            statuses = {s for s, _ in stack.rows().values()}
            assert statuses <= {"ready", "terminating", "terminated"}, statuses
            return statuses == {"terminated"}

        await until(all_terminated, 150, f"all {CLIENTS} allocations terminated")
        stack.timings["terminates: all terminated"] = round(time.monotonic() - t0, 1)
        assert set(stack.rows()) == expected
        machines = await admin.machines()
        assert len(machines) == CLIENTS and all(m["status"] == "terminated" for m in machines), machines
    stack.timings["total"] = round(time.monotonic() - t0, 1)

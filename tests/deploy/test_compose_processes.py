"""The production stack as written, without a Docker engine: the compose services' own commands and
environment, run as processes — two workers and the API on a fresh PostgreSQL app database, the
Temporal dev server standing in for `temporal`, the simulated clouds standing in for Lambda.

The worker running an allocation's create is SIGKILLed after the cloud accepted it; the create is
retried on the other worker, which must find that machine (both read the one installation id from
the database), so the allocation ends with exactly one machine and every resource carries that id."""

from __future__ import annotations

import os
import re
import secrets
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
import yaml
from cryptography.fernet import Fernet
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from fakeclouds.server import FakeCloudServer
from messages.ids import allocation_workflow_id
from store.db import make_engine
from tests import simclouds
from tests.processes import Process, free_port, fresh_postgres_database, until

ROOT = Path(__file__).resolve().parents[2]
# In the crash lane, not the stacks lane: the two process lanes stay near one length (tests/tiers.py).
TESTS_LANE = "crash"
# Compose host names and what stands in for them here.
COMPOSE_HOSTS = {"postgresql:5432", "temporal:7233"}


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def argv_of(command: list[str], port: int | None = None) -> list[str]:
    """The service's command as this machine runs it: this venv's python, loopback only."""
    argv = list(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0] == "uvicorn":
        argv[:1] = [sys.executable, "-m", "uvicorn"]
    argv = ["127.0.0.1" if a == "0.0.0.0" else a for a in argv]
    if port is not None:
        argv[argv.index("--port") + 1] = str(port)
    return argv


@pytest.fixture(scope="module")
def app_database() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for the app (the compose `postgresql` service's role)."""
    with fresh_postgres_database("gpuprov_compose") as url:
        yield url


class Stack:
    def __init__(self, client: Client, api_url: str, token: str, workers: list[Process], api: Process,
                 database_url: str) -> None:
        self.client, self.api_url, self.token = client, api_url, token
        self.workers, self.api, self.database_url = workers, api, database_url

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.api_url + "/api/compute", timeout=60,
                                 headers={"Authorization": f"Bearer {self.token}"})

    def installation_id(self) -> str:
        engine = make_engine(self.database_url)
        try:
            with engine.connect() as conn:
                return str(conn.execute(sa.text("SELECT installation_id FROM installation")).scalar_one())
        finally:
            engine.dispose()


@pytest.fixture(scope="module")
async def sim() -> AsyncIterator[FakeCloudServer]:
    async with FakeCloudServer(boot_delay=0.3, terminate_delay=0.05) as server:
        yield server


@pytest.fixture
async def stack(temporal_env: WorkflowEnvironment, app_database: str, tmp_path: Path,
                sim: FakeCloudServer, processes: None) -> AsyncIterator[Stack]:
    spec = compose()
    services = spec["services"]
    token = secrets.token_urlsafe(16)
    shared = dict(spec["x-gpuprov"]["environment"])
    # What the overrides below stand in for: the compose network's services.
    assert urlsplit(shared["GPUPROV_DATABASE_URL"]).netloc.split("@")[-1] in COMPOSE_HOSTS
    assert shared["GPUPROV_TEMPORAL_ADDRESS"] in COMPOSE_HOSTS
    overrides = {
        "GPUPROV_DATABASE_URL": app_database,  # the `postgresql` service
        "GPUPROV_TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,  # `temporal`
        "GPUPROV_SECRET_KEY": Fernet.generate_key().decode(),  # what .env would provide
        "GPUPROV_API_TOKEN": token,
        "GPUPROV_TASK_QUEUE": f"compose-{uuid.uuid4().hex[:8]}",
        **simclouds.allowed_env(sim),  # the simulated cloud stands in for a cloud's documented host
        "PYTHONPATH": str(ROOT),
        # The adapters pace at the simulation's speed (its rate limits run 1000x faster than real).
        "GPUPROV_CLOUD_TIME_SCALE": os.environ.get("GPUPROV_CLOUD_TIME_SCALE", "0.001"),
        # Each replica's container address stands for its own network: here the processes share the
        # host's, where 0.0.0.0 is every interface and one port fits one worker (tests/test_worker_
        # metrics_http.py covers the server).
        "GPUPROV_WORKER_METRICS_PORT": "0",
        # The killed worker's create is retried on the other one 5 s after its last heartbeat, not
        # the default 30: what is checked is that the retry finds the machine, not how long it waits.
        "GPUPROV_HEARTBEAT_TIMEOUT_S": "5",
    }
    assert set(overrides) - {"GPUPROV_TASK_QUEUE", "PYTHONPATH", "GPUPROV_CLOUD_TIME_SCALE",
                             "GPUPROV_HEARTBEAT_TIMEOUT_S"} <= set(shared)

    def env(home: str) -> dict[str, str]:
        # Each replica is its own container: its own (empty) home. Nothing may depend on it.
        (tmp_path / home).mkdir()
        base = {k: v for k, v in os.environ.items() if not k.startswith("GPUPROV_")}
        # Its own /tmp too: the API's counters directory (api/serve.py) outlives the SIGKILL below.
        (tmp_path / home / "tmp").mkdir()
        return {**base, **shared, **overrides, "GPUPROV_HOME": str(tmp_path / home),
                "TMPDIR": str(tmp_path / home / "tmp")}

    workers = [Process(f"worker-{i}", argv_of(services["worker"]["command"]), env(f"worker-{i}"),
                       tmp_path / f"worker-{i}.log") for i in range(services["worker"]["deploy"]["replicas"])]
    port = free_port()
    api = Process("api", argv_of(services["api"]["command"], port), env("api"), tmp_path / "api.log")
    s = Stack(temporal_env.client, f"http://127.0.0.1:{port}", token, workers, api, app_database)

    async def api_up() -> bool:
        try:
            async with httpx.AsyncClient() as c:
                return (await c.get(s.api_url + "/healthz")).status_code == 200
        except httpx.HTTPError:
            return False
    try:
        await until(api_up, 60, f"the API to answer; log:\n{api.tail() if api.log.exists() else ''}")
        yield s
    finally:
        # The assertions are done: SIGKILL, not SIGTERM, which would give the surviving worker's
        # in-flight activities its 10 s grace period (graceful_shutdown_timeout) for nothing.
        for service in [api, *workers]:
            service.kill()


async def test_a_create_retried_on_the_other_worker_makes_one_machine(stack: Stack,
                                                                     sim: FakeCloudServer) -> None:
    sim.admin.reset()
    async with stack.http() as api:
        r = await api.post("/connections", json={
            "provider": "lambda", "name": "lambda (simulated)",
            "credentials": simclouds.credentials(sim, "lambda"),
            "endpoint": simclouds.endpoint(sim, "lambda")})
        assert r.status_code == 201, r.text

        # The create takes effect on the cloud, then its answer is held back: the worker dies in between.
        sim.admin.add_fault("lambda", "create", "latency", when="after", seconds=60)
        user_key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
        r = await api.post("/instances", json={"cloud": "lambda", "gpu": "a10", "k3s": False,
                                               "ssh_public_keys": [user_key]})
        assert r.status_code == 202, r.text
        allocation_id = r.json()["id"]
        installation = stack.installation_id()
        prefix = f"gpuprov-{installation}-"

        def ours() -> list[dict[str, Any]]:
            return [m for m in sim.admin.machines() if str(m.get("name") or "").startswith(prefix)]

        async def accepted() -> bool:
            return len(ours()) == 1

        await until(accepted, 60, "the cloud to accept the create")
        handle = stack.client.get_workflow_handle(allocation_workflow_id(allocation_id))
        pending = (await handle.describe()).raw_description.pending_activities
        creating = [a for a in pending if a.activity_type.name == "create_instance"]
        assert creating and creating[0].last_worker_identity, pending
        pid = int(creating[0].last_worker_identity.split("@")[0])
        first = next(w for w in stack.workers if w.proc.pid == pid)
        first.kill()
        sim.admin.clear_faults()

        async def ready() -> dict[str, Any] | None:
            body = (await api.get(f"/instances/{allocation_id}")).json()
            assert body["status"] in ("provisioning", "ready"), body
            return body if body["status"] == "ready" else None

        inst = await until(ready, 150, "the allocation to become ready on the other worker")
        live = [m for m in ours() if m["status"] != "terminated"]
        assert len(live) == 1, live  # the retry found the machine; it did not launch a second one
        assert inst["ssh"] is not None
        # Every cloud resource of ours carries the deployment's one id.
        assert all(re.match(rf"^gpuprov-{installation}-", str(m.get("name") or ""))
                   for m in sim.admin.machines() if m.get("facade") == "lambda")

        r = await api.post(f"/instances/{allocation_id}/terminate")
        assert r.status_code == 202, r.text

        async def terminated() -> bool:
            return (await api.get(f"/instances/{allocation_id}")).json()["status"] == "terminated"

        await until(terminated, 90, "terminate")
        assert all(m["status"] == "terminated" for m in ours())

"""Job tests: the real API (ASGI) over the session's Temporal dev server, an in-process worker on a
task queue of this module's own (stoppable, so a test can restart it), the simulated clouds with
real SSH machines, a fresh SQLite app database."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client

from activities.deps import ActivityDeps
from api.app import create_app
from api.deps import AppDeps
from api.temporal import TemporalGateway
from fakeclouds.server import FakeCloudServer
from messages.allocation import Timing
from store import migrate
from store.db import make_engine
from store.secrets import SecretBox
from tests import simclouds
from tests.api.conftest import TOKEN
from tests.eventually import eventually
from worker import GpuprovWorker, build_worker

INSTALLATION = "jobtest01"
CLOUD = "lambda"  # GPUs (a simulated nvidia-smi), and a login on port 22 of its own address
METRICS_INTERVAL_S = 1.0  # GPU samples of a running job (GPUPROV_JOB_METRICS_INTERVAL_S: 30 s)
FAST = Timing(heartbeat_timeout_s=3, poll_interval_s=0.2, call_timeout_s=30, boot_timeout_s=60,
              ssh_timeout_s=20, k3s_timeout_s=30, max_retry_interval_s=1)


class Stack:
    """The API client, the worker (restartable) and what the checks read."""

    def __init__(self, client: Client, deps: ActivityDeps, queue: str, sim: FakeCloudServer,
                 http: httpx.AsyncClient) -> None:
        self.client, self.deps, self.queue, self.sim, self.http = client, deps, queue, sim, http
        self.worker: GpuprovWorker | None = None
        self._run: asyncio.Task[None] | None = None

    async def start_worker(self) -> None:
        self.worker = build_worker(self.client, self.deps, task_queue=self.queue,
                                   graceful_shutdown_timeout=timedelta(0))
        self._run = asyncio.create_task(self.worker.run())

    async def stop_worker(self) -> None:
        """Stop the worker at once: its running activities are interrupted mid-run."""
        assert self.worker is not None and self._run is not None
        await self.worker.shutdown()
        await asyncio.gather(self._run, return_exceptions=True)
        self.worker = self._run = None

    async def job(self, job_id: str) -> dict[str, Any]:
        r = await self.http.get(f"/api/compute/jobs/{job_id}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    async def until_status(self, job_id: str, *statuses: str, within_s: float = 90) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            job = await self.job(job_id)
            if job["status"] in ("succeeded", "failed", "cancelled") and job["status"] not in statuses:
                raise AssertionError(f"job ended {job['status']}, not {statuses}: {job}")
            return job if job["status"] in statuses else None

        got: dict[str, Any] = await eventually(reached, within=within_s, what=f"job {job_id} {statuses}")
        return got

    async def run(self, command: str, **fields: Any) -> str:
        body = {"name": "test", "type": "task", "command": command, "cloud": CLOUD, "gpu": "a10",
                "requested_by": "tests", **fields}
        r = await self.http.post("/api/compute/jobs", json=body)
        assert r.status_code == 202, r.text
        job_id: str = r.json()["id"]
        return job_id

    async def logs(self, job_id: str, offset: int = 0) -> bytes:
        r = await self.http.get(f"/api/compute/jobs/{job_id}/logs", params={"offset": offset})
        assert r.status_code == 200, r.text
        return r.content

    async def live_machines(self) -> list[dict[str, Any]]:
        machines: list[dict[str, Any]] = await self.sim.admin.aio.live_machines()
        return machines

    def home_of(self, machine: dict[str, Any]) -> Path:
        return Path(machine["home"])


@pytest.fixture(scope="module")
def job_engine(tmp_path_factory: pytest.TempPathFactory) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path_factory.mktemp('jobs') / 'app.db'}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(scope="module")
async def stack(temporal_client: Client, job_engine: sa.Engine,
                secret_box: SecretBox) -> AsyncIterator[Stack]:
    queue = f"jobs-{uuid.uuid4().hex[:8]}"
    deps = ActivityDeps(engine=job_engine, box=secret_box, installation_id=INSTALLATION,
                        client=temporal_client, job_metrics_interval_s=METRICS_INTERVAL_S)
    gateway = TemporalGateway("unused", "default", queue, keys=secret_box.keys)
    gateway._client = temporal_client  # the session's dev server, already connected
    app_deps = AppDeps(engine=job_engine, box=secret_box, api_token=TOKEN, installation_id=INSTALLATION,
                       workflows=gateway, job_timing=FAST, job_log_poll_s=0.1, job_queue_poll_s=0.3)
    async with FakeCloudServer(boot_delay=0.2, terminate_delay=0.05) as sim:
        with simclouds.allowed(deps, sim), Session(job_engine) as s:
            simclouds.add_connection(s, secret_box, sim, CLOUD)
        with simclouds.allowed(deps, sim):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(app_deps)),
                                         base_url="http://api", timeout=120,
                                         headers={"Authorization": f"Bearer {TOKEN}"}) as http:
                st = Stack(temporal_client, deps, queue, sim, http)
                await st.start_worker()
                try:
                    yield st
                finally:
                    if st.worker is not None:
                        await st.stop_worker()

"""One Temporal dev server (SQLite on disk, WAL), one simulated cloud, one store and one
in-process worker, shared by the benchmarks so every ratio is measured side by side."""

from __future__ import annotations

import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import sqlalchemy as sa
from cryptography.fernet import Fernet
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

import worker as worker_module
from activities.deps import ActivityDeps
from fakeclouds.server import FakeCloudProcess, start_subprocess
from store import migrate, repo
from store.db import make_engine, session_scope
from store.secrets import SecretBox
from workflows import search_attributes
from workflows.converter import DATA_CONVERTER
from workflows.models import AllocateRequest, Timing, allocate_workflow_id

ROOT = Path(__file__).resolve().parent.parent
TASK_QUEUE = "gpuprov-bench"
INSTALLATION = "benchins"


@dataclass
class Bench:
    client: Client
    cloud: FakeCloudProcess
    engine: sa.Engine
    deps: ActivityDeps
    lambda_connection: str
    user_key: str  # a user's public key, as `gpuprov up --ssh-key` would send

    async def allocate(self, allocation_id: str, timing: Timing, **fields: object) -> float:
        """Run one allocation to ready on the simulated Lambda; return its wall time in seconds."""
        req = AllocateRequest(allocation_id=allocation_id, connection_id=self.lambda_connection,
                              cloud="lambda", installation_id=INSTALLATION, k3s=False,
                              ssh_public_keys=[self.user_key], timing=timing, **fields)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        await self.client.execute_workflow("AllocateWorkflow", req, id=allocate_workflow_id(allocation_id),
                                           task_queue=TASK_QUEUE)
        return time.perf_counter() - t0


@asynccontextmanager
async def bench_stack(*, boot_delay: float) -> AsyncIterator[Bench]:
    with tempfile.TemporaryDirectory(prefix="gpuprov-bench-") as tmp:
        home = Path(tmp)
        env = await WorkflowEnvironment.start_local(
            data_converter=DATA_CONVERTER,
            dev_server_existing_path=str(ROOT / ".venv" / "bin" / "temporal"),
            dev_server_database_filename=str(home / "temporal.db"),
            search_attributes=search_attributes.ALL,
            dev_server_extra_args=["--sqlite-pragma", "journal_mode=wal",
                                   "--sqlite-pragma", "synchronous=normal"],
        )
        engine = make_engine(f"sqlite:///{home / 'gpuprov.db'}")
        migrate.upgrade(engine)
        box = SecretBox(Fernet.generate_key())
        deps = ActivityDeps(engine=engine, box=box, installation_id=INSTALLATION, client=env.client)
        try:
            # The cloud runs in its own process, as a real one would be remote.
            cloud = start_subprocess(boot_delay=boot_delay, terminate_delay=0.01)
            try:
                with session_scope(engine) as s:
                    conn = repo.add_connection(s, box, provider="lambda", name="bench",
                                               credentials={"api_key": cloud.tokens["lambda"]},
                                               endpoint=f"{cloud.url}/lambda/api/v1")
                    repo.mark_connection(s, conn.id, status="connected", account="bench")
                user_key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
                async with worker_module.build_worker(env.client, deps, task_queue=TASK_QUEUE,
                                                      max_concurrent_activities=400,
                                                      max_concurrent_workflow_tasks=400):
                    yield Bench(env.client, cloud, engine, deps, conn.id, user_key)
            finally:
                cloud.stop()
        finally:
            await env.shutdown()
            engine.dispose()

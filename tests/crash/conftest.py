"""Crash tests: a REAL worker process (`python worker.py`) against the test Temporal server,
a simulated cloud in this process (it outlives the worker), and a store on disk."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.testing import WorkflowEnvironment

from cli import acceptance as cli_acceptance
from fakeclouds.server import FakeCloudServer
from store.identity import installation_id
from store.secrets import SecretBox
from tests import processes, simclouds

ROOT = Path(__file__).resolve().parent.parent.parent
TASK_QUEUE = "gpuprov-crash-tests"


class WorkerProcess(cli_acceptance.WorkerProcess):
    """`python worker.py` with the test environment (the acceptance runner's process handle), which
    only a `processes` test may start."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        super().__init__(log, env)

    def start(self) -> None:
        processes.require("the worker process")
        super().start()

    def stop(self, grace_s: float = 20) -> None:
        super().stop(grace_s)


@pytest.fixture(scope="module")
async def sim() -> AsyncIterator[FakeCloudServer]:
    async with FakeCloudServer(boot_delay=0.3, terminate_delay=0.05) as server:
        yield server


def worker_env(temporal_env: WorkflowEnvironment, tmp_path: Path, db_path: Path, secret_key: bytes,
               sim: FakeCloudServer, task_queue: str = TASK_QUEUE) -> dict[str, str]:
    """The environment `python worker.py` runs with in these tests. Its temporary files go to the
    test's own directory: a worker killed with SIGKILL never removes them (an SDK adapter's CA file)."""
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    return {**os.environ,
            "TMPDIR": str(temp),
            **simclouds.allowed_env(sim),
            "GPUPROV_HOME": str(tmp_path / "home"),
            "GPUPROV_DATABASE_URL": f"sqlite:///{db_path}",
            "GPUPROV_SECRET_KEY": secret_key.decode(),
            "GPUPROV_TEMPORAL_ADDRESS": temporal_env.client.service_client.config.target_host,
            "GPUPROV_TASK_QUEUE": task_queue,
            # A killed worker's workflows wait this long on its sticky queue before the restarted one
            # may take them (Temporal's default 10 s: most of each crash test's time, for nothing).
            "GPUPROV_STICKY_TIMEOUT_S": "1",
            "PYTHONPATH": str(ROOT)}


@pytest.fixture
def worker_process(temporal_env: WorkflowEnvironment, tmp_path: Path, db_path: Path, secret_key: bytes,
                   db_engine: sa.Engine, sim: FakeCloudServer, processes: None) -> Iterator[WorkerProcess]:
    w = WorkerProcess(worker_env(temporal_env, tmp_path, db_path, secret_key, sim), tmp_path / "worker.log")
    w.start()
    yield w
    # The assertions are done: SIGKILL, not SIGTERM, which would give in-flight activities the
    # worker's 10 s grace period (graceful_shutdown_timeout) for nothing.
    w.kill()


@pytest.fixture
def local_connection(sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox) -> str:
    with Session(db_engine) as s:
        return simclouds.add_connection(s, secret_box, sim, "local")


@pytest.fixture
def installation(db_engine: sa.Engine) -> str:
    """The deployment's installation id, as the worker process reads it from the database."""
    return installation_id(db_engine)


@pytest.fixture(autouse=True)
def clean_sim(sim: FakeCloudServer) -> Iterator[None]:
    sim.admin.reset()
    yield
    sim.admin.reset()


def machines_of(sim: FakeCloudServer, key_prefix: str) -> list[dict[str, Any]]:
    return [m for m in sim.admin.machines() if str(m.get("name", "")).startswith(key_prefix)]

"""The acceptance tier: the acceptance suite (workflows/acceptance.py) run against every simulated
cloud by an in-process worker of its own, through the API's own request (api/routers/acceptance.py),
the way `gpuprov acceptance run` starts one. Its tests use `acceptance_worker`, which puts them in
the `acceptance` tier (tests/tiers.py): `make test` runs it, `make test-acceptance` alone."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client

from activities.deps import ActivityDeps
from cli.acceptance import PrivateWorker
from fakeclouds.server import FakeCloudServer
from providers import registry, support
from store.identity import installation_id
from store.secrets import SecretBox
from tests import processes, simclouds
from worker import build_worker

TASK_QUEUE = "gpuprov-acceptance-tier"


@pytest.fixture(scope="session")
def acceptance_deps(db_engine: sa.Engine, secret_box: SecretBox, temporal_client: Client) -> ActivityDeps:
    # The database's installation id: the private worker process reads the same, so what either
    # worker makes carries one ownership tag.
    return ActivityDeps(engine=db_engine, box=secret_box, installation_id=installation_id(db_engine),
                        client=temporal_client)


@pytest.fixture(scope="module")
async def acceptance_sim(acceptance_deps: ActivityDeps) -> AsyncIterator[FakeCloudServer]:
    async with FakeCloudServer(boot_delay=0.3, terminate_delay=0.05) as server:
        with simclouds.allowed(acceptance_deps, server):
            yield server


def import_clients() -> None:
    """Import every adapter and the client libraries it imports (what its first call would import
    on the worker's event loop), so the runs' steps time the clouds, not a cold import."""
    for entry in registry.entries():
        for name in sorted(support.imported_modules(support.adapter_files(entry.id))):
            with contextlib.suppress(ImportError):
                importlib.import_module(name)


@pytest.fixture(scope="module")
async def acceptance_worker(temporal_client: Client, acceptance_deps: ActivityDeps,
                            acceptance_sim: FakeCloudServer) -> AsyncIterator[None]:
    await asyncio.to_thread(import_clients)
    async with build_worker(temporal_client, acceptance_deps, task_queue=TASK_QUEUE):
        yield
    await acceptance_deps.aclose()  # its adapters' CA files (as a worker process does when it exits)


@pytest.fixture
def connect(acceptance_sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox) -> Iterator[Any]:
    def add(cloud: str) -> str:
        with Session(db_engine) as s:
            return simclouds.add_connection(s, secret_box, acceptance_sim, cloud)
    yield add


@pytest.fixture(scope="module")
def private_worker(module_processes: None, acceptance_sim: FakeCloudServer, temporal_client: Client,
                   db_path: Path, secret_key: bytes,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateWorker]:
    """The runner's own worker process on a private task queue (cli/acceptance.py PrivateWorker, as
    `gpuprov acceptance run` starts it), sharing this session's database and simulation."""
    processes.require("the private worker")
    home = tmp_path_factory.mktemp("private-worker")
    env = {**os.environ, **simclouds.allowed_env(acceptance_sim),
           "GPUPROV_HOME": str(home), "GPUPROV_DATABASE_URL": f"sqlite:///{db_path}",
           "GPUPROV_SECRET_KEY": secret_key.decode(),
           "GPUPROV_TEMPORAL_ADDRESS": temporal_client.service_client.config.target_host,
           "PYTHONPATH": str(processes.ROOT)}
    worker = PrivateWorker(f"gpuprov-acceptance-{uuid.uuid4().hex[:12]}", home / "worker.log", env=env)
    worker.start()
    yield worker
    worker.stop(grace_s=0)  # the assertions are done: no grace period for nothing (and its TMPDIR removed)

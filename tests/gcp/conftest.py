"""A simulated Compute Engine for the GCP tests, and the official SDK pointed at it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from temporalio.client import Client

from activities.deps import ActivityDeps
from fakeclouds.gcp_api import FACADE
from fakeclouds.server import FakeCloudServer, default_tokens
from providers.base import ConnectionOptions
from providers.gcp import GcpProvider
from store.secrets import SecretBox
from tests import simclouds
from worker import build_worker

# The end-to-end tests' own worker: a task queue and installation of their own, so it runs beside
# the workflow tests' worker in one session (two workers may not share a queue in one process).
TASK_QUEUE = "gpuprov-gcp-tests"
INSTALLATION = "gcpwf001"
# The simulation derives a token's 2048-bit key in pure Python (about 1 s of CPU, several on a busy
# box), cached per process: tests that need a key use one of these two, so the session derives each
# once. The simulated project's own default token (its servers derive that one anyway), and one it
# did not issue.
SIM_TOKEN = default_tokens([FACADE.name])[FACADE.name]
STRANGER_TOKEN = "not-the-token"


@pytest.fixture(scope="module")
async def sim() -> AsyncIterator[FakeCloudServer]:
    async with FakeCloudServer(boot_delay=0.3, terminate_delay=0.05, facades=[FACADE]) as server:
        yield server


@pytest.fixture
def sim_clean(sim: FakeCloudServer) -> FakeCloudServer:
    sim.admin.reset()
    return sim


@pytest.fixture
def provider(sim: FakeCloudServer) -> Callable[..., GcpProvider]:
    def make(installation_id: str = "gcptest1", **credentials: Any) -> GcpProvider:
        creds = {**simclouds.credentials(sim, "gcp"), **credentials}
        p = GcpProvider(
            GcpProvider.parse_credentials(creds),
            options=ConnectionOptions(endpoint=simclouds.endpoint(sim, "gcp")),
            installation_id=installation_id,
        )
        return p

    return make


@pytest.fixture
def sdk(sim: FakeCloudServer) -> Callable[[str], Any]:
    """`sdk("InstancesClient")`: an official google-cloud-compute client on the simulation."""
    from google.cloud import compute_v1
    from google.oauth2 import service_account

    info = json.loads(simclouds.credentials(sim, "gcp")["service_account_key"])
    creds = service_account.Credentials.from_service_account_info(info)

    def client(kind: str) -> Any:
        return getattr(compute_v1, kind)(
            credentials=creds, client_options={"api_endpoint": simclouds.endpoint(sim, "gcp")}
        )

    return client


@pytest.fixture(scope="session")
async def gcp_worker_deps(
    db_engine: sa.Engine, secret_box: SecretBox, temporal_client: Client
) -> AsyncIterator[ActivityDeps]:
    deps = ActivityDeps(
        engine=db_engine, box=secret_box, installation_id=INSTALLATION, client=temporal_client
    )
    async with build_worker(temporal_client, deps, task_queue=TASK_QUEUE):
        yield deps
    await deps.aclose()  # its adapters' CA files (as a worker process does when it exits)


@pytest.fixture
def gcp_worker(gcp_worker_deps: ActivityDeps, sim: FakeCloudServer) -> Iterator[None]:
    """The worker, allowed to call this module's simulated Compute Engine (as `make run` allows its own)."""
    with simclouds.allowed(gcp_worker_deps, sim):
        yield

"""A simulated Compute Engine for the GCP tests, and the official SDK pointed at it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from fakeclouds.gcp_api import FACADE
from fakeclouds.server import FakeCloudServer
from providers.base import ConnectionOptions
from providers.gcp import GcpProvider
from tests import simclouds

# The AllocationWorkflow fixtures, for the end-to-end test (a worker on the workflow tests' queue).
from tests.workflows.conftest import (  # noqa: F401
    activity_deps,
    fake_connection,
    fake_registered,
    make_request,
    wf_worker,
)


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

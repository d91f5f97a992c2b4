"""POST /connections through a real Temporal dev server and the real worker (in-process):
ConnectWorkflow's activities verify the sealed credentials and save the connection only if they work."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
import sqlalchemy as sa
from temporalio.client import Client

from activities.deps import ActivityDeps
from api.app import create_app
from api.deps import AppDeps, TemporalGateway
from store.secrets import SecretBox
from tests.api.conftest import GOOD_KEY, TOKEN
from worker import build_worker

pytestmark = pytest.mark.devserver


@pytest.fixture
async def real_client(engine: sa.Engine, box: SecretBox,
                      temporal_client: Client) -> AsyncIterator[httpx.AsyncClient]:
    queue = f"api-test-{uuid.uuid4().hex[:8]}"
    gateway = TemporalGateway("unused", "default", queue)
    gateway._client = temporal_client  # the session's dev server, already connected
    deps = AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001", workflows=gateway,
                   connect_timeout_s=30)
    worker = build_worker(temporal_client, ActivityDeps(engine=engine, box=box, installation_id="inst0001"),
                          task_queue=queue)
    async with worker, httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(deps)),
                                         base_url="http://api",
                                         headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


async def test_connect_through_temporal(real_client: httpx.AsyncClient) -> None:
    r = await real_client.post("/api/compute/connections",
                               json={"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY}})
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "connected" and r.json()["account"] == "fake-account-7"
    r = await real_client.post("/api/compute/connections",
                               json={"provider": "fakecloud", "credentials": {"api_key": "bad"}})
    assert r.status_code == 400 and "refused the API key" in r.json()["detail"], r.text
    listed = (await real_client.get("/api/compute/connections")).json()["items"]
    assert [c["status"] for c in listed] == ["connected"]  # the failed one was removed

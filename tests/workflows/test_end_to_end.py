"""Allocate and terminate end to end: in-process worker, real adapters (local, lambda), the
simulated clouds over HTTP with real SSH machines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from fakeclouds.server import FakeCloudServer
from providers import registry
from store import repo
from store.secrets import SecretBox
from tests.workflows.conftest import INSTALLATION, start_allocate
from tests.workflows.test_terminate_connect import terminate
from workflows.models import Phase

pytestmark = pytest.mark.devserver

ENDPOINTS = {"local": "/local/v1", "lambda": "/lambda/api/v1"}


@pytest.fixture(scope="module")
async def sim() -> AsyncIterator[FakeCloudServer]:
    async with FakeCloudServer(boot_delay=0.3, terminate_delay=0.05) as server:
        yield server


@pytest.fixture
def connect_sim(sim: FakeCloudServer, db_engine: sa.Engine, secret_box: SecretBox) -> Any:
    def add(cloud: str) -> str:
        with Session(db_engine) as s:
            return repo.add_connection(s, secret_box, provider=cloud, name=cloud,
                                       credentials={"api_key": sim.tokens[cloud]},
                                       endpoint=sim.url + ENDPOINTS[cloud]).id
    return add


async def owned(sim: FakeCloudServer, cloud: str) -> list[Any]:
    async with registry.build(cloud, {"api_key": sim.tokens[cloud]}, endpoint=sim.url + ENDPOINTS[cloud],
                              installation_id=INSTALLATION) as p:
        return await p.list_owned()


@pytest.mark.parametrize("cloud", ["local", "lambda"])
async def test_allocate_then_terminate_on_the_simulated_clouds(temporal_client: Any, wf_worker: None,
                                                               sim: FakeCloudServer, connect_sim: Any,
                                                               make_request: Any, cloud: str) -> None:
    # Lambda's k3s goes over SSH and needs the internet; the GPU check is what we test there.
    req = make_request(cloud=cloud, connection_id=connect_sim(cloud), k3s=(cloud == "local"),
                       gpu=None if cloud == "local" else "a10")
    st = await (await start_allocate(temporal_client, req)).result()

    assert st.phase == Phase.READY and st.host == "127.0.0.1"
    if cloud == "local":
        assert st.gpus == [] and any(n.startswith("k3s skipped") for n in st.notes)
    else:
        assert st.offer is not None and st.offer.gpu is not None
        assert len(st.gpus) == st.offer.gpu.count and "A10" in st.gpus[0].name
    assert [r.key for r in await owned(sim, cloud)] == [st.attempts[-1].key]

    await terminate(temporal_client, req.allocation_id)
    assert await owned(sim, cloud) == []
    mine = [m for m in sim.admin.machines() if m["id"] == st.ref.instance_id]  # type: ignore[union-attr]
    assert len(mine) == 1 and mine[0]["status"] == "terminated"

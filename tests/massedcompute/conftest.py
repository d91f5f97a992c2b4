"""The simulated Massed Compute for tests/massedcompute: one server per session (this cloud only),
raw API clients on it, and the adapter pointed at it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds import massedcompute_api
from fakeclouds.server import FakeCloudServer
from providers.base import ConnectionOptions, LaunchSpec, Ownership
from providers.massedcompute import MassedComputeProvider
from tests import simclouds
from tests.eventually import eventually

NAME = massedcompute_api.NAME
PREFIX = massedcompute_api.FACADE.prefix
WITHIN = 30.0  # a deadline bounds a failure only: generous for a busy 2-core box
KEY = asyncssh.generate_private_key("ssh-ed25519")
PUBKEY = KEY.export_public_key().decode().strip()


@pytest.fixture(scope="session")
def mc_server() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(boot_delay=0.2, terminate_delay=0.02, facades=[massedcompute_api.FACADE]) as server:
        yield server


def _fresh(server: FakeCloudServer) -> None:
    server.admin.reset()  # machines, faults, stock, quotas, facade state (billing)
    server.admin.configure(boot_delay=0.2, terminate_delay=0.02, time_scale=0.001)
    server.engine.ssh_keys[NAME].clear()  # account keys outlive reset(); each test starts without


@pytest.fixture
def sim(mc_server: FakeCloudServer) -> Iterator[FakeCloudServer]:
    _fresh(mc_server)
    yield mc_server
    _fresh(mc_server)


@pytest.fixture
async def api(sim: FakeCloudServer) -> AsyncIterator[httpx.AsyncClient]:
    """A plain client of the simulated API, as a user's script would be."""
    headers = {"Authorization": f"Bearer {sim.tokens[NAME]}"}
    async with httpx.AsyncClient(base_url=f"{sim.url}{PREFIX}", headers=headers) as client:
        yield client


def adapter(server: FakeCloudServer, installation_id: str | None = None,
            token: str | None = None) -> MassedComputeProvider:
    creds = MassedComputeProvider.parse_credentials(simclouds.credentials(server, NAME, token))
    return MassedComputeProvider(creds, options=ConnectionOptions(endpoint=simclouds.endpoint(server, NAME)),
                                 installation_id=installation_id or uuid.uuid4().hex[:8])


@pytest.fixture
async def mc(sim: FakeCloudServer) -> AsyncIterator[MassedComputeProvider]:
    p = adapter(sim)
    async with p:
        yield p


def spec(p: MassedComputeProvider, key: str | None = None, keys: list[str] | None = None,
         **extra: Any) -> LaunchSpec:
    key = key or f"t-{uuid.uuid4().hex[:10]}"
    return LaunchSpec(key=key, owner=Ownership(installation_id=p.installation_id, allocation_id=key),
                      ssh_public_keys=keys or [PUBKEY], **extra)


async def add_key(api: httpx.AsyncClient, name: str = "k1", public_key: str = PUBKEY) -> dict[str, Any]:
    r = await api.post("/ssh-keys", json={"name": name, "publicKey": public_key})
    assert r.status_code == 200, r.text
    key: dict[str, Any] = r.json()["sshKey"]
    return key


async def launch(api: httpx.AsyncClient, **fields: Any) -> httpx.Response:
    body = {"imageId": 1, "productName": "gpu_1x_a6000", "regionName": "us-central-1", **fields}
    return await api.post("/instance/launch", json=body)


async def instance(api: httpx.AsyncClient, uuid_: str) -> dict[str, Any]:
    r = await api.get(f"/instance/{uuid_}")
    assert r.status_code == 200, r.text
    inst: dict[str, Any] = r.json()["runningInstance"]
    return inst


async def wait_booted(api: httpx.AsyncClient, uuid_: str) -> dict[str, Any]:
    return await eventually(lambda: instance(api, uuid_), until=lambda inst: inst["os_booted"] == 1,
                            within=WITHIN, what=f"{uuid_} booted")


async def wait_gone(api: httpx.AsyncClient, uuid_: str) -> None:
    async def status() -> int:
        return (await api.get(f"/instance/{uuid_}")).status_code

    await eventually(status, until=lambda code: code == 404, within=WITHIN, what=f"{uuid_} gone (404)")


async def ssh_run(host: str, command: str, key: asyncssh.SSHKey = KEY) -> str:
    async with asyncssh.connect(host, 22, username=massedcompute_api.LOGIN_USER, client_keys=[key],
                                known_hosts=None, agent_path=None, connect_timeout=10) as conn:
        result = await conn.run(command, check=False)
        return str(result.stdout)

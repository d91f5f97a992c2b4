"""The simulated DigitalOcean for tests/digitalocean: one server per session (DigitalOcean only),
a raw HTTP client on its /v2 API, and the adapter pointed at it."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds import admin, digitalocean_api
from fakeclouds.ratelimit import Limit
from fakeclouds.server import FakeCloudServer
from providers.base import ConnectionOptions, LaunchSpec, Ownership
from providers.digitalocean import DigitalOceanProvider
from tests import simclouds

USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
OTHER_KEY = asyncssh.generate_private_key("ssh-ed25519")


def public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


class Admin(admin.FakeCloudAdmin):
    """The admin client on one connection (the stock one opens a client, and a TLS context, per call)."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self._client = httpx.Client(timeout=self.timeout)

    def _request(self, method: str, path: str, json: Any = None, pick: Any = None) -> Any:
        body = admin._decode(self._client.request(method, f"{self.base_url}/_fake{path}", json=json))
        return pick(body) if pick else body


class Sim(FakeCloudServer):
    _admin: Admin | None = None

    @property
    def admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self.url)
        return self._admin


@pytest.fixture(scope="session")
def do_sim() -> Iterator[Sim]:
    server = Sim(boot_delay=0.2, terminate_delay=0.02, facades=[digitalocean_api.FACADE])
    with server:
        yield server


@pytest.fixture
def sim(do_sim: Sim) -> Iterator[Sim]:
    """The session's simulated DigitalOcean, fresh after each test: no faults, default stock,
    quota and timing."""
    yield do_sim
    do_sim.admin.reset()
    do_sim.admin.configure(time_scale=0.001)


def limited(burst: int, hourly: int) -> Iterator[FakeCloudServer]:
    """A server whose DigitalOcean has tiny documented-style limits, run at real speed."""
    facade = dataclasses.replace(digitalocean_api.FACADE, rate_limits=(
        Limit(calls=burst, per_s=60, what=digitalocean_api.BURST),
        Limit(calls=hourly, per_s=3600, what=digitalocean_api.HOURLY)))
    with FakeCloudServer(facades=[facade], time_scale=1.0) as server:
        yield server


@pytest.fixture(scope="module")
def burst_limited() -> Iterator[FakeCloudServer]:
    yield from limited(burst=3, hourly=1000)


@pytest.fixture(scope="module")
def hourly_limited() -> Iterator[FakeCloudServer]:
    yield from limited(burst=1000, hourly=3)


def client(server: FakeCloudServer, token: str | None = None) -> httpx.AsyncClient:
    token = token or server.tokens["digitalocean"]
    return httpx.AsyncClient(base_url=simclouds.endpoint(server, "digitalocean"),
                             headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
async def api(sim: FakeCloudServer) -> AsyncIterator[httpx.AsyncClient]:
    async with client(sim) as c:
        yield c


def adapter(server: FakeCloudServer, installation_id: str | None = None,
            cls: type[DigitalOceanProvider] = DigitalOceanProvider) -> DigitalOceanProvider:
    creds = cls.parse_credentials(simclouds.credentials(server, "digitalocean"))
    return cls(creds, options=ConnectionOptions(endpoint=simclouds.endpoint(server, "digitalocean")),
               installation_id=installation_id or uuid.uuid4().hex[:8])


@pytest.fixture
async def do(sim: FakeCloudServer) -> AsyncIterator[DigitalOceanProvider]:
    async with contextlib.aclosing(adapter(sim)) as p:
        yield p


def spec(p: DigitalOceanProvider, key: str | None = None, **extra: Any) -> LaunchSpec:
    key = key or f"t-{uuid.uuid4().hex[:10]}"
    return LaunchSpec(key=key, owner=Ownership(installation_id=p.installation_id, allocation_id=key),
                      ssh_public_keys=[public(USER_KEY)], **extra)


async def add_key(api: httpx.AsyncClient, key: asyncssh.SSHKey = USER_KEY) -> dict[str, Any]:
    r = await api.post("/account/keys", json={"name": "mine", "public_key": public(key)})
    assert r.status_code == 201, r.text
    return dict(r.json()["ssh_key"])


async def launch(api: httpx.AsyncClient, fingerprint: str, **fields: Any) -> httpx.Response:
    body = {"name": "gpu-1", "region": "tor1", "size": "gpu-4000adax1-20gb", "image": "gpu-h100x1-base",
            "ssh_keys": [fingerprint], **fields}
    return await api.post("/droplets", json=body)

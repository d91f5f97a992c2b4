"""The simulated Vast.ai for tests/vastai: one server per session (Vast.ai only), a raw HTTP client
on its API as the CLI would call it, and the adapter pointed at it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import asyncssh
import httpx
import pytest

from fakeclouds import vastai_api
from fakeclouds.engine import Engine
from fakeclouds.faults import FaultRule
from fakeclouds.server import FakeCloudServer
from providers.base import ConnectionOptions, LaunchSpec, Offer, OfferQuery, Ownership
from providers.vastai import VastAIProvider
from tests import simclouds

T = TypeVar("T")
USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
OTHER_KEY = asyncssh.generate_private_key("ssh-ed25519")
CHEAP = vastai_api.ASKS[0]  # 1x RTX 3090 in Quebec, stock 6
DEADLINE = 15.0


def public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


@pytest.fixture(scope="session")
def vast_sim() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(boot_delay=0.1, terminate_delay=0.02, facades=[vastai_api.FACADE]) as server:
        yield server


def on_engine(server: FakeCloudServer, fn: Callable[[Engine], T]) -> T:
    """An admin step run on the engine itself, on its loop (no HTTP client per call: tests stay fast)."""
    async def run() -> T:
        return fn(server.engine)
    return server.call(run())


def configure(server: FakeCloudServer, **settings: Any) -> None:
    on_engine(server, lambda engine: engine.configure(**settings))


def add_fault(server: FakeCloudServer, op: str, kind: str, **params: Any) -> None:
    on_engine(server, lambda engine: engine.faults.add(
        FaultRule.build("vastai", op, kind, facades=engine.facades, **params)))


def set_stock(server: FakeCloudServer, ask: int, count: int) -> None:
    country = vastai_api.country_code(next(a.geolocation for a in vastai_api.ASKS if a.id == ask))
    on_engine(server, lambda engine: engine.set_stock(str(ask), country, count))


@pytest.fixture
def sim(vast_sim: FakeCloudServer) -> Iterator[FakeCloudServer]:
    """The session's simulated Vast.ai: fresh stock, no faults, rate limits at test speed."""
    vast_sim.call(vast_sim.engine.reset())
    configure(vast_sim, boot_delay=0.1, terminate_delay=0.02, time_scale=0.001)
    yield vast_sim
    vast_sim.call(vast_sim.engine.reset())


@pytest.fixture
async def api(sim: FakeCloudServer) -> AsyncIterator[httpx.AsyncClient]:
    """A raw client calls back to back on purpose: rate limits off unless a test turns them on."""
    configure(sim, time_scale=0)
    headers = {"Authorization": f"Bearer {sim.tokens['vastai']}"}
    async with httpx.AsyncClient(base_url=simclouds.endpoint(sim, "vastai"), headers=headers) as client:
        yield client


def adapter(server: FakeCloudServer, cls: type[VastAIProvider] = VastAIProvider, *,
            installation_id: str | None = None, token: str | None = None,
            endpoint: str | None = None) -> VastAIProvider:
    creds = cls.parse_credentials(simclouds.credentials(server, "vastai", token))
    return cls(creds, options=ConnectionOptions(endpoint=endpoint or simclouds.endpoint(server, "vastai")),
               installation_id=installation_id or uuid.uuid4().hex[:8])


@pytest.fixture
async def vast(sim: FakeCloudServer) -> AsyncIterator[VastAIProvider]:
    p = adapter(sim)
    async with p:
        yield p


def spec(p: VastAIProvider, key: str | None = None, **extra: Any) -> LaunchSpec:
    key = key or f"t-{uuid.uuid4().hex[:10]}"
    extra.setdefault("ssh_public_keys", [public(USER_KEY)])
    return LaunchSpec(key=key, owner=Ownership(installation_id=p.installation_id, allocation_id=key), **extra)


async def offer(p: VastAIProvider, ask: int = CHEAP.id, spot: bool = False) -> Offer:
    found = [o for o in await p.offers(OfferQuery(spot=spot)) if o.instance_type.startswith(f"{ask}-")]
    assert len(found) == 1, found
    return found[0]


async def ssh_run(host: str, port: int, key: asyncssh.SSHKey, command: str = "echo ok") -> str:
    async with asyncssh.connect(host, port, username="root", client_keys=[key], known_hosts=None,
                                connect_timeout=10) as conn:
        result = await conn.run(command, check=True)
        return str(result.stdout).strip()

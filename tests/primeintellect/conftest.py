"""The simulated Prime Intellect for tests/primeintellect: one server per session (this cloud only), reset
around each test; a raw API client and the adapter pointed at it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds import primeintellect_api
from fakeclouds.server import FakeCloudServer
from providers.base import CloudProvider, ConnectionOptions, LaunchSpec, Offer, OfferQuery, Ownership
from providers.primeintellect import PrimeIntellectProvider
from tests import simclouds

BOOT_DELAY = 0.3
USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
PUBLIC_KEY = USER_KEY.export_public_key().decode().strip()


@pytest.fixture(scope="session")
def pi_sim() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(boot_delay=BOOT_DELAY, terminate_delay=0.05,
                         facades=[primeintellect_api.FACADE]) as server:
        yield server


@pytest.fixture
def sim(pi_sim: FakeCloudServer) -> Iterator[FakeCloudServer]:
    """The session's simulated cloud: no pods, faults or account keys; default stock and timing."""
    pi_sim.admin.reset()
    pi_sim.admin.configure(boot_delay=BOOT_DELAY, time_scale=0.001)
    yield pi_sim
    pi_sim.admin.reset()
    pi_sim.admin.configure(time_scale=0.001)


@pytest.fixture
async def api(sim: FakeCloudServer) -> AsyncIterator[httpx.AsyncClient]:
    """The simulated API as any client sees it (bearer token set)."""
    headers = {"Authorization": f"Bearer {sim.tokens['primeintellect']}"}
    async with httpx.AsyncClient(base_url=simclouds.endpoint(sim, "primeintellect"), headers=headers) as c:
        yield c


def adapter(server: FakeCloudServer, cls: type[PrimeIntellectProvider] = PrimeIntellectProvider,
            installation_id: str | None = None, token: str | None = None) -> PrimeIntellectProvider:
    creds = cls.parse_credentials(simclouds.credentials(server, "primeintellect", token))
    return cls(creds, options=ConnectionOptions(endpoint=simclouds.endpoint(server, "primeintellect")),
               installation_id=installation_id or uuid.uuid4().hex[:8])


@pytest.fixture
async def pi(sim: FakeCloudServer) -> AsyncIterator[PrimeIntellectProvider]:
    p = adapter(sim)
    try:
        yield p
    finally:
        await p.aclose()


def spec(p: CloudProvider, key: str | None = None, **extra: Any) -> LaunchSpec:
    key = key or f"t-{uuid.uuid4().hex[:10]}"
    extra.setdefault("ssh_public_keys", [PUBLIC_KEY])
    return LaunchSpec(key=key, owner=Ownership(installation_id=p.installation_id, allocation_id=key), **extra)


async def offer_of(p: CloudProvider, provider: str = "tensordock", gpu: str = "a6000",
                   zone: str = "US-KS-2") -> Offer:
    found = [o for o in await p.offers(OfferQuery(gpu=gpu))
             if o.instance_type.startswith(f"{provider}__") and o.zone == zone]
    assert len(found) == 1, found
    return found[0]

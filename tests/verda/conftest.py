"""The simulated Verda for tests/verda: one server per session (Verda only), raw API clients with a
token of their own, and the adapter pointed at it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds import verda_api
from fakeclouds.server import FakeCloudServer
from providers.base import LaunchSpec, Offer, OfferQuery, Ownership
from providers.verda import VerdaProvider
from tests import simclouds

USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
PUBKEY = USER_KEY.export_public_key().decode().strip()
BOOT_DELAY = 0.2


@pytest.fixture(scope="session")
def verda_sim() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(boot_delay=BOOT_DELAY, terminate_delay=0.02, facades=[verda_api.FACADE]) as server:
        yield server


@pytest.fixture
def sim(verda_sim: FakeCloudServer) -> FakeCloudServer:
    """The session's simulated Verda, fresh: no faults, default stock, token lifetimes and timing
    (the next test's reset, or the server's stop, ends what a test left)."""
    verda_sim.admin.reset()
    verda_sim.admin.configure(boot_delay=BOOT_DELAY, terminate_delay=0.02)
    return verda_sim


def base_url(server: FakeCloudServer) -> str:
    return simclouds.endpoint(server, "verda")


async def token(server: FakeCloudServer) -> dict[str, Any]:
    creds = simclouds.credentials(server, "verda")
    async with httpx.AsyncClient(base_url=base_url(server)) as client:
        r = await client.post("/oauth2/token", json={"grant_type": "client_credentials", **creds})
    assert r.status_code == 200, r.text
    return dict(r.json())


@pytest.fixture
async def api(sim: FakeCloudServer) -> AsyncIterator[httpx.AsyncClient]:
    """A raw client of the simulated API, authenticated as the SDK would be."""
    access = (await token(sim))["access_token"]
    async with httpx.AsyncClient(base_url=base_url(sim), headers={"Authorization": f"Bearer {access}"}) as c:
        yield c


def adapter(server: FakeCloudServer, installation_id: str | None = None, **creds: str) -> VerdaProvider:
    given = {**simclouds.credentials(server, "verda"), **creds}
    return VerdaProvider(VerdaProvider.parse_credentials(given), options=simclouds.options(server, "verda"),
                         installation_id=installation_id or uuid.uuid4().hex[:8])


@pytest.fixture
async def verda(sim: FakeCloudServer) -> AsyncIterator[VerdaProvider]:
    p = adapter(sim)
    async with p:
        yield p


def spec(p: VerdaProvider, key: str | None = None, **extra: Any) -> LaunchSpec:
    key = key or f"t-{uuid.uuid4().hex[:10]}"
    return LaunchSpec(key=key, owner=Ownership(installation_id=p.installation_id, allocation_id=key),
                      ssh_public_keys=[PUBKEY], **extra)


async def offer(p: VerdaProvider, instance_type: str = "1H100.80S.30V", location: str = "FIN-01",
                spot: bool = False) -> Offer:
    offers = await p.offers(OfferQuery(region=location, spot=spot))
    found = [o for o in offers if o.instance_type == instance_type]
    assert len(found) == 1, found
    return found[0]

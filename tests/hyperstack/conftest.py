"""The simulated Hyperstack for tests/hyperstack: one server per session (Hyperstack only), the
adapter pointed at it, and a raw client that speaks the API as a user would."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import asyncssh
import httpx
import pytest

from fakeclouds import hyperstack_api
from fakeclouds.server import FakeCloudServer
from providers.base import ConnectionOptions, LaunchSpec, Offer, OfferQuery, Ownership
from providers.hyperstack import HyperstackProvider
from tests import simclouds

USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
OTHER_KEY = asyncssh.generate_private_key("ssh-ed25519")


def public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


@pytest.fixture(scope="session")
def hs_sim() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(boot_delay=0.3, terminate_delay=0.05, facades=[hyperstack_api.FACADE]) as server:
        yield server


@pytest.fixture
def sim(hs_sim: FakeCloudServer) -> Iterator[FakeCloudServer]:
    """The session's simulated Hyperstack: no faults, no VMs, default stock, limits at test speed."""
    hs_sim.admin.reset()
    hs_sim.admin.configure(boot_delay=0.3, terminate_delay=0.05, time_scale=0.001)
    yield hs_sim
    hs_sim.admin.reset()
    hs_sim.admin.configure(time_scale=0.001)


def adapter(server: FakeCloudServer, installation_id: str | None = None,
            token: str | None = None) -> HyperstackProvider:
    creds = HyperstackProvider.parse_credentials(simclouds.credentials(server, "hyperstack", token))
    options = ConnectionOptions(endpoint=simclouds.endpoint(server, "hyperstack"))
    return HyperstackProvider(creds, options=options, installation_id=installation_id or uuid.uuid4().hex[:8])


@pytest.fixture
async def hs(sim: FakeCloudServer) -> AsyncIterator[HyperstackProvider]:
    p = adapter(sim)
    async with p:
        yield p


@pytest.fixture
async def api(sim: FakeCloudServer) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"api_key": sim.tokens["hyperstack"]}
    async with httpx.AsyncClient(base_url=simclouds.endpoint(sim, "hyperstack"), headers=headers) as client:
        yield client


def spec(p: HyperstackProvider, key: str | None = None, **extra: object) -> LaunchSpec:
    key = key or f"t-{uuid.uuid4().hex[:10]}"
    return LaunchSpec(key=key, owner=Ownership(installation_id=p.installation_id, allocation_id=key),
                      ssh_public_keys=[public(USER_KEY)], **extra)  # type: ignore[arg-type]


async def offer(p: HyperstackProvider, instance_type: str = "n3-A100x1", region: str = "CANADA-1",
                spot: bool = False) -> Offer:
    offers = await p.offers(OfferQuery(region=region, spot=spot))
    found = [o for o in offers if o.instance_type == instance_type]
    assert len(found) == 1, found
    return found[0]

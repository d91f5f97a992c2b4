"""The simulated Lambda for tests/lambda_: one server per session (Lambda only, its documented rate
limits at the test speed, time_scale 0.001, like the adapters' pacing: GPUPROV_CLOUD_TIME_SCALE), a
raw HTTP client on its API, and the adapter pointed at it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds import lambda_api
from fakeclouds.server import FakeCloudServer
from providers.base import ConnectionOptions, LaunchSpec, Offer, OfferQuery, Ownership
from providers.credentials import ApiKeyCredentials
from providers.lambda_ import LambdaProvider
from tests import simclouds

SCALE = 0.001  # the session's time scale (tests/conftest.py sets GPUPROV_CLOUD_TIME_SCALE to it)
USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
PUBLIC = USER_KEY.export_public_key().decode().strip()


@pytest.fixture(scope="session")
def lambda_sim() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(boot_delay=0.2, terminate_delay=0.05, facades=[lambda_api.FACADE],
                         time_scale=SCALE) as server:
        yield server


@pytest.fixture
def sim(lambda_sim: FakeCloudServer) -> Iterator[FakeCloudServer]:
    """The session's simulated Lambda: no faults, default timing and stock, limits at SCALE."""
    lambda_sim.admin.reset()
    lambda_sim.admin.configure(boot_delay=0.2, terminate_delay=0.05, time_scale=SCALE)
    yield lambda_sim
    lambda_sim.admin.reset()
    lambda_sim.admin.configure(boot_delay=0.2, terminate_delay=0.05, time_scale=SCALE)


@pytest.fixture
async def lam(sim: FakeCloudServer) -> AsyncIterator[httpx.AsyncClient]:
    """Lambda's API by hand. Rate limits are off (time_scale 0) unless a test turns them on."""
    sim.admin.configure(time_scale=0)
    headers = {"Authorization": f"Bearer {sim.tokens['lambda']}"}
    async with httpx.AsyncClient(base_url=simclouds.endpoint(sim, "lambda"), headers=headers) as client:
        yield client


def adapter(server: FakeCloudServer, installation_id: str | None = None) -> LambdaProvider:
    creds = LambdaProvider.parse_credentials(simclouds.credentials(server, "lambda"))
    assert isinstance(creds, ApiKeyCredentials)
    return LambdaProvider(creds, options=ConnectionOptions(endpoint=simclouds.endpoint(server, "lambda")),
                          installation_id=installation_id or uuid.uuid4().hex[:8])


@pytest.fixture
async def p(sim: FakeCloudServer) -> AsyncIterator[LambdaProvider]:
    provider = adapter(sim)
    async with provider:
        yield provider


def spec(p: LambdaProvider, key: str | None = None, **extra: Any) -> LaunchSpec:
    key = key or f"t-{uuid.uuid4().hex[:10]}"
    extra.setdefault("ssh_public_keys", [PUBLIC])
    return LaunchSpec(key=key, owner=Ownership(installation_id=p.installation_id, allocation_id=key), **extra)


async def offer(p: LambdaProvider, region: str = "us-east-1", instance_type: str = "gpu_1x_a10") -> Offer:
    found = [o for o in await p.offers(OfferQuery(region=region)) if o.instance_type == instance_type]
    assert len(found) == 1, found
    return found[0]


def launch_body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"region_name": "us-east-1", "instance_type_name": "gpu_1x_a10",
                            "ssh_key_names": ["k1"], "name": "job"}
    body.update(fields)
    return body


async def add_key(lam: httpx.AsyncClient, name: str = "k1") -> None:
    """The SSH key object `name` (the admin's reset keeps the account's keys: it may be there)."""
    r = await lam.post("/ssh-keys", json={"name": name, "public_key": PUBLIC})
    assert r.status_code == 200 or "already exists" in r.text, r.text


def code(r: httpx.Response) -> str:
    return str(r.json()["error"]["code"])

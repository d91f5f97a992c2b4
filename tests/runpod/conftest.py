"""The simulated RunPod for tests/runpod: one server per session (RunPod only), raw clients of its
API, and the adapter pointed at it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds import runpod_api
from fakeclouds.admin import FakeCloudAdmin
from fakeclouds.server import FakeCloudServer
from providers.base import ConnectionOptions, LaunchSpec, Ownership
from providers.runpod import RunPodProvider
from tests import simclouds

USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
OTHER_KEY = asyncssh.generate_private_key("ssh-ed25519")


def public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


@pytest.fixture(scope="session")
def runpod_sim() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(boot_delay=0.3, terminate_delay=0.3, facades=[runpod_api.FACADE]) as server:
        yield server


@pytest.fixture
def sim(runpod_sim: FakeCloudServer) -> Iterator[FakeCloudServer]:
    """The session's simulated RunPod: no faults, default stock, no account keys, fast limits."""
    runpod_sim.admin.reset()
    yield runpod_sim
    runpod_sim.admin.reset()
    runpod_sim.admin.configure(boot_delay=0.3, time_scale=0.001)


@pytest.fixture
def admin(sim: FakeCloudServer) -> FakeCloudAdmin:
    return sim.admin


@pytest.fixture
async def api(sim: FakeCloudServer) -> AsyncIterator[httpx.AsyncClient]:
    """A plain client of the simulated API v2, authenticated."""
    headers = {"Authorization": f"Bearer {sim.tokens['runpod']}"}
    async with httpx.AsyncClient(base_url=simclouds.endpoint(sim, "runpod"), headers=headers) as client:
        yield client


def adapter(server: FakeCloudServer, *, include_community: bool = False, token: str | None = None,
            installation_id: str | None = None) -> RunPodProvider:
    creds = {**simclouds.credentials(server, "runpod", token), "include_community": include_community}
    return RunPodProvider(RunPodProvider.parse_credentials(creds),
                          options=ConnectionOptions(endpoint=simclouds.endpoint(server, "runpod")),
                          installation_id=installation_id or uuid.uuid4().hex[:8])


@pytest.fixture
async def runpod(sim: FakeCloudServer) -> AsyncIterator[RunPodProvider]:
    p = adapter(sim)
    async with p:
        yield p


def spec(p: RunPodProvider, key: str | None = None, **extra: Any) -> LaunchSpec:
    key = key or f"t-{uuid.uuid4().hex[:10]}"
    return LaunchSpec(key=key, owner=Ownership(installation_id=p.installation_id, allocation_id=key),
                      ssh_public_keys=[public(OTHER_KEY), public(USER_KEY)], **extra)


def pod_body(**fields: Any) -> dict[str, Any]:
    """A valid create body for the simulation, with `fields` replacing or adding its members."""
    body: dict[str, Any] = {"name": "job-1", "image": "runpod/pytorch:2.4.0",
                            "gpu": {"id": "NVIDIA RTX A4000"}, "dataCenterIds": ["US-KS-2"],
                            "ports": ["22/tcp"], "env": {"PUBLIC_KEY": public(USER_KEY)}}
    body.update(fields)
    return {k: v for k, v in body.items() if v is not None}

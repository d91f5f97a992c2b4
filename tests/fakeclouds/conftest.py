from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import asyncssh
import httpx
import pytest

from fakeclouds.admin import FakeCloudAdmin
from fakeclouds.server import FakeCloudServer


@pytest.fixture(scope="session")
def cloud() -> Iterator[FakeCloudServer]:
    # Documented rate limits off: these tests speak each API by hand, call after call. Rate limits
    # are tested where a test turns them on (configure(time_scale=...)).
    with FakeCloudServer(boot_delay=0.1, terminate_delay=0.02, time_scale=0) as server:
        yield server


@pytest.fixture
def admin(cloud: FakeCloudServer) -> Iterator[FakeCloudAdmin]:
    cloud.admin.reset()
    cloud.admin.configure(boot_delay=0.1, terminate_delay=0.02, time_scale=0)
    yield cloud.admin
    cloud.admin.reset()


@pytest.fixture(scope="session")
def ssh_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


@pytest.fixture(scope="session")
def pubkey(ssh_key: asyncssh.SSHKey) -> str:
    return ssh_key.export_public_key().decode().strip()


@pytest.fixture
async def local(cloud: FakeCloudServer, admin: FakeCloudAdmin) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {cloud.tokens['local']}"}
    async with httpx.AsyncClient(base_url=f"{cloud.url}/local/v1", headers=headers) as client:
        yield client


@pytest.fixture
async def lam(cloud: FakeCloudServer, admin: FakeCloudAdmin) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {cloud.tokens['lambda']}"}
    async with httpx.AsyncClient(base_url=f"{cloud.url}/lambda/api/v1", headers=headers) as client:
        yield client

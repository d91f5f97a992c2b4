"""One simulated-cloud server for the conformance suite, and a harness per adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.conformance.clouds import Harness, production_clouds

BOOT_DELAY = 0.5  # long enough to observe `pending`, short enough to keep the suite fast


@pytest.fixture(scope="session")
def fake_server() -> Iterator[Any]:
    from fakeclouds.server import FakeCloudServer

    with FakeCloudServer(port=0, boot_delay=BOOT_DELAY) as srv:
        yield srv


def admin_of(server: Any) -> Any:
    from fakeclouds.admin import FakeCloudAdmin

    admin = server.admin
    admin = FakeCloudAdmin(admin) if isinstance(admin, str) else admin
    return getattr(admin, "aio", admin)  # the async flavour: never block the test's event loop


def make_harness(cloud: str, server: Any, **kwargs: Any) -> Harness:
    return Harness(cloud, server, admin_of(server), **kwargs)


@pytest.fixture(params=production_clouds())
async def harness(request: pytest.FixtureRequest, fake_server: Any) -> AsyncIterator[Harness]:
    h = make_harness(request.param, fake_server)
    await h.admin_do("clear_faults")
    yield h
    await h.admin_do("reset")

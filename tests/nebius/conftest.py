"""The Nebius simulation each test module of this folder runs against (one per module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakeclouds import nebius_api
from fakeclouds.server import FakeCloudServer


@pytest.fixture(scope="module")
def server() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(facades=[nebius_api.FACADE], boot_delay=0.2, terminate_delay=0.02,
                         time_scale=0) as srv:
        yield srv

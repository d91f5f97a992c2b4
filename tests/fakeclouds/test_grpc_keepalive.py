"""The simulation's gRPC listener accepts keepalive pings at the pace the Nebius SDK sends them (every
20 s, with no call open), as the real API must; grpc's stock server policy answered them with GOAWAY
"too_many_pings", which failed the calls on the connection (fakeclouds/grpc_host.py). Spoken to with a
real grpc.aio channel on loopback, its keepalive options made by the Nebius SDK's own function, every
interval scaled down together (`time_scale`) so the test takes seconds, not minutes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.struct_pb2 import Struct
from nebius.aio.keepalive import DEFAULT_KEEPALIVE_TIME_MS, KeepaliveConfig, keepalive_channel_options

from fakeclouds.grpc_host import PING_FLOOR_S
from fakeclouds.server import FakeCloudServer
from tests.fakeclouds import grpc_demo_cloud as demo

# The SDK's 20 s ping -> 1 s (grpc's client pings no more often than once a second, whatever it is
# asked); the listener's 10 s floor -> 0.5 s.
SCALE = 0.05
IDLE_S = 4.5  # four pings at the SDK's scaled pace: grpc's stock policy closed the connection at the third


def sdk_paced_options(scale: float) -> list[tuple[str, int]]:
    """The Nebius SDK's keepalive channel options, its interval scaled; and no cap on pings without
    data (grpc's client default sends two, then waits for data): the channel keeps pinging at that
    pace for as long as the test idles, as a long-lived channel does over its life."""
    config = KeepaliveConfig(enabled=True, time_ms=int(DEFAULT_KEEPALIVE_TIME_MS * scale), timeout_ms=5_000,
                             permit_without_stream=True)
    return [*keepalive_channel_options(config), ("grpc.http2.max_pings_without_data", 0)]


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeCloudServer]:
    with FakeCloudServer(facades=[demo.FAKE_GRPC_DEMO], time_scale=request.param) as cloud:
        yield cloud


async def list_machines(channel: grpc.aio.Channel, cloud: FakeCloudServer) -> None:
    stub = channel.unary_unary(f"/{demo.SERVICE}/List", request_serializer=Struct.SerializeToString,
                               response_deserializer=Struct.FromString)
    bearer = (("authorization", f"Bearer {cloud.tokens[demo.NAME]}"),)
    await stub(demo.struct({}), metadata=bearer, timeout=30)


async def connection_dropped_within(cloud: FakeCloudServer, seconds: float) -> bool:
    """Open a channel pinging at the SDK's scaled pace, make one call, then idle: did the server
    close the connection (the channel leaves READY) within `seconds`?"""
    assert cloud.grpc_target is not None
    async with grpc.aio.insecure_channel(cloud.grpc_target, options=sdk_paced_options(SCALE)) as channel:
        await list_machines(channel, cloud)
        assert channel.get_state() == grpc.ChannelConnectivity.READY
        try:
            await asyncio.wait_for(channel.wait_for_state_change(grpc.ChannelConnectivity.READY), seconds)
        except TimeoutError:
            return False
        return True


@pytest.mark.parametrize("server", [SCALE], indirect=True)
async def test_pings_at_the_sdk_pace_keep_the_connection(server: FakeCloudServer) -> None:
    # The pings can only come later than their interval on a busy box, never sooner: no timing luck.
    assert not await connection_dropped_within(server, IDLE_S)


def test_the_floor_admits_the_sdk_default_interval() -> None:
    assert PING_FLOOR_S * 1000 <= DEFAULT_KEEPALIVE_TIME_MS

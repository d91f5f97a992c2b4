"""A probe's reason names the SSH outcome from a fixed vocabulary, never what the peer answered nor
the OS's words for it: aimed at a service that is not SSH, a fleet host used to come back with
"Connection reset by peer" or the service's own error text (finding M2). The services here are
real TCP servers on a 127.x.y.z address of this test, each answering as a non-SSH service would."""

from __future__ import annotations

import asyncio
import errno
import random
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncssh
import pytest

from activities.fleet import probe_host
from providers.ssh_login import CLOSED, NOT_SSH, HostLogin, failure_reason

KEY = asyncssh.generate_private_key("ssh-ed25519")
MARK = "leaked-peer-words-7f3a"  # in everything the services send: never in a reason
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def http_error(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """An HTTP server's answer to a line it cannot parse, then it closes with a reset."""
    await reader.readline()
    writer.write(f"HTTP/1.1 400 Bad Request\r\nServer: {MARK}\r\n\r\n{MARK}".encode())
    await writer.drain()
    _reset(writer)


async def reset_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """What gRPC (Temporal) does with an SSH client's first line: RST."""
    await reader.readline()
    _reset(writer)


async def binary_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(b"\x00\xff\x16\x03\x01" + MARK.encode() + b"\n")
    await writer.drain()
    writer.close()


async def endless_lines(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A chatty text service: line after line, none of them an SSH version line."""
    writer.write(b"".join(f"220 {MARK} line {i}\r\n".encode() for i in range(2000)))
    await writer.drain()
    await reader.read()  # until the client hangs up
    writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@pytest.fixture
async def address() -> AsyncIterator[str]:
    yield f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"


@pytest.mark.parametrize(("handler", "outcome"), [(http_error, CLOSED), (reset_at_once, CLOSED),
                                                  (binary_then_close, CLOSED), (endless_lines, NOT_SSH)])
async def test_a_service_that_is_not_ssh_gets_a_fixed_outcome_not_its_words(
        address: str, handler: Handler, outcome: str) -> None:
    server = await asyncio.start_server(handler, address, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        probe = await probe_host("h1", HostLogin(host=address, port=port, user="ubuntu", key=KEY), 30)
    finally:
        server.close()
        await server.wait_closed()
    assert probe.reachable is False
    assert probe.reason == outcome
    assert probe.host_key is None and probe.gpu_summary is None


@pytest.mark.parametrize("error", [
    ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
    OSError(errno.EPROTO, f"Protocol error {MARK}"),
    asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, f"Connection refused {MARK}"),
    asyncssh.ChannelOpenError(99, MARK),
    asyncssh.ProtocolError(MARK),
    asyncssh.ServiceNotAvailable(MARK),
    asyncssh.ConnectionLost(MARK),
    asyncssh.KeyExchangeFailed(MARK),
    RuntimeError(MARK),
])
def test_no_reason_repeats_the_peer_or_the_os(error: BaseException) -> None:
    for where in ("", "bastion"):
        why = failure_reason(error, where)
        assert MARK not in why and "reset by peer" not in why.lower() and "Protocol error" not in why, why
        assert why.startswith("bastion: ") == (where == "bastion")


def test_the_outcomes_that_say_what_happened() -> None:
    assert failure_reason(ConnectionRefusedError(errno.ECONNREFUSED, "x")) == "connection refused"
    assert failure_reason(TimeoutError()) == "timed out"
    assert failure_reason(OSError(errno.EHOSTUNREACH, "No route to host")) == "host unreachable"
    assert failure_reason(asyncssh.PermissionDenied("no")) == "authentication failed (key refused)"
    assert failure_reason(asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "refused")) == \
        "the bastion could not reach the host"
    assert failure_reason(OSError(errno.EPROTO, "x")) == "connection failed (EPROTO)"

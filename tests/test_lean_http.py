"""bench/lean_http.py, the API benchmark's client, against a loopback server of the test's own that
answers each request with the next canned reply: bodies read whole by Content-Length and chunked
(with a trailer), a reply that closes its connection, the pool's limit, and replies it refuses."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from bench.lean_http import LeanClient, ProtocolError

Handler = Callable[[bytes], bytes]  # request head -> raw reply


class CannedServer:
    """Replies to every request with `handler(request head)`; counts connections and requests."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self.heads: list[bytes] = []
        self.port = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                self.heads.append(head)
                await asyncio.sleep(0.01)  # long enough for concurrent requests to need connections
                reply = self.handler(head)
                writer.write(reply)
                await writer.drain()
                if b"Connection: close" in reply:
                    return
        finally:
            self.open_now -= 1
            writer.close()


Start = Callable[[Handler], Awaitable[CannedServer]]


@pytest.fixture
async def canned() -> AsyncIterator[Start]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> CannedServer:
        server = CannedServer(handler)
        listening = await asyncio.start_server(server.serve, "127.0.0.1", 0)
        server.port = listening.sockets[0].getsockname()[1]
        servers.append(listening)
        return server

    yield start
    for s in servers:
        s.close()
        await s.wait_closed()


def _sized(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in extra)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


async def test_bodies_by_length_and_chunked_on_one_kept_connection(canned: Start) -> None:
    chunked = (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
               b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\nX-Trailer: yes\r\n\r\n")
    replies = iter([_sized(b'{"items": [1, 2]}', "Content-Type: application/json"), chunked])
    server = await canned(lambda _head: next(replies))
    async with LeanClient(f"http://127.0.0.1:{server.port}/api", connections=2,
                          headers={"Cookie": "s=1"}) as client:
        first = await client.get("/things?limit=2")
        second = await client.get(f"http://127.0.0.1:{server.port}/healthz")
    assert (first.status_code, first.json(), first.headers["content-type"]) == (
        200, {"items": [1, 2]}, "application/json")
    assert (second.status_code, second.text) == (201, "hello, world")
    assert server.connections == 1  # kept alive between the two
    assert server.heads[0].startswith(b"GET /api/things?limit=2 HTTP/1.1\r\n")
    assert server.heads[1].startswith(b"GET /healthz HTTP/1.1\r\n")  # a full URL is not prefixed
    assert b"\r\nCookie: s=1\r\n" in server.heads[0]
    assert f"\r\nHost: 127.0.0.1:{server.port}\r\n".encode() in server.heads[0]


async def test_a_reply_that_closes_its_connection_is_not_reused(canned: Start) -> None:
    server = await canned(lambda _head: _sized(b"ok", "Connection: close"))
    async with LeanClient(f"http://127.0.0.1:{server.port}", connections=1) as client:
        for _ in range(3):
            assert (await client.get("/")).content == b"ok"
    assert server.connections == 3


async def test_concurrent_requests_share_at_most_the_pools_connections(canned: Start) -> None:
    server = await canned(lambda _head: _sized(b"x"))
    async with LeanClient(f"http://127.0.0.1:{server.port}", connections=3) as client:
        replies = await asyncio.gather(*(client.get(f"/{n}") for n in range(12)))
    assert [r.content for r in replies] == [b"x"] * 12
    assert server.connections == 3 and server.most_open == 3
    assert sorted(h.split(b" ")[1] for h in server.heads) == sorted(f"/{n}".encode() for n in range(12))


@pytest.mark.parametrize("reply", [
    b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",  # not HTTP/1.1
    b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody",  # no length, not chunked
], ids=["http/1.0", "bad header", "no length"])
async def test_a_reply_it_cannot_read_is_refused_and_its_connection_dropped(
        canned: Start, reply: bytes) -> None:
    replies = iter([reply, _sized(b"fine")])
    server = await canned(lambda _head: next(replies))
    async with LeanClient(f"http://127.0.0.1:{server.port}", connections=1) as client:
        with pytest.raises(ProtocolError):
            await client.get("/")
        assert (await client.get("/")).content == b"fine"  # on a new connection: the pool has room
    assert server.connections == 2


def test_a_base_it_cannot_use_is_refused() -> None:
    with pytest.raises(ValueError, match="http://host:port"):
        LeanClient("https://127.0.0.1:8443", connections=1)
    with pytest.raises(ValueError, match="http://host:port"):
        LeanClient("http://127.0.0.1", connections=1)


async def test_a_url_of_another_server_is_refused_before_anything_is_sent(canned: Start) -> None:
    server = await canned(lambda _head: _sized(b"x"))
    async with LeanClient(f"http://127.0.0.1:{server.port}", connections=1) as client:
        with pytest.raises(ValueError, match="not on this client's server"):
            await client.get(f"http://127.0.0.1:{server.port + 1}/")
        assert (await client.get("/")).content == b"x"
    assert server.connections == 1  # the refused one opened none
    assert server.heads == [b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAccept: */*\r\n\r\n" % server.port]

"""A lean HTTP/1.1 client for measuring the API's latency: GETs on a pool of keep-alive connections,
the status line and headers parsed, the body read whole (Content-Length or chunked), nothing more.

Why not httpx, as the rest of the project uses: the benchmark's clients run on the same two cores
as the API they time, in one event loop, and httpx costs ~0.64 ms of CPU a request there against
~0.05 ms for this (a `/healthz` loop of 1,000, 2026-12-06). When the console's three lists answer
at once, the third reply waited for the client to parse the first two, and that wait was counted
as the API's latency; a browser parses on its own machine. No TLS, no redirects, no proxies, no
cookies jar: a fixed set of headers is sent with every request."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

HEAD_END = b"\r\n\r\n"


class ProtocolError(RuntimeError):
    """The server's reply is not HTTP/1.1 this client can read."""


@dataclass
class Reply:
    status_code: int
    headers: dict[str, str]  # lower-cased names; a repeated header keeps its last value
    content: bytes = field(repr=False)

    @property
    def text(self) -> str:
        return self.content.decode()

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


class LeanClient:
    """GETs against one `http://host:port` base, on at most `connections` keep-alive connections
    (opened as needed, as httpx's pool does); a request waits for a free one. Paths are joined to
    `base` as they are (`base` may carry a path prefix); a full URL must be on the same host and port."""

    def __init__(self, base: str, *, connections: int, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(base)
        if parts.scheme != "http" or parts.hostname is None or parts.port is None:
            raise ValueError(f"an http://host:port base is needed, not {base!r}")
        self._host, self._port, self._prefix = parts.hostname, parts.port, parts.path.rstrip("/")
        fixed = {"Host": f"{self._host}:{self._port}", "Accept": "*/*", **(headers or {})}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._limit = connections
        self._opened = 0
        self._idle: asyncio.Queue[_Connection] = asyncio.Queue()

    async def get(self, target: str) -> Reply:
        request = f"GET {self._path(target)} HTTP/1.1\r\n{self._head}\r\n".encode("ascii")
        conn = await self._take()
        try:
            conn.writer.write(request)
            reply = await _read_reply(conn.reader)
        except BaseException:
            self._drop(conn)
            raise
        if reply.headers.get("connection", "").lower() == "close":
            self._drop(conn)
        else:
            self._idle.put_nowait(conn)
        return reply

    async def aclose(self) -> None:
        while not self._idle.empty():
            self._drop(self._idle.get_nowait())

    async def __aenter__(self) -> LeanClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def _path(self, target: str) -> str:
        if not target.startswith(("http://", "https://")):
            return self._prefix + target
        parts = urlsplit(target)
        if (parts.scheme, parts.hostname, parts.port) != ("http", self._host, self._port):
            raise ValueError(f"{target!r} is not on this client's server")
        return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    async def _take(self) -> _Connection:
        if self._idle.empty() and self._opened < self._limit:
            self._opened += 1
            try:
                reader, writer = await asyncio.open_connection(self._host, self._port)
            except BaseException:
                self._opened -= 1
                raise
            return _Connection(reader, writer)
        return await self._idle.get()

    def _drop(self, conn: _Connection) -> None:
        self._opened -= 1
        conn.writer.close()


async def _read_reply(reader: asyncio.StreamReader) -> Reply:
    head = await reader.readuntil(HEAD_END)
    status_line, *lines = head[: -len(HEAD_END)].decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    if version != "HTTP/1.1" or not rest[:3].isdigit():
        raise ProtocolError(f"not an HTTP/1.1 status line: {status_line!r}")
    headers = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise ProtocolError(f"not a header line: {line!r}")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        raise ProtocolError("a reply with neither Content-Length nor chunked encoding")
    return Reply(int(rest[:3]), headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                pass
            return b"".join(parts)
        parts.append(await reader.readexactly(size))
        if await reader.readexactly(2) != b"\r\n":
            raise ProtocolError("a chunk not followed by CRLF")

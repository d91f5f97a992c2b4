"""M1: no work before authentication. Only the public requests pass without a token or a verified
codec session; every other request is refused 401 before a byte of its body is read, and a large
JSON body of an authenticated caller is parsed off the event loop."""

from __future__ import annotations

import asyncio
import re
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import fastapi.routing
import httpx
import pytest

from api import guard
from api.deps import AppDeps
from api.routers import codec
from tests.api.conftest import TOKEN
from tests.api.test_edge import CHUNK, CountedBody

FOUR_MIB = 4 * 1024 * 1024


class EndlessBody:
    """A FAKE client body: one chunk, then it never ends until `release` is set (a client holding
    its request open). Counts how many chunks the app pulled."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.pulled = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.pulled += 1
        yield b'{"payloads": [' + b"0," * (CHUNK // 2 - 8)
        await self.release.wait()
        self.pulled += 1
        yield b"0]}"


def anonymous(client: httpx.AsyncClient) -> httpx.AsyncClient:
    client.headers.pop("Authorization", None)
    return client


# Cookies that name the session cookie without a session in it (the name's presence let them in).
FAKE_COOKIES = [f"x={codec.COOKIE}", f"{codec.COOKIE}=forged", f"{codec.COOKIE}=1.2.3",
                f"{codec.COOKIE}_x=1; y={codec.COOKIE}", f"a=b; {codec.COOKIE}="]


@pytest.mark.parametrize("cookie", FAKE_COOKIES)
@pytest.mark.parametrize("route", ["/codec/decode", "/codec/encode"])
async def test_a_fake_named_cookie_is_refused_without_the_body_being_read(
        client: httpx.AsyncClient, cookie: str, route: str) -> None:
    anonymous(client)
    body = CountedBody(FOUR_MIB // CHUNK * CHUNK, prefix=b'{"payloads": ["')
    r = await client.post(route, content=body, headers={"Cookie": cookie, "Content-Type": "application/json"})
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer" and r.headers["connection"] == "close"
    assert body.pulled <= 1


async def test_healthz_answers_while_an_unauthenticated_body_is_held_open(client: httpx.AsyncClient) -> None:
    """The 401 comes while the client is still sending (the body never ends before it): the guard
    read nothing. /healthz answers meanwhile. (The bound is generous: it only stops a hang.)"""
    anonymous(client)
    body = EndlessBody()
    held = asyncio.create_task(client.post("/codec/decode", content=body, headers={
        "Cookie": f"x={codec.COOKIE}", "Content-Type": "application/json"}))
    try:
        health = await asyncio.wait_for(client.get("/healthz"), timeout=60)
        assert health.status_code == 200
        r = await asyncio.wait_for(held, timeout=60)  # the old guard waited for the body: forever
        assert r.status_code == 401 and body.pulled <= 1
    finally:
        body.release.set()
        await asyncio.wait_for(held, timeout=60)


async def test_a_real_session_still_opens_the_codec(client: httpx.AsyncClient) -> None:
    deps: AppDeps = client._transport.app.state.deps  # type: ignore[attr-defined]
    value = codec.session_value(deps, int(time.time()) + 60)
    anonymous(client)
    for cookie in (f"{codec.COOKIE}={value}", f"other=1; {codec.COOKIE}={value}"):
        r = await client.post("/codec/decode", json={"payloads": []}, headers={"Cookie": cookie})
        assert r.status_code == 200, r.text
    # The session opens the payload routes only, not the rest of the API.
    r = await client.get("/api/compute/instances", headers={"Cookie": f"{codec.COOKIE}={value}"})
    assert r.status_code == 401


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", path)


def every_route(routes: list[Any]) -> list[tuple[str, set[str]]]:
    """(path, methods) of every route, also those of included routers (FastAPI 0.165 keeps them
    out of `app.routes`, behind _IncludedRouter)."""
    out: list[tuple[str, set[str]]] = []
    for route in routes:
        if isinstance(route, fastapi.routing._IncludedRouter):
            out += every_route(route.effective_candidates())
        elif isinstance(route, fastapi.routing._EffectiveRouteContext):
            out.append((route.path, set(getattr(route.original_route, "methods", None) or ())))
        else:
            out.append((route.path, set(getattr(route, "methods", None) or ())))
    return out


def non_public_requests(client: httpx.AsyncClient) -> list[tuple[str, str]]:
    app = client._transport.app  # type: ignore[attr-defined]
    return [(method, concrete(path)) for path, methods in every_route(app.routes)
            for method in sorted(methods) if (method, path) not in guard.PUBLIC]


async def test_every_non_public_route_is_refused_without_auth(client: httpx.AsyncClient) -> None:
    requests = non_public_requests(client)
    assert len(requests) > 50 and ("POST", "/codec/session") in requests
    anonymous(client)
    for method, path in requests:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Cookie": f"x={codec.COOKIE}"}):
            body = CountedBody(4 * CHUNK)
            r = await client.request(method, path, content=body, headers={
                **headers, "Content-Type": "application/json"})
            assert r.status_code == 401, (method, path, headers, r.status_code, r.text)
            assert body.pulled <= 1, (method, path)


@pytest.mark.parametrize(("method", "path"), [
    ("OPTIONS", "/api/compute/connections"), ("POST", "/codec/"), ("GET", "/codec/session"),
    ("PUT", "/healthz"), ("POST", "/nowhere"), ("GET", "/api/compute/no-such-route"), ("POST", "/docs")])
async def test_what_was_open_by_accident_now_needs_a_token(client: httpx.AsyncClient, method: str,
                                                           path: str) -> None:
    anonymous(client)
    body = CountedBody(16 * CHUNK)
    r = await client.request(method, path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 401 and body.pulled <= 1, (r.status_code, r.text)


@pytest.mark.parametrize(("method", "path"), [("GET", "/healthz"), ("GET", "/codec/"),
                                              ("DELETE", "/codec/session"), ("OPTIONS", "/codec/decode")])
async def test_public_requests_read_no_more_than_a_tiny_body(client: httpx.AsyncClient, method: str,
                                                            path: str) -> None:
    anonymous(client)
    body = CountedBody(64 * CHUNK)
    r = await client.request(method, path, content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and body.pulled <= 1, (r.status_code, r.text)
    preflight = {"Origin": "http://127.0.0.1:8233", "Access-Control-Request-Method": "POST"}
    assert (await client.request(method, path, headers=preflight)).status_code in (200, 204)


async def test_a_large_json_body_is_checked_off_the_event_loop(client: httpx.AsyncClient,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    threads: list[tuple[int, int]] = []
    real = guard._strict_json_problem

    def recording(body: bytes) -> str | None:
        threads.append((len(body), threading.get_ident()))
        return real(body)

    monkeypatch.setattr(guard, "_strict_json_problem", recording)
    small = {"name": "a", "provider": "fakecloud", "credentials": {"api_key": "k"}}
    large = {**small, "pad": [0] * (guard.INLINE_JSON // 2 + 10)}
    for doc in (small, large):
        r = await client.post("/api/compute/connections", json=doc)
        assert r.status_code < 500, r.text
    (small_size, small_thread), (large_size, large_thread) = threads
    assert small_size <= guard.INLINE_JSON < large_size
    assert small_thread == loop_thread and large_thread != loop_thread


async def test_codec_payloads_are_parsed_off_the_event_loop(client: httpx.AsyncClient,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []
    real = codec.to_protos

    def recording(body: Any) -> Any:
        seen.append(threading.get_ident())
        return real(body)

    monkeypatch.setattr(codec, "to_protos", recording)
    r = await client.post("/codec/decode", json={"payloads": [{"data": "aGVsbG8="}]})
    assert r.status_code == 200, r.text
    assert seen and loop_thread not in seen
    assert TOKEN not in r.text


async def test_over_a_real_socket_the_401_comes_before_the_body_and_healthz_answers(
        client: httpx.AsyncClient) -> None:
    """The finding as it was measured: uvicorn on loopback, a POST declaring 4 MiB with a cookie
    that only names the session. The 401 arrives after the first piece of the body (the rest is
    never sent), and /healthz answers while that connection is still open. Bounds only stop a hang."""
    import uvicorn

    app = client._transport.app  # type: ignore[attr-defined]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)  # connections wait in the backlog until uvicorn accepts them: no start to poll for
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /codec/decode HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Cookie: x=" + codec.COOKIE.encode() + b"\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(FOUR_MIB).encode() + b"\r\n\r\n"
                     b'{"payloads": [' + b"0," * (CHUNK // 2 - 8))
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout=60)
        assert status_line.startswith(b"HTTP/1.1 401"), status_line
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as other:
            health = await asyncio.wait_for(other.get("/healthz"), timeout=60)
        assert health.status_code == 200
        writer.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, timeout=60)

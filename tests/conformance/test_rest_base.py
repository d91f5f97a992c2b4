"""providers/rest.py: every HTTP failure becomes one taxonomy error, the bearer token is sent, error
bodies of every common shape are read (httpx.MockTransport, no server)."""

from __future__ import annotations

import email.utils
import gc
import time
import weakref
from collections.abc import Callable

import httpx
import pytest

from providers import rest as _http
from providers.auth import BearerAuth
from providers.base import (
    AuthError,
    CapacityError,
    InvalidRequest,
    ProviderError,
    QuotaError,
    RateLimited,
    Transient,
)

TOKEN = "s3cret-token-value"
CODES: dict[str, _http.ErrorKind] = {"insufficient_capacity": "capacity", "quota_exceeded": "quota"}


def client(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return _http.make_client("http://cloud.test/api/v1/", auth=BearerAuth(lambda: TOKEN),
                             transport=httpx.MockTransport(handler))


def err(status: int, code: str = "", message: str = "nope", **headers: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": message}}, headers=headers)


async def call(resp: httpx.Response | Exception, *, allow: tuple[int, ...] = ()) -> httpx.Response:
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(resp, Exception):
            raise resp
        return resp

    async with client(handler) as c:
        return await _http.request(c, "GET", "/things", provider="demo", scope="demo/r1", codes=CODES,
                                   allow=allow)


@pytest.mark.parametrize(("resp", "kind"), [
    (err(401, "unauthorized"), AuthError),
    (err(403, "forbidden"), AuthError),
    (err(403, "quota_exceeded"), QuotaError),  # the code wins over the status
    (err(503, "insufficient_capacity"), CapacityError),
    (err(500), Transient),
    (err(502), Transient),
    (httpx.Response(503, text="<html>bad gateway</html>"), Transient),
    (err(400, "invalid_request"), InvalidRequest),
    (err(404, "not_found"), InvalidRequest),
    (err(429, "rate_limited"), RateLimited),
])
async def test_status_and_code_mapping(resp: httpx.Response, kind: type[ProviderError]) -> None:
    with pytest.raises(ProviderError) as exc:
        await call(resp)
    assert type(exc.value) is kind
    assert TOKEN not in str(exc.value)


async def test_capacity_and_quota_carry_the_scope() -> None:
    with pytest.raises(CapacityError) as cap:
        await call(err(503, "insufficient_capacity"))
    assert str(cap.value.scope) == "demo/r1"
    no_scope = _http.map_response_error(err(403, "quota_exceeded"), provider="demo", codes=CODES)
    assert isinstance(no_scope, QuotaError) and str(no_scope.scope) == "demo"


@pytest.mark.parametrize(("header", "expected"), [
    ("7", 7.0), ("2.5", 2.5), (None, 1.0), ("soon", 1.0), ("-3", 0.0), ("nan", 1.0),
])
async def test_rate_limited_retry_after(header: str | None, expected: float) -> None:
    headers = {"Retry-After": header} if header is not None else {}
    with pytest.raises(RateLimited) as exc:
        await call(err(429, **headers))
    assert exc.value.retry_after == pytest.approx(expected)


def test_retry_after_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= _http.parse_retry_after(when) <= 30


@pytest.mark.parametrize("exc", [
    httpx.ConnectError("refused"),
    httpx.ReadTimeout("slow"),
    httpx.ConnectTimeout("slow"),
    httpx.RemoteProtocolError("peer closed connection"),
    httpx.ReadError("reset"),
])
async def test_transport_errors_are_transient(exc: Exception) -> None:
    with pytest.raises(Transient):
        await call(exc)


async def test_allowed_status_is_returned_not_raised() -> None:
    resp = await call(err(404, "not_found"), allow=(404,))
    assert resp.status_code == 404 and _http.error_code(resp) == "not_found"


async def test_bearer_token_and_base_url() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    async with client(handler) as c:
        resp = await _http.request(c, "GET", "/account", provider="demo")
    assert _http.json_body(resp, provider="demo") == {"ok": True}
    assert seen[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert str(seen[0].url) == "http://cloud.test/api/v1/account"


def test_malformed_bodies() -> None:
    with pytest.raises(Transient):
        _http.json_body(httpx.Response(200, text="{trunc"), provider="demo")
    with pytest.raises(Transient):
        with _http.parsing("demo", "offers"):
            empty: dict[str, int] = {}
            empty["missing"]  # noqa: B018 — the KeyError is the point
    assert _http.error_fields(httpx.Response(500, text="oops")) == (
        "", "HTTP 500 from the endpoint: non-JSON body of 4 bytes")
    flat = httpx.Response(400, json={"error": "bad_thing", "message": "m"})
    assert _http.error_fields(flat) == ("bad_thing", "m")


def test_graphql_and_flat_error_shapes() -> None:
    gql = httpx.Response(200, json={"errors": [{"message": "no GPUs",
                                                "extensions": {"code": "NO_CAPACITY"}}]})
    assert _http.error_fields(gql) == ("NO_CAPACITY", "no GPUs")
    assert _http.error_fields(httpx.Response(422, json={"code": "bad", "message": "why"})) == ("bad", "why")


# --------------------------------------------------------------------------- foreign answers


FOREIGN_PAGE = "<html><body>INTERNAL-ADMIN-PAGE secret=hunter2 " + "x" * 50_000 + "</body></html>"


@pytest.mark.parametrize("resp", [
    httpx.Response(500, text=FOREIGN_PAGE, headers={"Content-Type": "text/html"}),
    httpx.Response(400, text=FOREIGN_PAGE),
    httpx.Response(401, text=FOREIGN_PAGE),
    httpx.Response(502, json=["INTERNAL-ADMIN-PAGE secret=hunter2"]),  # JSON, but no error shape
    httpx.Response(404, json={"detail": "INTERNAL-ADMIN-PAGE secret=hunter2"}),
    httpx.Response(500, json={"error": {"code": {"INTERNAL-ADMIN-PAGE": 1}, "message": ["secret=hunter2"]}}),
])
async def test_a_foreign_body_is_described_never_quoted(resp: httpx.Response) -> None:
    with pytest.raises(ProviderError) as e:
        await call(resp)
    assert "INTERNAL-ADMIN-PAGE" not in e.value.message and "hunter2" not in e.value.message
    assert f"HTTP {resp.status_code} from cloud.test: " in e.value.message
    assert "body of" in e.value.message and len(e.value.message) < 200


async def test_a_redirect_is_not_followed_nor_its_target_shown() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(302, headers={"Location": "http://169.254.169.254/latest/meta-data/"})

    async with client(handler) as c:
        with pytest.raises(InvalidRequest) as e:
            await _http.request(c, "GET", "/things", provider="demo")
    assert seen == ["http://cloud.test/api/v1/things"]  # one request: the redirect was not followed
    assert "redirect (not followed)" in e.value.message and "169.254" not in e.value.message


async def test_the_clouds_own_error_fields_are_quoted_bounded_and_cleaned() -> None:
    message = "no capacity\x1b[2J\r\nFAKE LOG LINE " + "y" * 2_000
    with pytest.raises(CapacityError) as e:
        await call(err(400, "insufficient_capacity\n", message))
    text = e.value.message
    assert text.startswith("demo: insufficient_capacity: no capacity [2J FAKE LOG LINE yyy")
    assert "\x1b" not in text and "\n" not in text and "\r" not in text
    assert len(text) <= len("demo: insufficient_capacity: ") + _http.MAX_MESSAGE


def test_a_parsing_surprise_quotes_at_most_a_bounded_clean_slice() -> None:
    with pytest.raises(Transient) as e:
        with _http.parsing("demo", "offers"):
            int("\x1b[31m" + "9" * 10_000 + "z")
    assert "\x1b" not in e.value.message and len(e.value.message) < 200


async def test_request_urls_are_logged_without_userinfo_or_query(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="httpx")
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={}))
    async with httpx.AsyncClient(transport=transport) as c:
        await c.get("http://admin:s3cretpass@cloud.test:8443/api/v1/things?token=abc123")
    [line] = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert "http://cloud.test:8443/api/v1/things" in line
    assert "s3cretpass" not in line and "admin" not in line and "abc123" not in line


async def test_a_read_response_is_freed_without_the_garbage_collector() -> None:
    """httpx binds a response's stream back to the response: without AcyclicClient every answer (a
    boot poll's listing of every machine) waits for a collector walk to be freed."""
    body = {"data": [{"id": str(i)} for i in range(500)]}
    gc.disable()
    try:
        async with client(lambda request: httpx.Response(200, json=body)) as c:
            resp = await _http.request(c, "GET", "/instances", provider="demo")
            assert resp.json() == body and await resp.aread() == resp.content
            gone = weakref.ref(resp)
            del resp
            assert gone() is None
            async with c.stream("GET", "/instances") as streamed:  # a streamed answer still streams
                assert [chunk async for chunk in streamed.aiter_bytes()] == [streamed_body(body)]
    finally:
        gc.enable()


def streamed_body(body: object) -> bytes:
    return httpx.Response(200, json=body).content

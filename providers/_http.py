"""Shared httpx plumbing for HTTP adapters: client construction, one request helper, and the
mapping of HTTP failures onto the error taxonomy (so no raw httpx exception escapes)."""

from __future__ import annotations

import contextlib
import email.utils
import time
from collections.abc import Collection, Iterator, Mapping
from typing import Any, ClassVar, Literal

import httpx

from providers.base import (
    AuthError,
    CapacityError,
    CloudProvider,
    InvalidRequest,
    ProviderError,
    QuotaError,
    RateLimited,
    Transient,
)

# What a cloud-specific error code means; the status code decides when the code is unknown.
ErrorKind = Literal["capacity", "quota", "auth", "rate_limit", "invalid", "transient"]

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRY_AFTER = 1.0


def make_client(base_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT,
                transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    """A client bound to `base_url` that sends `Authorization: Bearer <token>`."""
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        timeout=httpx.Timeout(timeout),
        transport=transport,
        follow_redirects=False,
    )


def parse_retry_after(value: str | None, default: float = DEFAULT_RETRY_AFTER) -> float:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date; `default` if absent/bad."""
    if value is None or not value.strip():
        return default
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return default
        seconds = when.timestamp() - time.time()
    if seconds != seconds or seconds in (float("inf"), float("-inf")):  # NaN / inf
        return default
    return max(0.0, seconds)


def error_fields(resp: httpx.Response) -> tuple[str, str]:
    """(code, message) from `{"error": {"code", "message"}}`; falls back to the raw text."""
    try:
        body = resp.json()
    except ValueError:
        return "", resp.text[:200]
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return str(err.get("code") or ""), str(err.get("message") or "")
    if isinstance(err, str):
        return err, str(body.get("message") or "")
    return "", str(body)[:200]


def map_response_error(resp: httpx.Response, *, provider: str, scope: str | None = None,
                       codes: Mapping[str, ErrorKind] | None = None) -> ProviderError:
    """The taxonomy error for a failed response. The cloud's error code wins over the status
    (a 503 `insufficient_capacity` is capacity, not a transient 5xx)."""
    code, message = error_fields(resp)
    kind = (codes or {}).get(code)
    status = resp.status_code
    text = f"{provider}: {code or status}: {message}".rstrip(": ")
    if kind is None:
        if status == 429:
            kind = "rate_limit"
        elif status in (401, 403):
            kind = "auth"
        elif status >= 500 or status == 408:
            kind = "transient"
        else:
            kind = "invalid"
    if kind == "capacity":
        return CapacityError(text, scope=scope or provider)
    if kind == "quota":
        return QuotaError(text, scope=scope or provider)
    if kind == "rate_limit":
        return RateLimited(text, retry_after=parse_retry_after(resp.headers.get("Retry-After")))
    if kind == "auth":
        return AuthError(text)
    if kind == "transient":
        return Transient(text)
    return InvalidRequest(text)


def map_transport_error(exc: httpx.HTTPError, *, provider: str) -> ProviderError:
    """Timeouts, refused/dropped connections and protocol errors are all worth retrying.
    Only the exception type goes into the message: the request (and its headers) stays out."""
    if isinstance(exc, httpx.TimeoutException):
        return Transient(f"{provider}: timed out ({type(exc).__name__})")
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return InvalidRequest(f"{provider}: bad endpoint URL ({type(exc).__name__})")
    return Transient(f"{provider}: connection failed ({type(exc).__name__}: {exc})")


async def request(client: httpx.AsyncClient, method: str, url: str, *, provider: str,
                  scope: str | None = None, codes: Mapping[str, ErrorKind] | None = None,
                  allow: Collection[int] = (), **kwargs: Any) -> httpx.Response:
    """Send one request. 2xx and statuses in `allow` (e.g. 404 for "gone") are returned;
    anything else raises the mapped ProviderError."""
    try:
        resp = await client.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        raise map_transport_error(exc, provider=provider) from None
    if resp.is_success or resp.status_code in allow:
        return resp
    raise map_response_error(resp, provider=provider, scope=scope, codes=codes)


def json_body(resp: httpx.Response, *, provider: str) -> Any:
    """The decoded JSON body; a malformed one (e.g. a truncated answer) is Transient."""
    try:
        return resp.json()
    except ValueError:
        raise Transient(f"{provider}: malformed JSON in {resp.status_code} response") from None


def error_code(resp: httpx.Response) -> str:
    return error_fields(resp)[0]


@contextlib.contextmanager
def parsing(provider: str, what: str) -> Iterator[None]:
    """Turn a surprise in a response body (missing field, wrong type) into Transient, not a KeyError."""
    try:
        yield
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise Transient(f"{provider}: unexpected {what} response ({type(exc).__name__}: {exc})") from None


class HttpCloudProvider(CloudProvider):
    """Plumbing shared by adapters of bearer-token REST APIs: one lazily made httpx client,
    every call through `request` (so errors map to the taxonomy), closed by aclose()."""

    default_endpoint: ClassVar[str]
    # The cloud's own error codes -> taxonomy class name (see `request`).
    error_codes: ClassVar[Mapping[str, ErrorKind]] = {}

    def __init__(self, credentials: dict[str, Any], *, endpoint: str | None = None,
                 installation_id: str = "default", timeout: float = DEFAULT_TIMEOUT,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(credentials, endpoint=endpoint or self.default_endpoint,
                         installation_id=installation_id)
        self._timeout = timeout
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        # Made lazily: a provider may be constructed outside an event loop.
        if self._client is None:
            assert self.endpoint is not None
            self._client = make_client(self.endpoint, self.credentials["api_key"],
                                       timeout=self._timeout, transport=self._transport)
        return self._client

    async def _call(self, method: str, path: str, *, scope: str | None = None,
                    allow: tuple[int, ...] = (), **kwargs: Any) -> httpx.Response:
        return await request(self._http(), method, path, provider=self.id, scope=scope,
                             codes=self.error_codes, allow=allow, **kwargs)

    def _json(self, resp: httpx.Response) -> Any:
        return json_body(resp, provider=self.id)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

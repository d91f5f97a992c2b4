"""The REST base: adapters of HTTP+JSON clouds build on `RestCloudProvider`.

It owns one httpx client per adapter instance (so per connection per worker process: its
connection pool and TLS context are reused by every activity), pluggable auth (providers/auth.py),
and the mapping of every failure onto the error taxonomy: transport errors, error statuses with
the cloud's own code (`codes`), and GraphQL errors inside a 200. No raw httpx exception escapes.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import logging
import os
import ssl
import time
from collections.abc import Collection, Iterator, Mapping
from typing import Any, ClassVar, Literal

import httpx

from providers.auth import OAuth2Error
from providers.base import (
    AuthError,
    CapacityError,
    CloudProvider,
    FailureScope,
    InvalidRequest,
    ProviderError,
    QuotaError,
    RateLimited,
    Transient,
    launch_leaving,
)

# What a cloud-specific error code means; the status code decides when the code is unknown.
ErrorKind = Literal["capacity", "quota", "auth", "rate_limit", "invalid", "transient"]

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRY_AFTER = 1.0
# Overrides every REST adapter's request timeout in this process (a slow proxy needs more; tests of
# a launch that outlives its request use a short one). Keep it below each cloud's create_in_flight_s.
REQUEST_TIMEOUT_ENV = "GPUPROV_CLOUD_REQUEST_TIMEOUT_S"


def request_timeout(default: float) -> float:
    """`GPUPROV_CLOUD_REQUEST_TIMEOUT_S` when set to a positive number, else `default`."""
    try:
        value = float(os.environ.get(REQUEST_TIMEOUT_ENV, ""))
    except ValueError:
        return default
    return value if 0 < value < float("inf") else default


def redacted(url: httpx.URL) -> str:
    """`url` as logs may show it: no user:pass@ and no query (either may carry a secret)."""
    port = f":{url.port}" if url.port is not None else ""
    host = f"[{url.host}]" if ":" in url.host else url.host  # an IPv6 literal
    return f"{url.scheme}://{host}{port}{url.path}"


def _redact_urls(record: logging.LogRecord) -> bool:
    # httpx logs every request's URL at INFO ("HTTP Request: GET <url> ..."): whatever URL an
    # adapter was given, the log line gets it without userinfo or query.
    if isinstance(record.args, tuple) and any(isinstance(a, httpx.URL) for a in record.args):
        record.args = tuple(redacted(a) if isinstance(a, httpx.URL) else a for a in record.args)
    return True


logging.getLogger("httpx").addFilter(_redact_urls)


@functools.cache
def _system_ssl_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~45 ms CPU and ~840 KB per context: build it once per process.
    return ssl.create_default_context()


@functools.cache
def _ssl_context_with(ca_bundle: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.load_verify_locations(cadata=ca_bundle)
    return ctx


def ssl_context(ca_bundle: str | None = None) -> ssl.SSLContext:
    """The process's shared TLS context, or one (also shared) that trusts `ca_bundle` too."""
    if not ca_bundle:
        return _system_ssl_context()
    try:
        return _ssl_context_with(ca_bundle)
    except ssl.SSLError as e:
        raise InvalidRequest(f"the connection's CA bundle is not valid PEM ({e.reason})") from None


async def _leaving(request: httpx.Request) -> None:
    await launch_leaving()  # a launch's send is recorded now, right before it goes (providers/base.py)


class AcyclicClient(httpx.AsyncClient):
    """An AsyncClient whose read responses are freed when their last reference goes.

    httpx binds each response's stream to the response (`BoundAsyncStream`, which sets `elapsed` when
    it closes), so every response is in a reference cycle and its body waits for the garbage
    collector's walk of whatever generation it reached. A boot poll's shared listing is the whole
    account's machines (Lambda's 171 KB at 200 booting): a worker's heap held 16 such bodies at once
    (bench.heap --garbage). Once the body is read the stream is closed and spent; replacing it with
    the bytes breaks the cycle."""

    async def send(self, request: httpx.Request, *, stream: bool = False, **kwargs: Any) -> httpx.Response:
        response = await super().send(request, stream=stream, **kwargs)
        if not stream:  # read and closed by send; a streamed response still needs its own stream
            response.stream = httpx.ByteStream(response.content)
        return response


def make_client(base_url: str, *, auth: httpx.Auth | None = None, timeout: float = DEFAULT_TIMEOUT,
                ca_bundle: str | None = None, headers: Mapping[str, str] | None = None,
                transport: httpx.AsyncBaseTransport | None = None) -> httpx.AsyncClient:
    return AcyclicClient(
        base_url=base_url.rstrip("/"),
        auth=auth,
        headers={"Accept": "application/json", **(headers or {})},
        timeout=httpx.Timeout(timeout),
        verify=ssl_context(ca_bundle),
        transport=transport,
        follow_redirects=False,
        event_hooks={"request": [_leaving]},
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


MAX_CODE = 100
MAX_MESSAGE = 300


def clean(text: object, limit: int = MAX_MESSAGE) -> str:
    """`text` fit to quote from a cloud's answer: control characters (terminal escapes, line breaks
    that forge log lines) become spaces, runs of space collapse, and it is cut to `limit` chars."""
    out = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    return out if len(out) <= limit else out[:limit - 1] + "…"


def describe_body(resp: httpx.Response) -> str:
    """What came back, described and never quoted: a body that is not the cloud's error JSON may be
    anything (a proxy's page, another service's answer) and must not reach users or logs."""
    try:
        host = resp.request.url.host  # never its userinfo, path or query
    except RuntimeError:  # a response made without a request (tests)
        host = "the endpoint"
    if resp.is_redirect:
        return f"HTTP {resp.status_code} from {host}: a redirect (not followed)"
    size = f"body of {len(resp.content)} bytes"
    try:
        resp.json()
    except ValueError:
        return f"HTTP {resp.status_code} from {host}: non-JSON {size}"
    return f"HTTP {resp.status_code} from {host}: JSON {size} without an error message"


def error_fields(resp: httpx.Response) -> tuple[str, str]:
    """(code, message) from the common shapes: `{"error": {"code", "message"}}`,
    `{"error": "code", "message"}`, `{"errors": [{"message", "extensions": {"code"}}]}` (GraphQL),
    `{"code", "message"}`. Only those known fields are quoted, cleaned and bounded; any other body
    is described (status, host, size), never quoted."""
    try:
        body = resp.json()
    except ValueError:
        return "", describe_body(resp)
    code: object = ""
    message: object = ""
    if isinstance(body, dict):
        err = body.get("error")
        errors = body.get("errors")
        if isinstance(err, dict):
            code, message = err.get("code"), err.get("message")
        elif isinstance(err, str):
            code, message = err, body.get("message") or body.get("error_description")
        elif isinstance(errors, list) and errors and isinstance(errors[0], dict):
            return graphql_error_fields(errors)
        else:
            code, message = body.get("code"), body.get("message")
    code = clean(code, MAX_CODE) if isinstance(code, str | int) and not isinstance(code, bool) else ""
    message = clean(message) if isinstance(message, str) else ""
    if not code and not message:
        return "", describe_body(resp)
    return code, message


def graphql_error_fields(errors: list[Any]) -> tuple[str, str]:
    """(code, message) of the first GraphQL error: `extensions.code`, else `code`."""
    first: dict[str, Any] = errors[0] if errors and isinstance(errors[0], dict) else {}
    ext = first.get("extensions")
    ext = ext if isinstance(ext, dict) else {}
    code = ext.get("code") or first.get("code")
    message = first.get("message")
    return (clean(code, MAX_CODE) if isinstance(code, str | int) and not isinstance(code, bool) else "",
            clean(message) if isinstance(message, str) else "")


def map_response_error(resp: httpx.Response, *, provider: str, scope: FailureScope | str | None = None,
                       codes: Mapping[str, ErrorKind] | None = None) -> ProviderError:
    """The taxonomy error for a failed response. The cloud's error code wins over the status
    (a 503 `insufficient_capacity` is capacity, not a transient 5xx)."""
    code, message = error_fields(resp)
    return map_error(provider=provider, code=code, message=message, status=resp.status_code, scope=scope,
                     codes=codes, retry_after=resp.headers.get("Retry-After"))


def map_error(*, provider: str, code: str, message: str, status: int, scope: FailureScope | str | None = None,
              codes: Mapping[str, ErrorKind] | None = None, retry_after: str | None = None) -> ProviderError:
    """The taxonomy error for a cloud's (code, message, status): the code's kind from `codes`,
    else the status's (429 rate limit, 401/403 auth, 5xx/408 transient, other 4xx invalid)."""
    kind = (codes or {}).get(code)
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
        return RateLimited(text, retry_after=parse_retry_after(retry_after))
    if kind == "auth":
        return AuthError(text)
    if kind == "transient":
        # A gateway's 502/504 or a 408: the request may have reached the cloud and acted.
        return Transient(text, in_doubt=status in (408, 502, 504))
    return InvalidRequest(text)


def map_transport_error(exc: httpx.HTTPError, *, provider: str) -> ProviderError:
    """Timeouts, refused/dropped connections and protocol errors are all worth retrying.
    Only the exception type goes into the message: the request (and its headers) stays out."""
    if isinstance(exc, httpx.TimeoutException):
        return Transient(f"{provider}: timed out ({type(exc).__name__})", in_doubt=True)
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return InvalidRequest(f"{provider}: bad endpoint URL ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError):
        return Transient(f"{provider}: connection failed ({type(exc).__name__}: {exc})")  # never sent
    return Transient(f"{provider}: connection failed ({type(exc).__name__}: {exc})", in_doubt=True)


async def request(client: httpx.AsyncClient, method: str, url: str, *, provider: str,
                  scope: FailureScope | str | None = None, codes: Mapping[str, ErrorKind] | None = None,
                  allow: Collection[int] = (), **kwargs: Any) -> httpx.Response:
    """Send one request. 2xx and statuses in `allow` (e.g. 404 for "gone") are returned;
    anything else raises the mapped ProviderError."""
    try:
        resp = await client.request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        raise map_transport_error(exc, provider=provider) from None
    except OAuth2Error as exc:
        if exc.status in (400, 401, 403):
            raise AuthError(f"{provider}: token endpoint refused the credentials: {exc.message}") from None
        raise Transient(f"{provider}: token endpoint failed ({exc.status}): {exc.message}") from None
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
        # The exception's text may quote a value of the body (int("<anything>")): cleaned, bounded.
        raise Transient(f"{provider}: unexpected {what} response ({type(exc).__name__}: "
                        f"{clean(exc, 120)})") from None


class RestCloudProvider(CloudProvider):
    """Base of HTTP+JSON adapters: one lazily made client per instance (reused by every activity
    of this worker process), every call through `request` so errors map to the taxonomy,
    closed by aclose(). Subclasses say how to authenticate (`auth`) and what their codes mean."""

    default_endpoint: ClassVar[str]
    # The cloud's own error codes -> taxonomy kind (see `map_error`).
    error_codes: ClassVar[Mapping[str, ErrorKind]] = {}
    request_timeout_s: ClassVar[float] = DEFAULT_TIMEOUT

    _client: httpx.AsyncClient | None = None
    _transport: httpx.AsyncBaseTransport | None = None  # tests may inject one

    @property
    def endpoint(self) -> str:
        return (self.options.endpoint or self.default_endpoint).rstrip("/")

    def auth(self) -> httpx.Auth:
        """How requests authenticate; by default the `api_key` credential as a bearer token."""
        from providers.auth import BearerAuth

        return BearerAuth(lambda: str(self.credentials.reveal()["api_key"]))

    def _http(self) -> httpx.AsyncClient:
        # Made lazily: a provider may be constructed outside an event loop.
        if self._client is None:
            timeout = request_timeout(self.request_timeout_s)
            self._client = make_client(self.endpoint, auth=self.auth(), timeout=timeout,
                                       ca_bundle=self.options.ca_bundle, transport=self._transport)
        return self._client

    async def _call(self, method: str, path: str, *, scope: FailureScope | str | None = None,
                    allow: tuple[int, ...] = (), **kwargs: Any) -> httpx.Response:
        return await request(self._http(), method, path, provider=self.id, scope=scope,
                             codes=self.error_codes, allow=allow, **kwargs)

    def _json(self, resp: httpx.Response) -> Any:
        return json_body(resp, provider=self.id)

    async def _graphql(self, path: str, query: str, variables: Mapping[str, Any] | None = None, *,
                       scope: FailureScope | str | None = None) -> Any:
        """POST a GraphQL query; `data`, or the mapped error when `errors` come back (even in a 200)."""
        payload = {"query": query, "variables": dict(variables or {})}
        resp = await self._call("POST", path, scope=scope, json=payload)
        body = self._json(resp)
        if not isinstance(body, dict):
            raise Transient(f"{self.id}: GraphQL answer is not an object")
        errors = body.get("errors")
        if errors:
            code, message = graphql_error_fields(errors if isinstance(errors, list) else [errors])
            raise map_error(provider=self.id, code=code, message=message, status=400, scope=scope,
                            codes=self.error_codes)
        return body.get("data")

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


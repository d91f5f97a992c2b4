"""The API's edge: what happens to a request before FastAPI reads it.

- Authentication first, before a single body byte is read (401): a valid bearer token; or, on
  the codec's two payload routes only, a codec session cookie whose value verifies (its signature
  and expiry, codec.valid_session: not the mere presence of its name); or, under /api/, a live
  console session cookie (api/console/session.py; the route checks its CSRF token on writes).
  Every path needs one except the truly public requests (PUBLIC: health, the docs, the codec's
  token page and logout, the console's pages and static files and its sign-out, and the codec's
  CORS preflights, which a browser sends without credentials); a path that routes nowhere needs a
  token too, so an anonymous request makes the API do nothing but refuse it.
- A public request may send at most PUBLIC_MAX_BODY bytes (none of them takes a body; 413 unread).
- A body is never longer than MAX_BODY (the codec's own limit under /codec/: a Temporal payload
  may be larger): a larger Content-Length is refused unread, and a body of
  unknown length is counted as it streams in and cut off once past the limit (413). At most the
  limit plus one chunk is ever held.
- A JSON body must be RFC 8259 JSON: NaN/Infinity and lone surrogate escapes are a 422 saying
  where (strict_json), before any route sees them. A body over INLINE_JSON bytes is checked on the
  threadpool: parsing and walking a large body must not hold the event loop (/healthz, others).
- An unhandled exception is a 500 `{"detail": "internal error"}`, logged by type, route and
  frames only: its message may hold input.

A pure ASGI middleware (not BaseHTTPMiddleware): it must decide before the body is read, and hand
the body it read on unchanged.
"""

from __future__ import annotations

import email.message
import logging

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import logsafe
from api import strict_json
from api.auth import (
    CONSOLE_CHECK,
    CONSOLE_COOKIE,
    TOKEN_CHECK,
    UNAUTHORIZED,
    ConsoleCheck,
    checked_token,
    console_session,
)
from api.console import pages
from api.deps import AppDeps
from api.routers import codec

log = logging.getLogger(__name__)

MAX_BODY = 1_048_576  # bytes: the largest request body the API reads (requests are small JSON)
PUBLIC_MAX_BODY = 1024  # bytes: what a request without credentials may send (public routes take none)
INLINE_JSON = 64 * 1024  # bytes: a JSON body larger than this is checked on the threadpool


def body_limit(path: str) -> int:
    return codec.MAX_BODY if path.startswith(codec.PREFIX + "/") else MAX_BODY


def too_large(limit: int) -> str:
    return f"request body larger than {limit} bytes, the limit of this route"


# The codec's page where an operator pastes the token (no secret in it), and logging out: no body.
CODEC_OPEN = {("GET", codec.PREFIX + "/"), ("DELETE", codec.PREFIX + "/session")}
# Requests that need no credentials: liveness, the API's description, the codec's open routes.
PUBLIC_PAGES = ("/healthz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
# Signing out of the console: it ends whatever session the cookie names, or none (no body).
CONSOLE_OPEN = {("DELETE", "/api/console/session")}
OPEN_SESSIONS = CODEC_OPEN | CONSOLE_OPEN
PUBLIC = {*OPEN_SESSIONS, *pages.ROUTES,
          *((method, path) for method in ("GET", "HEAD") for path in PUBLIC_PAGES)}
# The routes a codec session cookie opens (the Web UI's browser cannot send a bearer token).
SESSION_ROUTES = {("POST", codec.PREFIX + "/decode"), ("POST", codec.PREFIX + "/encode")}


def is_public(scope: Scope) -> bool:
    """Whether the request may pass without a token or session: PUBLIC, or a CORS preflight of a
    codec route (OPTIONS; a browser sends it without credentials)."""
    method, path = scope.get("method"), scope["path"]
    if method == "OPTIONS":
        return path == codec.PREFIX or path.startswith(codec.PREFIX + "/")
    # The console's pages and files: static, nothing in them but code (their data comes from /api).
    if method in ("GET", "HEAD") and pages.is_console_path(path):
        return True
    return (method, path) in PUBLIC


def session_cookie(headers: Headers, name: str = codec.COOKIE) -> str | None:
    """A session cookie's value in the Cookie header(s) (the codec's by default), else None."""
    values = [cookie_parser(raw).get(name) for raw in headers.getlist("cookie")]
    return next((value for value in values if value), None)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, else None."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def parsed_as_json(content_type: str | None) -> bool:
    """Whether FastAPI parses a body of this content type as JSON (fastapi.routing: application/json
    or application/*+json; no content type is not JSON)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json"
                                                                  or subtype.endswith("+json"))


def refusal(status: int, detail: str, *, unread: bool = False, **headers: str) -> JSONResponse:
    if unread:  # the client may still be sending a body that will not be read: end the connection
        headers["Connection"] = "close"
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def route_of(scope: Scope) -> str:
    """The matched route's template (/api/compute/instances/{instance_id}): the path with its
    parameters' values (input) replaced by their names."""
    if scope.get("route") is None:
        return "(no route)"
    names = {str(value): name for name, value in (scope.get("path_params") or {}).items()}
    return "/".join(f"{{{names[part]}}}" if part in names else part for part in scope["path"].split("/"))


class _Disconnected(Exception):
    """The client went away while its body was being read: nobody to answer."""


async def read_capped(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes `limit` (what was read so far is dropped)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body already read, then passes on (e.g. disconnects)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class EdgeGuard:
    """See the module docstring. Tokens are checked by auth.checked_token against the deps of the
    app being called (`app.state.deps`): the admin token here, a project token on the threadpool
    (a database read), as is a console session. Codec session cookies by codec.valid_session (an
    HMAC and a clock: cheap, no I/O)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            admitted = await self._admit(scope, receive, send_tracked)
            if admitted is not None:
                await self.app(scope, admitted, send_tracked)
        except _Disconnected:
            return
        except Exception as exc:  # noqa: BLE001 — the last stop: answer 500 and log without the message
            log.error("unhandled error in %s %s: %s", scope.get("method"), route_of(scope),
                      logsafe.describe(exc))
            if not started:
                await refusal(500, "internal error")(scope, receive, send)

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """The receive to hand the app (its body checked), or None once a refusal was sent."""
        headers = Headers(scope=scope)
        public = is_public(scope)
        limit = PUBLIC_MAX_BODY if public else body_limit(scope["path"])
        if not public and not await self._authenticated(scope, headers):
            challenge = {"WWW-Authenticate": "Bearer"}
            await refusal(401, UNAUTHORIZED, unread=True, **challenge)(scope, receive, send)
            return None
        lengths = headers.getlist("content-length")
        if lengths:
            if len(set(lengths)) > 1 or not lengths[0].strip().isdigit():
                await refusal(400, "invalid Content-Length", unread=True)(scope, receive, send)
                return None
            if int(lengths[0]) > limit:
                await refusal(413, too_large(limit), unread=True)(scope, receive, send)
                return None
        body = await read_capped(receive, limit)
        if body is None:
            await refusal(413, too_large(limit), unread=True)(scope, receive, send)
            return None
        if body and parsed_as_json(headers.get("content-type")):
            if len(body) > INLINE_JSON:
                problem = await run_in_threadpool(_strict_json_problem, body)
            else:
                problem = _strict_json_problem(body)
            if problem is not None:
                await refusal(422, problem)(scope, receive, send)
                return None
        return replaying(body, receive)

    async def _authenticated(self, scope: Scope, headers: Headers) -> bool:
        """A valid bearer token; or, with no Authorization header, on the codec's payload routes, a
        session cookie whose value verifies (the route then checks its origin), and under /api/ a
        live console session (the route then checks a write's CSRF token)."""
        deps: AppDeps = scope["app"].state.deps
        authorization = headers.get("authorization")
        if authorization is None and (scope.get("method"), scope["path"]) in SESSION_ROUTES:
            value = session_cookie(headers)
            return value is not None and codec.valid_session(deps, value)
        if authorization is None and scope["path"].startswith("/api/"):
            value = session_cookie(headers, CONSOLE_COOKIE)
            if value is None:
                return False
            opened = await run_in_threadpool(console_session, deps, value)
            # The route's `current_caller` reads it from the request's state rather than asking again.
            scope.setdefault("state", {})[CONSOLE_CHECK] = ConsoleCheck(value, opened)
            return opened is not None
        token = bearer_token(authorization)
        if token is None:
            return False
        check = await checked_token(deps, token)
        scope.setdefault("state", {})[TOKEN_CHECK] = check  # as CONSOLE_CHECK above
        return check.valid


def _strict_json_problem(body: bytes) -> str | None:
    """Why the body is not strict JSON (where, never what), or None. Malformed JSON is left to
    FastAPI, which answers it with its own 422/400."""
    try:
        strict_json.loads(body)
    except strict_json.StrictJsonError as e:
        return str(e)
    except (ValueError, RecursionError):
        return None
    return None

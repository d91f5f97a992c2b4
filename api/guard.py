"""The API's edge: what happens to a request before FastAPI reads it.

- Under /api/ and /codec/ the bearer token is checked before a single body byte is read (401).
  Exceptions: CORS preflights (OPTIONS: no credentials, no body) and /codec/ requests carrying
  the codec's session cookie, which its routes check before they read the body.
- A body is never longer than MAX_BODY (the codec's own limit under /codec/: a Temporal payload
  may be larger): a larger Content-Length is refused unread, and a body of
  unknown length is counted as it streams in and cut off once past the limit (413). At most the
  limit plus one chunk is ever held.
- A JSON body must be RFC 8259 JSON: NaN/Infinity and lone surrogate escapes are a 422 saying
  where (strict_json), before any route sees them.
- An unhandled exception is a 500 `{"detail": "internal error"}`, logged by type, route and
  frames only: its message may hold input.

A pure ASGI middleware (not BaseHTTPMiddleware): it must decide before the body is read, and hand
the body it read on unchanged.
"""

from __future__ import annotations

import email.message
import logging
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import logsafe
from api import strict_json
from api.deps import UNAUTHORIZED
from api.routers import codec

log = logging.getLogger(__name__)

MAX_BODY = 1_048_576  # bytes: the largest request body the API reads (requests are small JSON)
GUARDED_PREFIXES = ("/api/", "/codec/")  # not /healthz, /docs, /openapi.json


def body_limit(path: str) -> int:
    return codec.MAX_BODY if path.startswith(codec.PREFIX + "/") else MAX_BODY


def too_large(limit: int) -> str:
    return f"request body larger than {limit} bytes, the limit of this route"


# The codec's page where an operator pastes the token (no secret in it), and logging out: no body.
CODEC_OPEN = {("GET", codec.PREFIX + "/"), ("DELETE", codec.PREFIX + "/session")}


def needs_token(scope: Scope, headers: Headers) -> bool:
    if not scope["path"].startswith(GUARDED_PREFIXES) or scope.get("method") == "OPTIONS":
        return False
    if (scope.get("method"), scope["path"]) in CODEC_OPEN:
        return False
    # The Web UI's browser cannot send a bearer token: its codec session cookie is checked by the
    # codec routes (api/routers/codec.py), which read no body before it passed.
    return not (scope["path"].startswith(codec.PREFIX + "/") and codec.COOKIE in headers.get("cookie", ""))


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
    """See the module docstring. `token_ok(token)` is deps.token_is_valid bound to the app's deps;
    it is sync (it may query the database) and runs on the threadpool."""

    def __init__(self, app: ASGIApp, token_ok: Callable[[str], bool]) -> None:
        self.app = app
        self.token_ok = token_ok

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
        limit = body_limit(scope["path"])
        if needs_token(scope, headers):
            token = bearer_token(headers.get("authorization"))
            if token is None or not await run_in_threadpool(self.token_ok, token):
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
            problem = _strict_json_problem(body)
            if problem is not None:
                await refusal(422, problem)(scope, receive, send)
                return None
        return replaying(body, receive)


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

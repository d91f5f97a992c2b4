"""The codec endpoint for the Temporal Web UI (Temporal's remote codec protocol):
`POST /codec/decode` and `POST /codec/encode` take and give `{"payloads": [{"metadata": {k: base64},
"data": base64}]}` and run the same payload codec as the worker, with the same keys.

Who may call it: a bearer token (the API's own check), or a session cookie. The Web UI's browser
cannot send our bearer token; it can send cookies (its codec setting "Include cross-origin
credentials"). `GET /codec/` is a page where an operator pastes the token once; `POST /codec/session`
turns it into an HttpOnly, SameSite=Strict cookie holding an HMAC-signed expiry (not the token).
The UI's origin (`GPUPROV_CODEC_CORS_ORIGINS`) may call these routes cross-origin, with credentials;
preflights are answered without auth.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import html
import secrets
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.api.common.v1 import Payload

from api.auth import BearerDep, require_admin_token
from api.deps import AppDeps, DepsDep
from api.fields import Timestamp
from workflows.codec import CodecError, EncryptionCodec

PREFIX = "/codec"
COOKIE = "gpuprov_codec_session"
# A history event's payloads are each at most 2 MB in Temporal by default; the UI sends one field's.
MAX_BODY = 4 * 1024 * 1024

router = APIRouter(tags=["codec"])


# --------------------------------------------------------------------------- the protocol's shapes


class CodecPayload(BaseModel):
    metadata: dict[str, str] = Field(default_factory=dict, description="values base64-encoded")
    data: str = Field("", description="base64-encoded")


class CodecPayloads(BaseModel):
    payloads: list[CodecPayload]


def _b64(value: str, where: str) -> bytes:
    try:
        # Standard alphabet (protobuf JSON); url-safe also read. Missing padding is tolerated.
        return base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_" if "-" in value or "_" in
                                value else None, validate=True)
    except (binascii.Error, ValueError):
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"{where} is not base64") from None


def to_protos(body: CodecPayloads) -> list[Payload]:
    return [Payload(metadata={k: _b64(v, f"payloads[{i}].metadata") for k, v in p.metadata.items()},
                    data=_b64(p.data, f"payloads[{i}].data"))
            for i, p in enumerate(body.payloads)]


def from_protos(payloads: Sequence[Payload]) -> dict[str, Any]:
    return {"payloads": [{"metadata": {k: base64.b64encode(v).decode() for k, v in p.metadata.items()},
                          "data": base64.b64encode(p.data).decode()} for p in payloads]}


@lru_cache(maxsize=4)
def _codec(keys: tuple[bytes, ...]) -> EncryptionCodec:
    return EncryptionCodec(keys)


# --------------------------------------------------------------------------- who may call it


def _mac(deps: AppDeps, body: str) -> str:
    return deps.box.digest(b"gpuprov codec session\0" + body.encode())


def session_value(deps: AppDeps, expires: int) -> str:
    """`expiry.nonce.mac`: signed with a key derived from the secret store's, so every API replica
    accepts it and none needs to remember it. It holds no token."""
    body = f"{expires}.{secrets.token_urlsafe(12)}"
    return f"{body}.{_mac(deps, body)}"


def valid_session(deps: AppDeps, value: str | None) -> bool:
    if not value or value.count(".") != 2:
        return False
    body, _, mac = value.rpartition(".")
    expected = _mac(deps, body)
    expires = body.partition(".")[0]
    return (hmac.compare_digest(mac.encode(), expected.encode()) and expires.isdigit()
            and int(expires) > time.time())


def require_codec_access(request: Request, creds: BearerDep, deps: DepsDep) -> None:
    """A valid session cookie from an allowed origin, else the API's bearer check."""
    if creds is None and valid_session(deps, request.cookies.get(COOKIE)):
        origin = request.headers.get("origin")
        # A cookie goes with any same-site request; only the Web UI (or this API's page) may use it.
        own = f"{request.url.scheme}://{request.url.netloc}"
        if origin is not None and origin != own and origin not in deps.codec_cors_origins:
            raise HTTPException(status.HTTP_403_FORBIDDEN, "this origin may not use the codec session")
        return
    # The codec decodes every project's payloads: the installation's admin token only.
    require_admin_token(creds, deps)


async def bounded_body(request: Request) -> bytes:
    """The body, read only after the caller was let in, refused past MAX_BODY without reading on."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"body larger than {MAX_BODY} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, f"body larger than {MAX_BODY} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _parsed(body: bytes) -> list[Payload]:
    try:
        return to_protos(CodecPayloads.model_validate_json(body))
    except ValidationError as e:
        raise RequestValidationError(e.errors()) from None  # the app's handler drops the inputs


async def payloads_in(request: Request) -> list[Payload]:
    """The body's payloads, parsed and base64-decoded on the threadpool: up to MAX_BODY of work
    that must not hold the event loop."""
    return await run_in_threadpool(_parsed, await bounded_body(request))


# --------------------------------------------------------------------------- routes

_BODY_DOC: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/CodecPayloads"}}}}}
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "no valid bearer token or session"},
    403: {"description": "a session cookie sent from an origin that may not use it"},
    413: {"description": f"body larger than {MAX_BODY} bytes"},
    422: {"description": "not the codec protocol's shape, not base64, or a payload that cannot be decrypted "
                         "(its key id is not in the keyring, or it was altered)"}}
Access = Annotated[None, Depends(require_codec_access)]


@router.post("/decode", response_model=CodecPayloads, openapi_extra=_BODY_DOC, responses=_ERRORS)
async def decode(request: Request, _: Access, deps: DepsDep) -> dict[str, Any]:
    """Decrypt payloads (those not encrypted come back as they were)."""
    payloads = await payloads_in(request)
    try:
        decoded = await _codec(deps.box.keys).decode(payloads)
    except CodecError as e:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(e)) from None
    return from_protos(decoded)


@router.post("/encode", response_model=CodecPayloads, openapi_extra=_BODY_DOC, responses=_ERRORS)
async def encode(request: Request, _: Access, deps: DepsDep) -> dict[str, Any]:
    """Encrypt payloads with the current key (what the UI sends to a workflow: a signal, a start)."""
    payloads = await payloads_in(request)
    return from_protos(await _codec(deps.box.keys).encode(payloads))


class SessionOut(BaseModel):
    expires_at: Timestamp


@router.post("/session", response_model=SessionOut, dependencies=[Depends(require_admin_token)],
             responses={401: {"description": "missing or invalid bearer token"},
                        403: {"description": "a project token: the codec needs the admin token"}})
def start_session(request: Request, response: Response, deps: DepsDep) -> SessionOut:
    """Trade the bearer token (in the Authorization header, never a URL) for a codec session cookie."""
    expires = int(time.time() + deps.codec_session_ttl_s)
    response.set_cookie(COOKIE, session_value(deps, expires), max_age=int(deps.codec_session_ttl_s),
                        path=PREFIX, httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return SessionOut(expires_at=datetime.fromtimestamp(expires, UTC))


@router.delete("/session", status_code=status.HTTP_204_NO_CONTENT)
def end_session(response: Response) -> None:
    """Forget the session cookie in this browser."""
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def page(request: Request) -> HTMLResponse:
    """The page where an operator opens a session for the Web UI's browser."""
    nonce = secrets.token_urlsafe(16)
    endpoint = html.escape(f"{request.url.scheme}://{request.url.netloc}{PREFIX}")  # the Host header
    return HTMLResponse(_PAGE.replace("{nonce}", nonce).replace("{endpoint}", endpoint), headers={
        "Content-Security-Policy": f"default-src 'none'; script-src 'nonce-{nonce}'; "
                                   "style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; "
                                   "form-action 'none'",
        "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>gpuprov codec session</title></head>
<body style="font-family: sans-serif; max-width: 44em; margin: 2em auto">
<h1>Decode payloads in the Temporal Web UI</h1>
<p>gpuprov encrypts what it stores in Temporal. To read it in the Web UI, this browser needs a codec
session: paste the API token (<code>gpuprov dev</code> prints it) and open one.</p>
<p><input id="token" type="password" size="48" autocomplete="off" placeholder="API token">
<button id="open">Open session</button> <button id="close">Close session</button></p>
<p id="status" role="status"></p>
<p>Then, in the Web UI (open it as <code>http://127.0.0.1:8233</code>, the same host as this page), in
<em>Codec Server</em> settings: endpoint <code>{endpoint}</code>, tick <em>Include cross-origin
credentials</em> and <em>Use my browser setting and ignore Cluster-level setting</em>.</p>
<script nonce="{nonce}">
const status = document.getElementById("status");
document.getElementById("open").onclick = async () => {
  const token = document.getElementById("token").value.trim();
  const r = await fetch("session", {method: "POST", credentials: "same-origin",
                                    headers: {"Authorization": "Bearer " + token}});
  document.getElementById("token").value = "";
  status.textContent = r.ok ? "Session open until " + (await r.json()).expires_at
                            : "Refused (" + r.status + "): check the token.";
};
document.getElementById("close").onclick = async () => {
  await fetch("session", {method: "DELETE", credentials: "same-origin"});
  status.textContent = "Session closed.";
};
</script>
</body></html>
"""


# --------------------------------------------------------------------------- CORS, for /codec only


class CodecCors:
    """CORS with credentials for the Web UI's origins (the deps of the app being called), on /codec
    routes only (the rest of the API is for non-browser clients and answers no cross-origin request)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._cors: dict[tuple[str, ...], CORSMiddleware] = {}  # by origins: made once, not per request

    def _for(self, origins: Sequence[str]) -> CORSMiddleware:
        key = tuple(origins)
        cors = self._cors.get(key)
        if cors is None:
            cors = self._cors[key] = CORSMiddleware(
                self.app, allow_origins=list(origins), allow_credentials=True, allow_methods=["POST"],
                max_age=600, allow_headers=["Content-Type", "X-Namespace", "Authorization"])
        return cors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == PREFIX or path.startswith(PREFIX + "/"):
            deps: AppDeps = scope["app"].state.deps
            await self._for(deps.codec_cors_origins)(scope, receive, send)
        else:
            await self.app(scope, receive, send)

"""One error shape for every non-2xx answer (`ErrorOut`), and turning provider and registry errors
into HTTP answers with the reason in `detail`."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.utils import is_body_allowed_for_status_code
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from api.strict_json import loc_part
from messages.echo import shown as shown  # re-exported: the routes quote values with it
from providers import registry
from providers.base import (
    AuthError,
    CapacityError,
    CloudProvider,
    InvalidRequest,
    ProviderError,
    QuotaError,
    RateLimited,
    Unsupported,
)


def adapter_class(cloud: str) -> type[CloudProvider]:
    """The adapter for `cloud`, or a 422 listing the clouds we know."""
    try:
        return registry.adapter_class(cloud)
    except InvalidRequest:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            f"unknown cloud {shown(cloud)}; known: {', '.join(registry.known())}") from None
    except ImportError as e:  # the adapter's module (or its SDK) is missing from this install
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            f"cloud {shown(cloud)} is not available in this installation: {e}") from None


def provider_http_error(cloud: str, e: ProviderError) -> HTTPException:
    """A provider's failure on a read path (offers). The cloud's own message is the reason."""
    reason = f"{cloud}: {e.message}"
    if isinstance(e, AuthError):
        return HTTPException(status.HTTP_409_CONFLICT,
                             f"{reason} — the stored credentials were refused; reconnect {cloud}")
    if isinstance(e, InvalidRequest | Unsupported):
        return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, reason)
    if isinstance(e, RateLimited):
        return HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, reason,
                             headers={"Retry-After": str(max(1, round(e.retry_after)))})
    if isinstance(e, CapacityError | QuotaError):
        return HTTPException(status.HTTP_409_CONFLICT, reason)
    return HTTPException(status.HTTP_502_BAD_GATEWAY, reason)


MAX_FIELD_ERRORS = 20  # a body with thousands of unknown keys still gets a short answer
MAX_SUMMARISED = 5  # field errors spelled out in `detail`
MAX_TEXT = 500  # characters of one loc part or message (our messages; keys are shown only when field-like)
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


class FieldError(BaseModel):
    """One invalid field: where (`loc`, e.g. ["body", "ssh_public_keys", 0]) and why. Never its value."""

    loc: list[str | int]
    msg: str
    type: str


class ErrorOut(BaseModel):
    """Every non-2xx answer. `detail`: a sentence saying why (for a validation error, a summary of
    the field errors); `errors`: the invalid fields, on validation errors only."""

    detail: str = Field(description="why the request failed, for people")
    errors: list[FieldError] | None = Field(None, description="the invalid fields (validation errors only)")


def _safe(text: str) -> str:
    """Printable, encodable and bounded: a lone surrogate in a key name would otherwise fail the
    UTF-8 encoding of the answer (a 500), and a 1 MB key name would be echoed whole."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


def _message(msg: Any) -> str:
    text = str(msg or "invalid")
    # pydantic prefixes a validator's own words; the field path already says it is about a value.
    return _safe(text.removeprefix("Value error, "))


def validation_errors(errors: Any) -> list[FieldError]:
    """Request validation errors as (loc, msg, type): never the `input` nor `ctx`, which may hold a
    secret (a credential value of the wrong type) — the field path and the message say what is wrong."""
    # A key that does not look like a field name is not shown either (loc_part): an unknown key is input.
    return [FieldError(loc=[p if isinstance(p, int) else _safe(str(loc_part(p))) for p in e.get("loc", ())],
                       msg=_message(e.get("msg")), type=_safe(str(e.get("type") or "invalid")))
            for e in map(_tag_missing, list(errors)[:MAX_FIELD_ERRORS])]


def _tag_missing(error: Any) -> Any:
    """A union member's tag not given (a policy card's `when` without its `kind`) as the missing
    field it is, at its own path: pydantic says "Unable to extract tag using discriminator" at the
    union's. The discriminator is the code's field name, never input."""
    if error.get("type") != "union_tag_not_found":
        return error
    name = str((error.get("ctx") or {}).get("discriminator", "")).strip("'\"")
    if not name.isidentifier():
        return error
    return {**error, "loc": (*error.get("loc", ()), name), "type": "missing",
            "msg": "Field required: it says which kind this is (the schema's discriminator lists them)"}


def _where(loc: list[str | int]) -> str:
    """["body", "ssh_public_keys", 0] -> "body.ssh_public_keys[0]"."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def summary(fields: list[FieldError], total: int) -> str:
    """The `detail` of a validation error: "body.cloud: unknown cloud ...; query.limit: ..."."""
    parts = [f"{_where(f.loc)}: {f.msg}" if f.loc else f.msg for f in fields[:MAX_SUMMARISED]]
    if not parts:
        return "invalid request"
    more = total - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def error_response(status_code: int, detail: str, *, errors: list[FieldError] | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    """The one shape (no body where HTTP allows none: 204, 304)."""
    if not is_body_allowed_for_status_code(status_code):
        return Response(status_code=status_code, headers=headers)
    body = ErrorOut(detail=_safe_detail(detail), errors=errors).model_dump(mode="json", exclude_none=True)
    return JSONResponse(body, status_code=status_code, headers=headers)


def _safe_detail(detail: str) -> str:
    # Not cut to MAX_TEXT: a refusal listing every cloud's reason is long, and it is our own text.
    return detail.encode("utf-8", "backslashreplace").decode("utf-8")


async def request_validation_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    raw = exc.errors()
    fields = validation_errors(raw)
    return error_response(status.HTTP_422_UNPROCESSABLE_CONTENT, summary(fields, len(raw)), errors=fields)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path. Starlette's 405 names only the first route
    whose path matched (`Allow: POST` where GET is served too)."""
    routes = request.app.router.routes
    return [m for m in HTTP_METHODS
            if any(r.matches({**request.scope, "method": m})[0] == Match.FULL for r in routes)]


async def http_exception_handler(request: Request, exc: Exception) -> Response:
    """HTTPException (ours and Starlette's 404/405) in the one shape, keeping its headers
    (WWW-Authenticate, Retry-After), with an Allow header that lists every method of the path."""
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == status.HTTP_405_METHOD_NOT_ALLOWED:
        headers["Allow"] = ", ".join(allowed_methods(request))
    return error_response(exc.status_code, detail, headers=headers or None)


async def unexpected_error_handler(request: Request, exc: Exception) -> Response:
    """A bug: the one shape and no internals. Starlette raises the exception on after this answer,
    so the server still logs it (and tests still see it)."""
    return error_response(status.HTTP_500_INTERNAL_SERVER_ERROR, "internal error")


def install_error_handlers(app: Any) -> None:
    """Every error the app answers, in the ErrorOut shape."""
    app.add_exception_handler(RequestValidationError, request_validation_handler)
    app.add_exception_handler(StarletteHTTPException, http_exception_handler)
    app.add_exception_handler(Exception, unexpected_error_handler)

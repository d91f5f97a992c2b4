"""Turning provider and registry errors into HTTP answers with the reason in `detail`."""

from __future__ import annotations

import re
from typing import Any

from fastapi import HTTPException, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from api.strict_json import loc_part
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


def validation_errors(errors: Any) -> list[dict[str, Any]]:
    """Request validation errors as (type, loc, msg): never the `input`, which may be a secret
    (a credential value of the wrong type) — the field path and the message say what is wrong.
    A key in `loc` that does not look like a field name is not shown either (an unknown key is input:
    a 100 MB one would be echoed whole)."""
    return [{"type": e.get("type"), "loc": [loc_part(p) for p in e.get("loc", ())], "msg": e.get("msg")}
            for e in errors]


_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def shown(value: str) -> str:
    """A value from the request, quoted in an answer only if it looks like an id: a path or body
    value may be anything (a pasted secret, control characters, 3 000 characters)."""
    return repr(value) if _ID.match(value) else "(value not shown: not an id)"


async def request_validation_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
                        content=jsonable_encoder({"detail": validation_errors(exc.errors())}))

"""Turning provider and registry errors into HTTP answers with the reason in `detail`."""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

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
                            f"unknown cloud {cloud!r}; known: {', '.join(registry.known())}") from None
    except ImportError as e:  # the adapter's module (or its SDK) is missing from this install
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            f"cloud {cloud!r} is not available in this installation: {e}") from None


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
    (a credential value of the wrong type) — the field path and the message say what is wrong."""
    return [{"type": e.get("type"), "loc": list(e.get("loc", ())), "msg": e.get("msg")} for e in errors]


async def request_validation_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
                        content=jsonable_encoder({"detail": validation_errors(exc.errors())}))

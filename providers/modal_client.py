"""The wire to Modal: one official `modal` client (1.6.4, pinned) per adapter, opened explicitly, and
its exceptions mapped onto the contract's errors.

Explicit, not global: `modal.Client.from_credentials` and `from_env` read the server URL (and more)
from `~/.modal.toml` and `MODAL_*` variables, and `modal token set` writes that file. Here the client
is constructed with the connection's server URL and token pair and opened itself; nothing is written
and the URL/tokens come from the connection alone (tests/modal_/test_modal_client.py checks a
poisoned home file and environment change nothing). One caveat of the library, not ours: `import
modal` reads `~/.modal.toml` once if it exists (modal/config.py), and a few behaviour switches
(`MODAL_SANDBOX_V2`, `MODAL_IMAGE_BUILDER_VERSION`) are still read from the environment.

The client's own retries stay on but are bounded (3 attempts per call, one `x-idempotency-key`, so
Modal runs a retried call once); anything left is a Transient for Temporal to retry.

Imported lazily by providers/modal_.py: `import providers.registry` never loads `modal`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from providers.base import (
    AuthError,
    CapacityError,
    FailureScope,
    InvalidRequest,
    ProviderError,
    QuotaError,
    RateLimited,
    Transient,
)

DEFAULT_SERVER_URL = "https://api.modal.com"
MAX_MESSAGE = 300


async def open_client(server_url: str, token_id: str, token_secret: str) -> Any:
    """An opened `modal.Client` for this server and token pair (no config file, no env lookup)."""
    import modal
    from modal_proto import api_pb2

    client = modal.Client(server_url, api_pb2.CLIENT_TYPE_CLIENT, (token_id, token_secret))
    await client.__aenter__()  # opens channel and stubs; the client's own context-manager entry
    return client


def _reason(exc: Exception) -> tuple[str | None, float | None]:
    """(ErrorInfo reason, RetryInfo delay in s) from the gRPC rich status the client kept, if any."""
    details = getattr(exc, "_grpc_details", None) or []
    reason, delay = None, None
    for d in details if isinstance(details, list | tuple) else []:
        name = type(d).__name__
        if name == "ErrorInfo":
            reason = getattr(d, "reason", None)
        elif name == "RetryInfo":
            rd = d.retry_delay
            delay = rd.seconds + rd.nanos / 1e9
    return reason, delay


def map_error(exc: BaseException, provider: str, scope: FailureScope | str | None = None) -> ProviderError:
    """The contract's error for a `modal` exception (or a transport failure)."""
    from modal import exception as mx

    message = f"{provider}: {str(exc)[:MAX_MESSAGE] or type(exc).__name__}"
    if isinstance(exc, mx.AuthError | mx.PermissionDeniedError):
        return AuthError(message)
    if isinstance(exc, mx.ResourceExhaustedError):
        reason, delay = _reason(exc)
        if reason == "RATE_LIMITED":
            return RateLimited(message, retry_after=delay if delay is not None else 1.0)
        if reason == "QUOTA_EXCEEDED":
            return QuotaError(message, scope=provider)
        return CapacityError(message, scope=scope or provider)
    if isinstance(exc, mx.InvalidError | mx.NotFoundError | mx.AlreadyExistsError | mx.ConflictError):
        return InvalidRequest(message)
    # ServiceError/InternalError (5xx, lost answers after the client's retries), timeouts, sockets:
    # the call may have taken effect.
    if isinstance(exc, mx.Error | OSError | asyncio.TimeoutError | ConnectionError):
        return Transient(message, in_doubt=True)
    return Transient(f"{provider}: {type(exc).__name__}: {str(exc)[:MAX_MESSAGE]}", in_doubt=True)

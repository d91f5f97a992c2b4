"""The Nebius adapter's wire: the official `nebius` SDK (asyncio-native, gRPC), built once per adapter,
every call bounded and its failure mapped onto the taxonomy.

Why `CloudProvider` and not `providers.sdk.SdkCloudProvider`: that base exists to move *blocking* SDK
calls onto a thread pool. The nebius SDK is asyncio-native: it runs its own event-loop thread (one per
`SDK` object) and its request handles are awaitable from any loop, so the worker's loop awaits them
directly and no pool thread is held while a call waits. What the base also brings (a CA file, an error
table) is done here for gRPC: the CA goes in-memory into `tls_credentials`.

- Endpoint: none given, the SDK's own resolution and TLS (api.nebius.cloud and its service hosts,
  the system roots). `https://host:port` (a private endpoint, the simulation's gRPC TLS port): every
  service resolves there (`resolver.Constant`) over TLS (`tls_credentials`), trusting the connection's
  `ca_bundle` (the simulation's CA) besides the default roots. Never plain text: Nebius serves TLS
  only, and so does its simulation (an `http://` endpoint is refused). Its certificate is checked
  once, with the same roots, before the SDK's first call (`check_endpoint_certificate`): gRPC
  retries a refused handshake until the call's deadline, which reads as a timeout.
- Credentials: the service account's key, in memory (`ServiceAccount` token requester): the SDK signs
  the RS256 JWT and exchanges it at `iam.v1.TokenExchangeService/Exchange` itself, renewing the token.
- Retries: the SDK's own are off (`retries=0`), each call has its `timeout`: Temporal owns retrying.
- Idempotency: the SDK puts a fresh `x-idempotency-key` on each call; a create passes its own, derived
  from the gpuprov key, so a retried create is the same mutation to Nebius.
- Operations: Create/Delete answer a `common.v1.Operation` that may still be running; `settle` polls it
  (`OperationService/Get`, the SDK's `op.wait()`) for at most a bounded time, so a never-finishing
  operation cannot hold an activity: past the bound the caller follows the resource instead. An
  operation that ends in an error is mapped like a refused call (capacity, quota, ...).
- The SDK's loop thread and executor are closed by `close()` (the adapter's `aclose`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any
from urllib.parse import urlsplit

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

CALL_TIMEOUT = 30.0  # seconds, one call (auth included)
OP_POLL_S = 0.5  # between OperationService/Get polls
USER_AGENT = "gpuprov"
IDEMPOTENCY_HEADER = "x-idempotency-key"


def build_sdk(
    *,
    service_account_id: str,
    public_key_id: str,
    private_key_pem: str,
    endpoint: str | None,
    ca_bundle: str | None,
    provider: str,
) -> Any:
    """A `nebius.sdk.SDK` for these credentials and endpoint (imported here: importing the adapter
    stays cheap). InvalidRequest when the key or endpoint cannot be used."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from nebius.base.resolver import Constant
    from nebius.base.service_account.service_account import ServiceAccount
    from nebius.sdk import SDK

    try:
        key = serialization.load_pem_private_key(private_key_pem.encode(), password=None)
    except (ValueError, TypeError):
        raise AuthError(f"{provider}: the private key is not an unencrypted PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise AuthError(f"{provider}: the private key must be an RSA key (Nebius signs RS256)")
    kwargs: dict[str, Any] = {}
    if endpoint:
        host, port = endpoint_address(provider, endpoint)
        kwargs["resolver"] = Constant(f"{host}:{port}")
        kwargs["tls_credentials"] = channel_credentials(ca_bundle)
    return SDK(
        credentials=ServiceAccount(key, public_key_id, service_account_id),
        user_agent_prefix=USER_AGENT,
        **kwargs,
    )


def endpoint_address(provider: str, endpoint: str) -> tuple[str, int]:
    """A private endpoint's host and port; InvalidRequest unless it is https://host:port."""
    parts = urlsplit(endpoint)
    if parts.scheme != "https" or not parts.hostname or not parts.port:
        raise InvalidRequest(f"{provider}: endpoint must be https://host:port (gRPC over TLS)")
    return parts.hostname, parts.port


def trusted_roots(ca_bundle: str | None) -> bytes:
    """The CA certificates a private endpoint is checked against: the default roots (certifi's, as the
    other SDK adapters trust) and, when the connection gives one, its CA (the simulation's)."""
    import certifi

    with open(certifi.where(), "rb") as f:
        trusted = f.read()
    if ca_bundle:
        trusted += b"\n" + ca_bundle.encode()
    return trusted


def channel_credentials(ca_bundle: str | None) -> Any:
    """TLS credentials for a private endpoint, trusting `trusted_roots`."""
    import grpc

    return grpc.ssl_channel_credentials(root_certificates=trusted_roots(ca_bundle))


# How long the endpoint's certificate check may take (one TLS handshake on the endpoint's address).
TLS_CHECK_TIMEOUT = 10.0


async def check_endpoint_certificate(provider: str, endpoint: str, ca_bundle: str | None) -> None:
    """InvalidRequest, with the verifier's reason, when a private endpoint's TLS certificate is not
    signed by `trusted_roots`. gRPC treats a failed handshake as a channel that is not ready yet and
    keeps reconnecting until the call's deadline (and the SDK's token exchange waits out its own), so a
    wrong CA bundle otherwise shows as a timeout, seconds later, that names no certificate. One TLS
    handshake with the same roots, before the SDK's first call, says why. Anything else (refused,
    unreachable, slow) is left to the calls, which report it as they always have."""
    import ssl

    host, port = endpoint_address(provider, endpoint)
    context = ssl.create_default_context(cadata=trusted_roots(ca_bundle).decode())
    context.set_alpn_protocols(["h2"])
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, server_hostname=host), TLS_CHECK_TIMEOUT
        )
    except ssl.SSLCertVerificationError as exc:
        raise InvalidRequest(
            f"{provider}: the endpoint {host}:{port} presents a TLS certificate the connection does not "
            f"trust ({exc.verify_message or exc.reason}): it must name this address and be signed by a CA "
            f"in the connection's CA bundle"
        ) from None
    except (OSError, TimeoutError):  # ssl.SSLError is an OSError: a handshake that failed otherwise
        return
    # Dropped, not closed: a TLS close waits for the peer's close_notify, which a gRPC server that
    # never saw an HTTP/2 request may not send (asyncio then waits out its 30 s shutdown timeout).
    writer.transport.abort()


def _service_error_kind(status: Any) -> str | None:
    """Which `nebius.common.v1.ServiceError` detail a refusal carries (quota_failure, ...), if any."""
    for err in getattr(status, "service_errors", None) or ():
        which = err.which_field_in_oneof("details")
        if which:
            return str(which)
    return None


def map_failure(provider: str, exc: BaseException, scope: FailureScope | None = None) -> ProviderError:
    """The taxonomy error for an SDK failure (a `RequestError` with the status Nebius answered, or
    something that is not the cloud's answer)."""
    import grpc
    from nebius.aio.service_error import RequestError

    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return Transient(f"{provider}: call timed out", in_doubt=True)
    if not isinstance(exc, RequestError):
        # The SDK wraps an exchange refused by IAM in its own errors; its text names the status.
        text = str(exc)
        if "UNAUTHENTICATED" in text or "PERMISSION_DENIED" in text:
            return AuthError(f"{provider}: credentials refused: {text[:300]}")
        return Transient(f"{provider}: {type(exc).__name__}: {text[:300]}", in_doubt=True)
    status = exc.status
    code, message = status.code, (status.message or "")[:500]
    detail = _service_error_kind(status)
    where = scope or FailureScope(provider=provider)
    text = f"{provider}: {code.name}: {message}"
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return AuthError(text)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if detail == "quota_failure" or "quota" in message.lower():
            return QuotaError(text, scope=FailureScope(provider=provider, region=where.region))
        if detail == "too_many_requests":
            return RateLimited(text, retry_after=_retry_after(exc))
        return CapacityError(text, scope=where)
    if code in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
    ):
        return InvalidRequest(text)
    # DEADLINE_EXCEEDED, UNAVAILABLE, INTERNAL, UNKNOWN, ABORTED: the call may have acted.
    return Transient(
        text,
        in_doubt=code
        in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN),
    )


def _retry_after(exc: Any) -> float:
    """The `google.rpc.RetryInfo` delay among the status details, else the default pause."""
    from google.rpc import error_details_pb2

    from providers.rest import parse_retry_after

    for detail in getattr(exc.status, "details", None) or ():
        if str(getattr(detail, "type_url", "")).endswith("/google.rpc.RetryInfo"):
            info = error_details_pb2.RetryInfo.FromString(bytes(detail.value))
            return max(0.0, info.retry_delay.ToTimedelta().total_seconds())
    return parse_retry_after(None)


async def call(provider: str, request: Awaitable[Any], scope: FailureScope | None = None) -> Any:
    """Await one SDK request handle; its failure as a taxonomy error."""
    try:
        return await request
    except ProviderError:
        raise
    except Exception as exc:  # noqa: BLE001 — every SDK failure is mapped, none escapes raw
        raise map_failure(provider, exc, scope) from None


async def settle(
    provider: str, op: Any, wait_s: float, scope: FailureScope | None = None, poll_s: float = OP_POLL_S
) -> bool:
    """Wait (polling `OperationService/Get` through the SDK's `op.wait()`) up to `wait_s` seconds for
    the operation to finish: True once it finished well, False when it is still running at the bound
    (the caller follows the resource itself); a failed operation raises its taxonomy error."""
    from nebius.aio.operation import OperationError

    try:
        await op.wait(
            interval=poll_s,
            timeout=wait_s,
            poll_iteration_timeout=min(CALL_TIMEOUT, wait_s),
            poll_retries=0,
            auth_timeout=CALL_TIMEOUT,
            auth_options=_AUTH_OPTIONS,
        )
    except TimeoutError:  # still running at the bound
        return False
    except OperationError as exc:  # finished, refused: its status is the cloud's answer
        raise map_failure(provider, exc, scope) from None
    except ProviderError:
        raise
    except Exception as exc:  # noqa: BLE001 — a failed poll (its status mapped), none escapes raw
        raise map_failure(provider, exc, scope) from None
    return True


async def poll(provider: str, op: Any, scope: FailureScope | None = None) -> bool:
    """One `OperationService/Get` of the operation (`op.update()`): True once it finished well, False
    while it runs; a failed operation raises its taxonomy error, as a refused call would."""
    from nebius.aio.operation import OperationError

    if not op.done():
        await call(provider, op.update(**kwargs()), scope)
    if not op.done():
        return False
    if not op.successful():
        raise map_failure(provider, OperationError(op), scope)
    return True


# A refused token exchange (a wrong key, say) is reported to the call at once instead of being
# retried in the background until auth_timeout: credentials that cannot work fail fast.
_AUTH_OPTIONS = {
    "token_renew_report_error": "1",
    "token_renew_synchronous": "1",
    "max_fetch_token_retries": "1",
}


def kwargs(timeout: float = CALL_TIMEOUT, idempotency_key: str | None = None) -> dict[str, Any]:
    """Per-call options: bounded, no SDK retries, and a stable idempotency key when given."""
    out: dict[str, Any] = {
        "timeout": timeout,
        "retries": 0,
        "auth_timeout": timeout,
        "auth_options": dict(_AUTH_OPTIONS),
    }
    if idempotency_key:
        out["metadata"] = [(IDEMPOTENCY_HEADER, idempotency_key)]
    return out

"""The engine's errors as gRPC statuses: the one table every gRPC facade shares.

HTTP facades render a `CloudError` in their vendor's own body shape; a gRPC facade renders it as a
status code, a message and trailing metadata. Codes follow the canonical meanings (AIP-193):
refusals that share a code (capacity, quota and rate limit are all RESOURCE_EXHAUSTED) are told
apart by a `google.rpc.ErrorInfo` reason in the rich status (`grpc-status-details-bin`), and a rate
limit carries a `google.rpc.RetryInfo` plus a plain `retry-after` entry (seconds, as the HTTP
facades' header). A lost response carries no details at all: a real client whose answer never came
back learns nothing from the server. The table is a `vendor_errors.CodeTable`, the
mechanism the HTTP facades' tables use; a vendor's facade may pass its own to `grpc_call.GrpcCaller`
when its cloud maps an error differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from fakeclouds.errors import (
    CloudError,
    Invalid,
    LostResponse,
    NameConflict,
    NoCapacity,
    NotFound,
    QuotaExceeded,
    RateLimit,
    ServerFault,
    Unauthorized,
)
from fakeclouds.vendor_errors import CodeTable, retry_after_header

# The ErrorInfo domain of every status this simulation builds (a real cloud names its own service).
DOMAIN = "fakeclouds.simulated"
STATUS_DETAILS_KEY = "grpc-status-details-bin"  # where gRPC's rich error model travels
RETRY_AFTER_KEY = "retry-after"

Metadata = tuple[tuple[str, str | bytes], ...]


@dataclass(frozen=True)
class GrpcCode:
    """How an engine error class is answered over gRPC."""

    code: grpc.StatusCode
    reason: str  # the ErrorInfo reason: tells refusals with the same code apart


# ServerFault's code also depends on the injected HTTP status (status_of).
STATUSES: CodeTable[GrpcCode] = CodeTable([
    (Unauthorized, GrpcCode(grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")),
    (NotFound, GrpcCode(grpc.StatusCode.NOT_FOUND, "NOT_FOUND")),
    (Invalid, GrpcCode(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")),
    (NameConflict, GrpcCode(grpc.StatusCode.ALREADY_EXISTS, "NAME_CONFLICT")),
    (NoCapacity, GrpcCode(grpc.StatusCode.RESOURCE_EXHAUSTED, "NOT_ENOUGH_CAPACITY")),
    (QuotaExceeded, GrpcCode(grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED")),
    (RateLimit, GrpcCode(grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED")),
    (ServerFault, GrpcCode(grpc.StatusCode.INTERNAL, "SERVER_ERROR")),
    (LostResponse, GrpcCode(grpc.StatusCode.DEADLINE_EXCEEDED, "RESPONSE_LOST")),
], default=GrpcCode(grpc.StatusCode.UNKNOWN, "UNKNOWN"))
# An injected 502/503 is the service being unavailable (clients retry it); a 500 is INTERNAL.
UNAVAILABLE_HTTP = frozenset({502, 503})


@dataclass(frozen=True)
class GrpcStatus:
    code: grpc.StatusCode
    message: str
    trailing_metadata: Metadata


def _packed(message: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def status_of(exc: CloudError, table: CodeTable[GrpcCode] = STATUSES) -> GrpcStatus:
    """The status a gRPC facade answers `exc` with (the table's default for an error it does not name)."""
    found = table(exc)
    code, reason = found.code, found.reason
    if isinstance(exc, LostResponse):  # nothing came back from the server: no details, no reason
        return GrpcStatus(code, exc.message, ())
    if isinstance(exc, ServerFault) and exc.status in UNAVAILABLE_HTTP:
        code = grpc.StatusCode.UNAVAILABLE
    details = [_packed(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN))]
    metadata: list[tuple[str, str | bytes]] = []
    if isinstance(exc, RateLimit):
        delay = duration_pb2.Duration()
        delay.FromTimedelta(timedelta(seconds=exc.retry_after))
        details.append(_packed(error_details_pb2.RetryInfo(retry_delay=delay)))
        metadata.append((RETRY_AFTER_KEY, retry_after_header(exc.retry_after)))
    rich = status_pb2.Status(code=code.value[0], message=exc.message, details=details)
    metadata.append((STATUS_DETAILS_KEY, rich.SerializeToString()))
    return GrpcStatus(code, exc.message, tuple(metadata))

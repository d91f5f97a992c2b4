"""Nebius's gRPC conventions in the simulation: its IAM-token auth, its error details and its
long-running operations.

- Auth: every call but the token exchange carries `authorization: Bearer <IAM token>` that the
  simulated IAM issued (fakeclouds/nebius_auth.py); otherwise UNAUTHENTICATED.
- Errors: Nebius answers a refusal with a canonical status code and, in `grpc-status-details-bin`, a
  `google.rpc.Status` whose details hold a `nebius.common.v1.ServiceError` (`quota_failure`,
  `not_enough_resources`, `too_many_requests`, `resource_already_exists`, ...), which the SDK decodes
  into `RequestError.status.details`. Capacity and quota are both RESOURCE_EXHAUSTED, told apart there.
- Operations: Create/Delete answer a `nebius.common.v1.Operation` with `status` unset while the
  machine is provisioning / deleting; `OperationService/Get` answers it again, finished (`status`
  OK, `finished_at`) once the engine shows the machine running / gone (the SDK's `op.wait()` polls
  until then). A Create that cannot be placed (no capacity: the engine's stock, or an injected
  `capacity` fault) is not refused at once: like Nebius placing a VM after admitting it, its
  operation ends in RESOURCE_EXHAUSTED with a `not_enough_resources` ServiceError and no instance is
  left. Quota and malformed requests stay refused by the call itself. Operations live in
  `engine.facade_state` (persisted) and are finished from the machine's state when read.
- Idempotency: the SDK sends `x-idempotency-key` on every call; a Create whose key was seen answers
  the operation that key made, as Nebius documents for retried mutations.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from fakeclouds.common import run_op
from fakeclouds.engine import Engine
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
from fakeclouds.faults import CallPlan
from fakeclouds.grpc_call import metadata_value, peer_host
from fakeclouds.grpc_errors import RETRY_AFTER_KEY, STATUS_DETAILS_KEY, UNAVAILABLE_HTTP
from fakeclouds.nebius_auth import Iam
from fakeclouds.ratelimit import identity
from fakeclouds.vendor_errors import retry_after_header

T = TypeVar("T")
IDEMPOTENCY_KEY = "x-idempotency-key"
SERVICE_ERROR_URL = "type.googleapis.com/nebius.common.v1.ServiceError"
SERVICE = "compute"  # the ServiceError.service an operation's refusal names

_CODES: list[tuple[type[CloudError], grpc.StatusCode, str]] = [
    (Unauthorized, grpc.StatusCode.UNAUTHENTICATED, ""),
    (NotFound, grpc.StatusCode.NOT_FOUND, "resource_not_found"),
    (Invalid, grpc.StatusCode.INVALID_ARGUMENT, "bad_request"),
    (NameConflict, grpc.StatusCode.ALREADY_EXISTS, "resource_already_exists"),
    (NoCapacity, grpc.StatusCode.RESOURCE_EXHAUSTED, "not_enough_resources"),
    (QuotaExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED, "quota_failure"),
    (RateLimit, grpc.StatusCode.RESOURCE_EXHAUSTED, "too_many_requests"),
    (ServerFault, grpc.StatusCode.INTERNAL, "internal_error"),
    (LostResponse, grpc.StatusCode.DEADLINE_EXCEEDED, ""),
]


def _service_error(service: str, exc: CloudError, detail: str) -> bytes:
    from nebius.api.nebius.common import v1 as common

    err = common.ServiceError(service=service, code=type(exc).__name__)
    if detail == "quota_failure":
        err.quota_failure = common.QuotaFailure(
            violations=[
                common.QuotaFailure.Violation(
                    quota="compute.instance.count",
                    message=f"Quota limit exceeded: {exc.message}",
                    limit="",
                    requested="1",
                )
            ]
        )
    elif detail == "not_enough_resources":
        err.not_enough_resources = common.NotEnoughResources(
            violations=[
                common.NotEnoughResources.Violation(
                    resource_type="compute.instance", message=exc.message, requested="1"
                )
            ]
        )
    elif detail == "too_many_requests":
        err.too_many_requests = common.TooManyRequests(violation=exc.message)
    elif detail == "resource_already_exists":
        err.resource_already_exists = common.ResourceAlreadyExists(resource_id="")
    elif detail == "resource_not_found":
        err.resource_not_found = common.ResourceNotFound(resource_id="")
    elif detail == "bad_request":
        err.bad_request = common.BadRequest(
            violations=[common.BadRequest.Violation(field="", message=exc.message)]
        )
    elif detail == "internal_error":
        err.internal_error = common.InternalError(request_id="", trace_id="")
    return bytes(err.SerializeToString())


def status_of(
    service: str, exc: CloudError
) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str | bytes], ...]]:
    code, detail = next(
        ((c, d) for cls, c, d in _CODES if isinstance(exc, cls)), (grpc.StatusCode.UNKNOWN, "")
    )
    if isinstance(exc, LostResponse):
        return code, exc.message, ()
    if isinstance(exc, ServerFault) and exc.status in UNAVAILABLE_HTTP:
        code = grpc.StatusCode.UNAVAILABLE
    metadata: list[tuple[str, str | bytes]] = []
    rich = status_pb2.Status(code=code.value[0], message=exc.message)
    if detail:
        packed = rich.details.add()
        packed.type_url, packed.value = SERVICE_ERROR_URL, _service_error(service, exc, detail)
    if isinstance(exc, RateLimit):
        delay = duration_pb2.Duration()
        delay.FromTimedelta(timedelta(seconds=exc.retry_after))
        rich.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        metadata.append((RETRY_AFTER_KEY, retry_after_header(exc.retry_after)))
    metadata.append((STATUS_DETAILS_KEY, rich.SerializeToString()))
    return code, exc.message, tuple(metadata)


class NebiusCaller:
    """Runs one call: the IAM token, the facade's rate limits, the shared fault rules, the effect."""

    def __init__(self, engine: Engine, facade: str, iam: Iam) -> None:
        self.engine, self.facade, self.iam = engine, facade, iam
        self.seen: set[str] = set()  # "Service/Method" of every call that reached a handler

    async def abort(self, context: grpc.aio.ServicerContext, service: str, exc: CloudError) -> NoReturn:
        code, message, trailing = status_of(service, exc)
        await context.abort(code, message, trailing_metadata=trailing)
        raise AssertionError("context.abort returned")

    def authenticate(self, context: grpc.aio.ServicerContext) -> str:
        return self.iam.check_bearer(metadata_value(context, "authorization"))

    async def run(
        self,
        context: grpc.aio.ServicerContext,
        method: str,
        effect: Callable[[CallPlan], Any],
        *,
        op: str,
        parse: Callable[[], Any] | None = None,
        region: str | None = None,
        auth: bool = True,
        refused: Callable[[CloudError], Any] | None = None,
    ) -> Any:
        """`method` is "nebius.x.v1.Service/Method" (recorded); `op` the fault rules' name for it.
        `refused`: the answer to a refusal that Nebius reports later, in an operation (None: the
        call itself is refused)."""
        self.seen.add(method)
        service = method.partition("/")[0]
        try:
            if auth:
                self.authenticate(context)
            if parse is not None:
                parse()  # a malformed request is refused before it draws a fault
            limits = self.engine.facade(self.facade).rate_limits
            if limits:
                who = identity(metadata_value(context, "authorization"), peer_host(context))
                self.engine.limiter.check(self.facade, limits, who, op)
            return await run_op(self.engine, self.facade, op, effect, region)
        except CloudError as exc:
            answer = refused(exc) if refused is not None else None
            if answer is not None:
                return answer
            await self.abort(context, service, exc)


def timestamp(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


class Operations:
    """The facade's operations and idempotency keys, kept in `engine.facade_state[facade]`."""

    def __init__(self, engine: Engine, facade: str) -> None:
        self.engine, self.facade = engine, facade

    @property
    def _state(self) -> dict[str, Any]:
        state = self.engine.facade_state.setdefault(self.facade, {})
        state.setdefault("operations", {})
        state.setdefault("idempotency", {})
        return state

    def by_key(self, key: str | None) -> dict[str, Any] | None:
        op_id = self._state["idempotency"].get(key) if key else None
        return self._state["operations"].get(op_id) if op_id else None

    def record(
        self, kind: str, resource_id: str, account: str, key: str | None, refusal: CloudError | None = None
    ) -> dict[str, Any]:
        """A new operation on `resource_id`. With `refusal`, one that will end in that error (its key
        is not kept: a retry is a new attempt, as nothing was made)."""
        import base64
        import uuid

        failed = None
        if refusal is not None:
            code, message, _ = status_of(SERVICE, refusal)
            detail = next((d for cls, _c, d in _CODES if isinstance(refusal, cls)), "")
            packed = _service_error(SERVICE, refusal, detail) if detail else b""
            failed = {"code": code.value[0], "message": message,
                      "service_error": base64.b64encode(packed).decode()}
        op = {
            "id": f"computeoperation-e00{uuid.uuid4().hex[:20]}",
            "kind": kind,
            "resource_id": resource_id,
            "created_at": time.time(),
            "created_by": account,
            "finished_at": None,
            "error": None,
            "refusal": failed,
        }
        self._state["operations"][op["id"]] = op
        if key and refusal is None:
            self._state["idempotency"][key] = op["id"]
        self.engine.save()
        return op

    def get(self, op_id: str) -> dict[str, Any]:
        op = self._state["operations"].get(op_id)
        if op is None:
            raise NotFound(f"operation {op_id} not found")
        if op["finished_at"] is None:
            self._settle(op)
        return op

    def _settle(self, op: dict[str, Any]) -> None:
        """An operation is done once its machine reached where the call was taking it."""
        m = self.engine.machines.get(op["resource_id"])
        gone = m is None or m.status == "terminated"
        if op.get("refusal"):  # never placed: it ends with its refusal when first read
            op["finished_at"] = time.time()
        elif op["kind"] == "delete" and gone:
            op["finished_at"] = time.time()
        elif op["kind"] == "create" and (m is None or m.status in ("running", "error", "terminated")):
            op["finished_at"] = time.time()
            if m is None or m.status != "running":
                op["error"] = "the instance failed to start"
        if op["finished_at"] is not None:
            self.engine.save()

    def message(self, op: dict[str, Any], description: str) -> Any:
        import base64

        from nebius.api.google.protobuf import Any as AnyMessage
        from nebius.api.google.rpc import Status
        from nebius.api.nebius.common import v1 as common

        status = None
        refusal = op.get("refusal")
        if op["finished_at"] is not None and refusal:
            packed = base64.b64decode(refusal["service_error"])
            details = [AnyMessage(type_url=SERVICE_ERROR_URL, value=packed)] if packed else []
            status = Status(code=refusal["code"], message=refusal["message"], details=details)
        elif op["finished_at"] is not None:
            status = Status(code=13, message=op["error"]) if op["error"] else Status(code=0, message="")
        return common.Operation(
            id=op["id"],
            description=description,
            created_at=timestamp(op["created_at"]),
            created_by=op["created_by"],
            resource_id=op["resource_id"],
            status=status,
            finished_at=timestamp(op["finished_at"]) if op["finished_at"] is not None else None,
        )

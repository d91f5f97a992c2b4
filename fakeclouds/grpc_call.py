"""Running a gRPC facade's call: the gRPC twin of `common.make_call`.

Same order as the HTTP facades: the bearer token (`authorization` metadata), the facade's documented
rate limits, then the fault rules and the effect through the very `common.run_op` the HTTP facades
use, so a rule added with `POST /_fake/faults` hits an HTTP call or a gRPC call alike. A refusal
becomes a status through `grpc_errors` and ends the call with `context.abort`.

    caller = GrpcCaller(engine, NAME, token)

    async def get(request, context):
        return await caller.run(context, "get", lambda _: as_message(engine.get(NAME, request.id)))
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import grpc

from fakeclouds.common import run_op
from fakeclouds.engine import Engine
from fakeclouds.errors import CloudError, Unauthorized
from fakeclouds.faults import CallPlan
from fakeclouds.grpc_errors import STATUSES, GrpcCode, status_of
from fakeclouds.ratelimit import identity
from fakeclouds.vendor_errors import CodeTable

T = TypeVar("T")


def metadata_value(context: grpc.aio.ServicerContext, key: str) -> str | None:
    """One invocation metadata entry (keys arrive lower-case), or None."""
    for k, v in context.invocation_metadata() or ():
        if k == key:
            return v if isinstance(v, str) else v.decode(errors="replace")
    return None


def peer_host(context: grpc.aio.ServicerContext) -> str | None:
    """The caller's address from `context.peer()` ("ipv4:127.0.0.1:5555", "ipv6:[::1]:5555")."""
    peer = context.peer() or ""
    _, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0] if rest.count(":") else rest
    return host.strip("[]") or None


def check_bearer(context: grpc.aio.ServicerContext, token: str) -> None:
    scheme, _, value = (metadata_value(context, "authorization") or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise Unauthorized("missing or invalid API token")


class GrpcCaller:
    """One facade's gRPC call runner (its token, its rate limits, the shared faults)."""

    def __init__(self, engine: Engine, facade: str, token: str,
                 statuses: CodeTable[GrpcCode] = STATUSES) -> None:
        self.engine, self.facade, self.token, self.statuses = engine, facade, token, statuses

    async def abort(self, context: grpc.aio.ServicerContext, exc: CloudError) -> NoReturn:
        status = status_of(exc, self.statuses)
        await context.abort(status.code, status.message, trailing_metadata=status.trailing_metadata)
        raise AssertionError("context.abort returned")  # it raises; this keeps NoReturn honest

    async def parse(self, context: grpc.aio.ServicerContext, parse: Callable[[], T]) -> T:
        """The token, then the request's fields (`parse` raises Invalid): like the HTTP facades, a
        malformed request is refused before it draws a fault."""
        try:
            check_bearer(context, self.token)
            return parse()
        except CloudError as exc:
            await self.abort(context, exc)

    async def run(self, context: grpc.aio.ServicerContext, op: str, effect: Callable[[CallPlan], Any], *,
                  region: str | None = None) -> Any:
        """Auth, rate limits, faults, the effect (its result is the response message)."""
        try:
            check_bearer(context, self.token)
            self._check_rate(context, op)
            return await run_op(self.engine, self.facade, op, effect, region)
        except CloudError as exc:
            await self.abort(context, exc)

    def _check_rate(self, context: grpc.aio.ServicerContext, op: str) -> None:
        limits = self.engine.facade(self.facade).rate_limits
        if limits:
            who = identity(metadata_value(context, "authorization"), peer_host(context))
            self.engine.limiter.check(self.facade, limits, who, op)

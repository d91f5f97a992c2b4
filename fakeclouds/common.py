"""What every facade shares: bearer auth, running an op through the rate limits and fault rules.
Bodies are read by `fakeclouds/bodies.py`, errors rendered by `fakeclouds/vendor_errors.py`."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from fakeclouds.bodies import json_body
from fakeclouds.engine import Engine
from fakeclouds.errors import CloudError, Unauthorized
from fakeclouds.faults import CallPlan
from fakeclouds.ratelimit import identity

M = TypeVar("M", bound=BaseModel)


def check_bearer(request: Request, token: str) -> None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value or value.strip() != token:
        raise Unauthorized("missing or invalid API token")


async def authorized_body(request: Request, token: str, model: type[M]) -> M:
    """Check the bearer token, then parse the JSON body into `model` (CloudError on either)."""
    check_bearer(request, token)
    return await json_body(request, model)


Call = Callable[..., Awaitable[Response]]


def make_call(engine: Engine, facade: str, token: str,
              error_response: Callable[[CloudError], Response] | None = None) -> Call:
    """A facade's request runner: auth, rate limits, faults, the effect. Its CloudErrors reach the
    router's `vendor_errors.vendor_router` guard; a facade on a plain APIRouter passes its own
    `error_response` instead."""

    async def call(request: Request, op: str, effect: Callable[[CallPlan], Any], *, status: int = 200,
                   region: str | None = None) -> Response:
        try:
            check_bearer(request, token)
            check_rate(engine, facade, request, op)
            body = await run_op(engine, facade, op, effect, region)
        except CloudError as exc:
            if error_response is None:
                raise
            return error_response(exc)
        return JSONResponse(body, status_code=status)

    return call


def check_rate(engine: Engine, facade: str, request: Request, op: str) -> None:
    """Count this call against the facade's documented limits (RateLimit when over one)."""
    limits = engine.facade(facade).rate_limits
    if limits:
        who = identity(request.headers.get("authorization"), request.client.host if request.client else None)
        engine.limiter.check(facade, limits, who, op)


async def run_op(engine: Engine, facade: str, op: str, effect: Callable[[CallPlan], Any],
                 region: str | None = None) -> Any:
    """Draw this call's faults, apply the 'before' ones, do the effect, then the 'after' ones."""
    plan = engine.faults.take(facade, op, region)
    await plan.before()
    result = effect(plan)
    if inspect.isawaitable(result):
        result = await result
    await plan.after()
    return result


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")

"""What every facade shares: bearer auth, JSON bodies, running an op through the fault rules."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from fakeclouds.engine import Engine
from fakeclouds.errors import Invalid, Unauthorized
from fakeclouds.faults import CallPlan

M = TypeVar("M", bound=BaseModel)


def check_bearer(request: Request, token: str) -> None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value or value.strip() != token:
        raise Unauthorized("missing or invalid API token")


async def parse_body(request: Request, model: type[M]) -> M:
    try:
        raw = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Invalid("request body must be JSON") from exc
    if not isinstance(raw, dict):
        raise Invalid("request body must be a JSON object")
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise Invalid(f"{where}: {first['msg']}") from exc


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


def retry_after_header(seconds: float) -> str:
    # Fractional values are a simulation extension so tests stay fast; real clouds send integers.
    return f"{seconds:g}"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")

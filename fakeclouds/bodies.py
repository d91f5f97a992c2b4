"""The one way a facade reads a request body: JSON (or a form) validated into the facade's own
pydantic model. A bad body raises the engine's `BadBody` (an `Invalid`) with the reason (the field
and what is wrong with it; pydantic's whole list for vendors that answer every violation), which
the facade's router renders in its vendor's error shape (`fakeclouds/vendor_errors.py`): no
handler parses inside its own try/except.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import Request
from pydantic import BaseModel, ValidationError

from fakeclouds.errors import BadBody

M = TypeVar("M", bound=BaseModel)


async def json_value(request: Request, model: type | None = None) -> Any:
    """The body parsed as JSON, whatever its type (BadBody when it is not JSON; `model`: what it
    was to be read as, carried by the error)."""
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadBody("request body must be JSON", "json", model=model) from exc


async def json_object(request: Request, model: type | None = None) -> dict[str, Any]:
    """The body as a JSON object (BadBody when it is not JSON, or not an object)."""
    raw = await json_value(request, model)
    if not isinstance(raw, dict):
        raise BadBody("request body must be a JSON object", "object", model=model)
    return raw


def validated(raw: Any, model: type[M]) -> M:
    """`raw` validated into `model`; BadBody naming the first field at fault."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        problems = [dict(e) for e in exc.errors(include_input=False, include_url=False)]
        raise BadBody(reason(exc), "model", problems, model) from exc


def reason(exc: ValidationError) -> str:
    """`where: what` for the first problem pydantic found (`body` when it is the whole body)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return f"{where}: {first['msg']}"


async def json_body(request: Request, model: type[M]) -> M:
    """The body, a JSON object, validated into `model` (BadBody on either)."""
    return validated(await json_object(request, model), model)


async def form_fields(request: Request) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body's fields, as OAuth2 token endpoints take them:
    the first of a repeated name wins, blank ones are left out (undecodable bytes replaced)."""
    fields: dict[str, str] = {}
    for name, value in parse_qsl((await request.body()).decode("utf-8", "replace")):
        fields.setdefault(name, value)
    return fields


async def optional_object(request: Request) -> dict[str, Any] | None:
    """A body that may be left out (None when empty), else a JSON object (BadBody otherwise)."""
    if not (await request.body()).strip():
        return None
    return await json_object(request)

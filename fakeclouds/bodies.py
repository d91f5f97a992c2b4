"""The one way a facade reads a request body: JSON (or a form) validated into the facade's own
pydantic model. A bad body raises the engine's `Invalid` with the reason (the field and what is
wrong with it), which the facade's router renders in its vendor's error shape
(`fakeclouds/vendor_errors.py`): no handler parses inside its own try/except.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from fastapi import Request
from pydantic import BaseModel, ValidationError

from fakeclouds.errors import Invalid

M = TypeVar("M", bound=BaseModel)


async def json_value(request: Request) -> Any:
    """The body parsed as JSON, whatever its type (Invalid when it is not JSON)."""
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Invalid("request body must be JSON") from exc


async def json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object (Invalid when it is not JSON, or not an object)."""
    raw = await json_value(request)
    if not isinstance(raw, dict):
        raise Invalid("request body must be a JSON object")
    return raw


def validated(raw: Any, model: type[M]) -> M:
    """`raw` validated into `model`; Invalid naming the first field at fault."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise Invalid(reason(exc)) from exc


def reason(exc: ValidationError) -> str:
    """`where: what` for the first problem pydantic found (`body` when it is the whole body)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    return f"{where}: {first['msg']}"


async def json_body(request: Request, model: type[M]) -> M:
    """The body, a JSON object, validated into `model` (Invalid on either)."""
    return validated(await json_object(request), model)


async def form_fields(request: Request) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body's fields (blank values kept, the last one of a
    repeated name wins), as the AWS Query API and OAuth2 token endpoints post them."""
    body = await request.body()
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))

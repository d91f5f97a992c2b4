"""Query parameters a route does not declare are refused (422 naming them), never silently ignored:
`GET /offers?clouds=verda` (a typo of `cloud`) answering every cloud's offers looks like an answer to
the question asked. `known_query` is a dependency on every /api router (api/app.py); it reads the
matched route's own declared query parameters (its dependencies' too: pagination's `limit` and
`cursor` come from PageQuery), so a route that adds one is covered without a list kept here.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel


def _query_names(fields: list[Any]) -> set[str]:
    names: set[str] = set()
    for field in fields:
        annotation = getattr(field.field_info, "annotation", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):  # a query model: its fields
            names |= {info.alias or name for name, info in annotation.model_fields.items()}
        else:
            names.add(field.alias)
    return names


def declared(dependant: Dependant) -> frozenset[str]:
    """The query parameter names `dependant` (a route's) and its sub-dependencies declare (a walk
    of a few objects: not worth a cache keyed by objects that come and go with apps)."""
    names: set[str] = set()
    stack = [dependant]
    while stack:
        current = stack.pop()
        names |= _query_names(current.query_params)
        stack.extend(current.dependencies)
    return frozenset(names)


async def known_query(request: Request) -> None:
    """422 naming every query parameter the matched route does not declare (and what it takes)."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None or not request.query_params:
        return
    takes = declared(dependant)
    unknown = sorted({name for name in request.query_params if name not in takes})
    if unknown:
        accepted = ", ".join(sorted(takes)) if takes else "none"
        raise RequestValidationError([
            {"loc": ("query", name), "type": "unknown_parameter",
             "msg": f"not a parameter of this route (it takes: {accepted})"} for name in unknown])

"""A route's answer serialized where the route runs.

A sync route's return value is otherwise validated against its `response_model` once more (a second
trip to the threadpool) and then serialized on the event loop, where a list of 200 rows holds every
other request up for a millisecond or two. The busiest lists (the console polls them) return their
model as JSON bytes instead; the `response_model` they declare still describes them in OpenAPI, and
the model was validated when it was built."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Response
from pydantic import BaseModel, TypeAdapter

from api.pagination import Page

T = TypeVar("T")

JSON = "application/json"


def json_response(model: BaseModel) -> Response:
    """`model` as FastAPI would have sent it for a `response_model` of its own type."""
    return Response(model.model_dump_json(by_alias=True), media_type=JSON)


def json_page(adapter: TypeAdapter[Page[T]], items: list[dict[str, Any]],
              next_cursor: str | None) -> Response:
    """A page built from its items' plain fields, validated and serialized by one call each into
    pydantic's core: the same JSON as the page of models, without a model built per row in Python."""
    page = adapter.validate_python({"items": items, "next_cursor": next_cursor})
    return Response(adapter.dump_json(page, by_alias=True), media_type=JSON)

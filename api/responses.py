"""A route's answer serialized where the route runs.

A sync route's return value is otherwise validated against its `response_model` once more (a second
trip to the threadpool) and then serialized on the event loop, where a list of 200 rows holds every
other request up for a millisecond or two. The busiest lists (the console polls them) return their
model as JSON bytes instead; the `response_model` they declare still describes them in OpenAPI, and
the model was validated when it was built."""

from __future__ import annotations

from fastapi import Response
from pydantic import BaseModel

JSON = "application/json"


def json_response(model: BaseModel) -> Response:
    """`model` as FastAPI would have sent it for a `response_model` of its own type."""
    return Response(model.model_dump_json(by_alias=True), media_type=JSON)

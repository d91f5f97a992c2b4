"""JSON's integers as JSON Schema counts them, for strict models.

A strict model (api/fields.py `Strict`, a policy card) takes for each field only values of JSON's own
type for it: no `false` for a number, no `"5"`. Pydantic's strict `int` refuses `58.0` as well — but
the schema the API publishes says `integer`, and JSON Schema (2020-12, as OpenAPI 3.1 uses it) counts
any number with a zero fractional part as one: `58.0` is a valid body for that schema, and a client
that computed its count as a float (Python's json writes `58.0`) was refused with "Input should be a
valid integer" (`make fuzz` sent such bodies to jobs and pools). `IntegralFloats` takes such a number
as the integer it is, before the strict checks run; `58.5`, `true` and `"58"` are still refused."""

from __future__ import annotations

import functools
import types
import typing
from typing import Any

from pydantic import BaseModel, model_validator


class IntegralFloats(BaseModel):
    """A base for strict models: a float with no fractional part, in a field of type `int` (or a
    list of them, optional or not), is read as that int."""

    @model_validator(mode="before")
    @classmethod
    def _integral_floats(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        keys = integer_keys(cls)
        if not keys.intersection(data):
            return data
        return {k: _integral(v) if k in keys else v for k, v in data.items()}


@functools.cache  # a model's fields do not change once it is built
def integer_keys(model: type[BaseModel]) -> frozenset[str]:
    """The keys of `model`'s fields that hold an int or a list of ints."""
    return frozenset(key for name, f in model.model_fields.items() if _holds_int(f.annotation)
                     for key in (name, f.alias) if key)


def _holds_int(annotation: Any) -> bool:
    if annotation is int:  # not bool (a subclass): `true` stays refused
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _holds_int(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list):
        return any(_holds_int(a) for a in typing.get_args(annotation))
    return False


def _integral(value: Any) -> Any:
    if type(value) is float and value.is_integer():  # not NaN, not ±inf
        return int(value)
    if type(value) is list:
        return [_integral(v) for v in value]
    return value

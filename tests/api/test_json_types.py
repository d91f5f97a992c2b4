"""A request body's numbers and booleans are JSON's own: pydantic's lax mode would take `false` or
`"5"` for a number and `1` or `"yes"` for a boolean. `make fuzz` (schemathesis' ST201) found
`PUT /limits {"max_gpus": false}` answered 200 with a limit of 0 — every job of the project held.
And an integer is JSON Schema's: `2.0` is 2, as the published schema says (messages/json_numbers.py)."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ValidationError

import api.app  # noqa: F401 — every router, so every body model, is defined
from api.fields import Strict
from messages import policy
from tests.api.conftest import connect_fake


def bodies() -> Iterator[type[BaseModel]]:
    """Every request body's model, and a policy card's parts (its When and Then)."""
    def below(cls: type[BaseModel]) -> Iterator[type[BaseModel]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)
    yield from below(Strict)
    yield from below(policy._Strict)


def scalar_types(annotation: Any) -> set[Any]:
    """The scalar types a field holds: through Optional, Annotated and lists."""
    origin = typing.get_origin(annotation)
    if origin is None:
        return {annotation}
    if origin is typing.Literal:
        return set()
    return {t for arg in typing.get_args(annotation) if arg is not types.NoneType
            for t in scalar_types(arg)}


def typed_fields() -> list[tuple[type[BaseModel], str, Any]]:
    """(body, field, a value of another JSON type that lax mode would coerce) for every number and
    boolean field of every request body."""
    found = []
    for body in bodies():
        for name, field in body.model_fields.items():
            kinds = scalar_types(field.annotation)
            if bool in kinds:
                found.append((body, name, 1))
            elif kinds & {int, float}:
                found.append((body, name, False))
    return found


FIELDS = typed_fields()


def test_the_bodies_have_numbers_and_booleans_to_check() -> None:
    names = {f"{body.__name__}.{name}" for body, name, _ in FIELDS}
    assert {"LimitsIn.max_gpus", "LimitsIn.max_usd_per_hour", "InstanceCreate.gpu_count",
            "InstanceCreate.spot", "JobCreate.priority", "IdlePolicyIn.enabled", "ScalePoolThen.to",
            "PolicyIn.enabled", "PoolUtilisationWhen.percent"} <= names
    assert len(FIELDS) >= 30


@pytest.mark.parametrize(("body", "name", "wrong"), FIELDS, ids=[f"{b.__name__}.{n}" for b, n, _ in FIELDS])
def test_a_number_or_boolean_of_another_json_type_is_refused(body: type[BaseModel], name: str,
                                                              wrong: Any) -> None:
    field = body.model_fields[name]
    value = [wrong] if typing.get_origin(field.annotation) is list else wrong
    with pytest.raises(ValidationError) as caught:
        body.model_validate({name: value})
    assert any(e["loc"][0] == name and e["type"] in ("int_type", "float_type", "bool_type")
               for e in caught.value.errors()), caught.value.errors()


INTEGERS = [(body, name) for body, name, wrong in FIELDS if wrong is False
            and int in scalar_types(body.model_fields[name].annotation)]


def test_the_bodies_have_integers_to_check() -> None:
    names = {f"{body.__name__}.{name}" for body, name in INTEGERS}
    assert {"LimitsIn.max_gpus", "InstanceCreate.gpu_count", "InstanceCreate.ports", "JobCreate.priority",
            "JobCreate.gpu_count", "PoolIn.size", "ScalePoolThen.to", "QueueWaitWhen.minutes"} <= names
    assert "PoolUtilisationWhen.percent" not in names  # a float field: its own checks


@pytest.mark.parametrize(("body", "name"), INTEGERS, ids=[f"{b.__name__}.{n}" for b, n in INTEGERS])
def test_an_integer_written_with_a_zero_fraction_is_that_integer_and_a_fraction_is_refused(
        body: type[BaseModel], name: str) -> None:
    """JSON Schema's `integer` is any number with a zero fractional part: `1.0` passes the published
    schema, so the body must take it (as 1); `1.5` fails both."""
    listed = typing.get_origin(body.model_fields[name].annotation) is list

    def errors_at(value: float) -> list[dict[str, Any]]:
        try:
            body.model_validate({name: [value] if listed else value})
        except ValidationError as e:  # the body's other required fields are missing: not asked here
            return [err for err in e.errors() if err["loc"][0] == name]
        return []

    assert errors_at(1.0) == []
    assert [err["type"] for err in errors_at(1.5)] == ["int_type"]


async def test_a_job_and_a_pool_card_with_integral_floats_are_stored_as_integers(
        client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    r = await client.post("/api/compute/jobs", json={"name": "j", "command": "true", "requested_by": "t",
                                                     "gpu": "A10", "type": "eval", "gpu_count": 2.0,
                                                     "priority": -5.0})
    assert r.status_code == 202, r.text
    job = (await client.get(f"/api/compute/jobs/{r.json()['id']}")).json()
    assert (job["gpu_count"], job["priority"]) == (2, -5)
    assert isinstance(job["gpu_count"], int) and isinstance(job["priority"], int)
    r = await client.post("/api/compute/jobs", json={"name": "j", "command": "true", "requested_by": "t",
                                                     "gpu": "A10", "type": "eval", "gpu_count": 2.5})
    assert r.status_code == 422 and r.json()["errors"][0]["loc"] == ["body", "gpu_count"], r.text
    card = {"name": "grow", "when": {"kind": "cron", "expression": "0 * * * *"},
            "then": {"kind": "scale_pool", "pool": "p", "to": 3.0}}
    r = await client.post("/api/compute/policies", json=card)
    assert r.status_code in (200, 201), r.text
    assert r.json()["then"]["to"] == 3 and isinstance(r.json()["then"]["to"], int)


async def test_a_limit_given_as_false_is_a_422_and_the_stored_limit_stays(client: httpx.AsyncClient) -> None:
    assert (await client.put("/api/compute/limits", json={"max_gpus": 4})).status_code == 200
    for wrong in ({"max_gpus": False}, {"max_gpus": "2"}, {"max_usd_per_hour": True},
                  {"max_usd_per_hour": "5"}):
        r = await client.put("/api/compute/limits", json=wrong)
        assert r.status_code == 422, (wrong, r.text)
        assert next(iter(wrong)) in r.text
    assert (await client.get("/api/compute/limits")).json()["project"] == {"max_gpus": 4,
                                                                          "max_usd_per_hour": None}
    # A JSON integer is a number: an hourly limit of 5 is $5/h.
    r = await client.put("/api/compute/limits", json={"max_gpus": 4, "max_usd_per_hour": 5})
    assert r.status_code == 200
    assert r.json() == {"max_gpus": 4, "max_usd_per_hour": 5.0, "over_on_their_own": 0}


async def test_enums_and_date_times_still_come_as_json_text(client: httpx.AsyncClient) -> None:
    """What JSON carries as a string (a workload's kind and status, its ETA) is taken from the string."""
    report = {"name": "nightly eval", "kind": "eval", "status": "running", "gpu_count": 2}
    eta = "2999-01-01T00:00:00Z"
    r = await client.put("/api/compute/workloads/nightly-eval", json={**report, "eta_at": eta})
    assert r.status_code == 201, r.text
    assert r.json()["kind"] == "eval" and r.json()["eta_at"].startswith("2999-01-01T00:00:00")
    r = await client.put("/api/compute/workloads/nightly-eval", json={**report, "gpu_count": True})
    assert r.status_code == 422 and "gpu_count" in r.text

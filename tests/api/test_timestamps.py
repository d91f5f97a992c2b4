"""Every timestamp the API returns carries its zone (the schema says `date-time`, RFC 3339: an
offset is part of it), though SQLite hands every stored one back naive: api/fields.py `Timestamp`.
And a reported workload's `eta_at` is a date-time string that is not in the past, else a 422."""

from __future__ import annotations

import importlib
import pkgutil
import re
import types
import typing
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncssh
import httpx
import pytest
import sqlalchemy as sa
from fastapi.routing import APIRoute
from pydantic import AfterValidator, BaseModel
from sqlmodel import Session

from api import routers as api_routers
from api.deps import AppDeps
from api.fields import Timestamp, _utc
from store import connections, fleets, ids
from store.secrets import SecretBox
from tests.api.conftest import TOKEN, FakeWorkflows, app_serving, connect_fake

HOOK = "https://hooks.example/gpuprov"
# A string that starts like an ISO 8601 date and time: a timestamp as the API writes it.
STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")
ZONED = re.compile(r"(Z|[+-]\d{2}:\d{2})$")


@pytest.fixture
async def api(engine: sa.Engine, box: SecretBox,
              workflows: FakeWorkflows) -> AsyncIterator[httpx.AsyncClient]:
    deps = AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001", workflows=workflows,
                   webhook_allowlist=(HOOK,))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app_serving(deps)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def stamps(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(where, text) of every timestamp string anywhere in a JSON answer."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from stamps(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from stamps(v, f"{path}[{i}]")
    elif isinstance(value, str) and STAMP.match(value):
        yield path, value


async def test_every_list_route_writes_its_timestamps_with_their_zone(
        api: httpx.AsyncClient, engine: sa.Engine, box: SecretBox) -> None:
    conn = await connect_fake(api)
    public = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    r = await api.post("/api/compute/instances", json={"gpu": "H100", "ssh_public_keys": [public]})
    assert r.status_code == 202, r.text
    r = await api.post("/api/compute/jobs", json={"name": "j", "command": "true", "requested_by": "tests",
                                                  "gpu": "A10", "type": "sft"})
    assert r.status_code == 202, r.text
    r = await api.put("/api/compute/pools/web",
                      json={"cloud": "fakecloud", "gpu": "H100", "max": 2, "size": 1})
    assert r.status_code == 202, r.text
    r = await api.post("/api/compute/policies", json={
        "name": "spend alarm", "when": {"kind": "spend", "window": "1h", "usd": 5},
        "then": {"kind": "webhook", "url": f"{HOOK}/alarm"}, "cooldown_minutes": 10})
    assert r.status_code == 201, r.text
    assert (await api.post("/api/compute/queue/pause", json={"type": "grpo"})).status_code == 200
    key = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    with Session(engine) as s:  # stored as the API stores one (its address checks are not this test's)
        fleets.save_fleet(s, box, fleet_id=ids.new_id(), project="default", name="rack", user="root",
                          port=22, hosts=["10.0.0.5"], private_key=key, bastion=None, new_host_id=ids.new_id)
        # a health check recorded (naive, as SQLite gives it back)
        connections.record_health(s, conn["id"], status="healthy", reason=None,
                                  checked_at=datetime.now(UTC).replace(tzinfo=None), latency_ms=5)
        s.commit()

    seen: dict[str, int] = {}
    for route in ("instances", "jobs", "fleets", "pools", "policies", "connections", "providers", "workloads",
                  "queue"):
        r = await api.get(f"/api/compute/{route}")
        assert r.status_code == 200, (route, r.text)
        found = list(stamps(r.json()))
        seen[route] = len(found)
        zoneless = [(where, text) for where, text in found if not ZONED.search(text)]
        assert zoneless == [], route
        for _, text in found:
            assert datetime.fromisoformat(text.replace("Z", "+00:00")).utcoffset() == timedelta(0)
    # Each route had something dated to write: the walk checked real answers, not empty lists.
    assert all(seen.values()), seen


def _is_utc(meta: Any) -> bool:
    return isinstance(meta, AfterValidator) and meta.func is _utc


def _dated(tp: Any, guarded: bool = False) -> Iterator[bool]:
    """For every datetime inside the annotation `tp`: whether it is a `Timestamp` (zone added)."""
    if typing.get_origin(tp) is typing.Annotated:
        inner, *meta = typing.get_args(tp)
        yield from _dated(inner, guarded or any(_is_utc(m) for m in meta))
    elif tp is datetime:
        yield guarded
    elif isinstance(tp, type) and issubclass(tp, BaseModel):
        yield from _fields_dated(tp)
    else:
        for arg in typing.get_args(tp):
            yield from _dated(arg, guarded)


_walked: set[type] = set()


def _fields_dated(model: type[BaseModel]) -> Iterator[bool]:
    if model in _walked:
        return
    _walked.add(model)
    for name, f in model.model_fields.items():
        guarded = any(_is_utc(m) for m in f.metadata)
        for ok in _dated(f.annotation, guarded):
            if not ok:
                raise AssertionError(f"{model.__name__}.{name} is a bare datetime: make it "
                                     "api.fields.Timestamp")
            yield ok


def test_every_response_models_datetime_is_a_timestamp() -> None:
    """A guard for routes to come: no response model of any router holds a zoneless datetime."""
    checked = 0
    for info in pkgutil.iter_modules(api_routers.__path__):
        router = getattr(importlib.import_module(f"api.routers.{info.name}"), "router", None)
        for route in getattr(router, "routes", []):
            if isinstance(route, APIRoute) and route.response_model is not None:
                checked += sum(1 for _ in _dated(route.response_model))
    assert checked >= 20  # instances, jobs, fleets, pools, policies, connections... all walked
    assert list(_dated(Timestamp | None)) == [True] and list(_dated(datetime | types.NoneType)) == [False]


REPORT = {"name": "run", "kind": "sft", "status": "running"}


@pytest.mark.parametrize("eta", [0, 1700000000, "0", "1700000000", "2026-12-01", "tomorrow", True,
                                 "2020-01-01T00:00:00Z"])
async def test_a_nonsensical_eta_is_422(api: httpx.AsyncClient, eta: Any) -> None:
    r = await api.put("/api/compute/workloads/run-1", json={**REPORT, "eta_at": eta})
    assert r.status_code == 422 and "eta_at" in r.text, (eta, r.text)
    assert (await api.get("/api/compute/workloads")).json()["counts"]["ALL"] == 0


async def test_an_eta_ahead_is_kept_with_its_zone(api: httpx.AsyncClient) -> None:
    ahead = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    for sent in (ahead.isoformat(), ahead.isoformat().replace("+00:00", "Z"),
                 ahead.replace(tzinfo=None).isoformat()):  # zoneless: taken as UTC
        r = await api.put("/api/compute/workloads/run-1", json={**REPORT, "eta_at": sent})
        assert r.status_code in (200, 201), r.text
        assert datetime.fromisoformat(r.json()["eta_at"]) == ahead, sent

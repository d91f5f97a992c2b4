"""Policies and the daily budget through the API (FakeWorkflows' FAKE Schedules in place of
Temporal's): the card saved and read back, its Schedule's cadence and pause following the card,
bad cards refused with the field named, webhooks only under the allowlist."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from api.deps import AppDeps
from messages import workflows as wf
from messages.policy import PolicyInput
from store import policies, spend
from store.models import Policy, utcnow
from store.secrets import SecretBox
from tests.api.conftest import TOKEN, FakeWorkflows, all_items, app_serving, make_project

HOOK = "https://hooks.example/gpuprov"
SPEND_TO_WEBHOOK: dict[str, Any] = {
    "name": "spend alarm", "when": {"kind": "spend", "window": "1h", "usd": 5},
    "then": {"kind": "webhook", "url": HOOK + "/alarm?token=s3cr3t-hook-token"},
    "cooldown_minutes": 10, "max_spend_per_hour": 20}


@pytest.fixture
async def api(engine: sa.Engine, box: SecretBox,
              workflows: FakeWorkflows) -> AsyncIterator[httpx.AsyncClient]:
    deps = AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001", workflows=workflows,
                   webhook_allowlist=(HOOK,), policy_interval_s=45)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app_serving(deps)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


async def test_a_policy_is_saved_with_its_schedule_paused_when_disabled_and_deleted_with_it(
        api: httpx.AsyncClient, workflows: FakeWorkflows, engine: sa.Engine, box: SecretBox) -> None:
    r = await api.post("/api/compute/policies", json=SPEND_TO_WEBHOOK)
    assert r.status_code == 201, r.text
    card = r.json()
    pid, sid = card["id"], card["schedule_id"]
    assert sid == f"gpuprov-policy-default-{pid}"
    assert card["when"] == {"kind": "spend", "window": "1h", "usd": 5.0}
    # The hook's query (its token) is sealed at rest and never answered.
    assert card["then"] == {"kind": "webhook", "url": HOOK + "/alarm?…"} and "s3cr3t" not in r.text
    with Session(engine) as s:
        row = s.get(Policy, pid)
        assert row is not None and "s3cr3t" not in json.dumps(row.spec)
        assert row.webhook_secret is not None and b"s3cr3t" not in row.webhook_secret
    assert (card["cooldown_minutes"], card["max_spend_per_hour"]) == (10, 20.0)
    assert (card["trigger_count"], card["triggered"]) == (0, "Triggered 0 times · last: never")
    sched = workflows.schedules[sid]
    assert (sched.workflow, sched.every_s, sched.cron, sched.paused) == (wf.POLICY.name, 45, None, False)
    assert sched.arg == PolicyInput(policy_id=pid, project="default")

    # Edit to a cron policy, disabled: the Schedule runs on the cron expression, paused.
    edited = {**SPEND_TO_WEBHOOK, "enabled": False, "then": card["then"],
              "when": {"kind": "cron", "expression": "*/15  * * * MON-FRI"}}
    r = await api.put(f"/api/compute/policies/{pid}", json=edited)
    assert r.status_code == 200, r.text
    assert r.json()["enabled"] is False
    sched = workflows.schedules[sid]
    assert (sched.cron, sched.every_s, sched.paused) == ("*/15 * * * mon-fri", None, True)
    assert (await api.get(f"/api/compute/policies/{pid}")).json()["when"]["kind"] == "cron"
    # The URL sent back as shown kept the saved query; a new URL replaces it.
    with Session(engine) as s:
        row = s.get(Policy, pid)
        assert row is not None and row.webhook_secret is not None
        assert policies.webhook_url(box, row, HOOK) == HOOK + "?token=s3cr3t-hook-token"
    r = await api.put(f"/api/compute/policies/{pid}",
                      json={**edited, "then": {"kind": "webhook", "url": HOOK}})
    assert r.json()["then"]["url"] == HOOK

    r = await api.delete(f"/api/compute/policies/{pid}")
    assert r.status_code == 200 and sid not in workflows.schedules
    assert (await api.get(f"/api/compute/policies/{pid}")).status_code == 404
    assert (await api.delete(f"/api/compute/policies/{pid}")).status_code == 404


@pytest.mark.parametrize(("change", "field"), [
    ({"when": {"kind": "cron", "expression": "61 * * * *"}}, "expression"),
    ({"when": {"kind": "cron", "expression": "* * *"}}, "expression"),
    ({"when": {"kind": "spend", "window": "1y", "usd": 5}}, "window"),
    ({"when": {"kind": "spend", "window": "1h", "usd": -1}}, "usd"),
    ({"when": {"kind": "queue_wait", "type": "bogus", "minutes": 5}}, "type"),
    ({"when": {"kind": "queue_depth", "type": "dpo", "n": 2}}, "type"),  # a kind: its group is sft
    ({"then": {"kind": "pause_queue", "type": "serving"}}, "type"),  # never queued
    ({"when": {"kind": "pool_utilisation", "pool": "p1", "percent": 80, "direction": "sideways"}},
     "direction"),
    ({"when": {"kind": "teleport"}}, "when"),
    ({"then": {"kind": "scale_pool", "pool": "p1", "to": 3, "by": 2}}, "scale_pool"),
    ({"then": {"kind": "scale_pool", "pool": "p1"}}, "scale_pool"),
    ({"then": {"kind": "pause_queue", "type": "sft", "extra": 1}}, "extra"),
    ({"cooldown_minutes": 0}, "cooldown_minutes"),
    ({"name": ""}, "name"),
])
async def test_a_bad_card_is_refused_naming_the_field(api: httpx.AsyncClient, workflows: FakeWorkflows,
                                                      change: dict[str, Any], field: str) -> None:
    r = await api.post("/api/compute/policies", json={**SPEND_TO_WEBHOOK, **change})
    assert r.status_code == 422, r.text
    assert any(field in e["loc"] for e in r.json()["errors"]), r.json()
    assert workflows.schedules == {} and await all_items(api, "/api/compute/policies") == []


async def test_a_webhook_outside_the_allowlist_is_refused_without_quoting_it(
        api: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    for url in ("https://evil.example/gpuprov?token=s3cr3t", "https://hooks.example/gpuprovx?token=s3cr3t",
                "http://127.0.0.1:7233/?token=s3cr3t"):
        r = await api.post("/api/compute/policies", json={**SPEND_TO_WEBHOOK, "then": {"kind": "webhook",
                                                                                      "url": url}})
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["loc"] == ["body", "then", "url"]
        assert "GPUPROV_WEBHOOK_ALLOWLIST" in r.text and "s3cr3t" not in r.text
    assert workflows.schedules == {}


async def test_policies_are_per_project_and_paginated(api: httpx.AsyncClient) -> None:
    for n in range(3):
        r = await api.post("/api/compute/policies", json={**SPEND_TO_WEBHOOK, "name": f"p{n}"})
        assert r.status_code == 201
    names = [p["name"] for p in await all_items(api, "/api/compute/policies", limit=2)]
    assert names == ["p0", "p1", "p2"]
    token = await make_project(api, "other")
    theirs = {"Authorization": f"Bearer {token}"}
    r = await api.get("/api/compute/policies", headers=theirs)
    assert r.status_code == 200 and r.json()["items"] == []
    mine = (await api.get("/api/compute/policies")).json()["items"][0]["id"]
    assert (await api.get(f"/api/compute/policies/{mine}", headers=theirs)).status_code == 404


async def test_a_reached_daily_budget_refuses_new_allocations_naming_it(
        api: httpx.AsyncClient, engine: sa.Engine, ssh_key: str) -> None:
    assert (await api.get("/api/compute/budget")).json() == {"daily_usd": None, "spent_today": 0.0,
                                                            "reached": False}
    now = utcnow()
    with Session(engine) as s:  # $1000/h for the last 30 minutes (or since midnight): over $1 today
        spend.open_interval(s, key="gp-budget-a1", instance_id="budget", project="default", connection_id="c",
                            provider="fakecloud", rate_per_hour=1000.0,
                            started_at=max(now - timedelta(minutes=30),
                                           now.replace(hour=0, minute=0, second=0)))
    r = await api.put("/api/compute/budget", json={"daily_usd": 1})
    assert r.status_code == 200 and r.json()["reached"] is True
    r = await api.post("/api/compute/instances", json={"gpu": "H100", "ssh_public_keys": [ssh_key]})
    assert r.status_code == 409 and "daily budget of $1.00" in r.json()["detail"], r.text

    # Off again: the request goes on to planning (which finds no cloud connected).
    assert (await api.put("/api/compute/budget", json={"daily_usd": None})).json()["daily_usd"] is None
    r = await api.post("/api/compute/instances", json={"gpu": "H100", "ssh_public_keys": [ssh_key]})
    assert r.status_code == 409 and "budget" not in r.json()["detail"], r.text
    assert (await api.put("/api/compute/budget", json={"daily_usd": 0})).status_code == 422


@pytest.mark.parametrize("query", ["token=a\r\nX-Injected: 1", "token=a\nb", "token=\x00", "t=a\tb", "t=a b",
                                   "t=\x7f", "t=\u2028"])
async def test_a_webhook_query_with_control_characters_is_refused(
        api: httpx.AsyncClient, workflows: FakeWorkflows, query: str) -> None:
    """L5: such a URL was accepted, and httpx.InvalidURL escaped the action at send time."""
    r = await api.post("/api/compute/policies", json={**SPEND_TO_WEBHOOK, "then": {
        "kind": "webhook", "url": f"{HOOK}/alarm?{query}"}})
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["loc"] == ["body", "then", "url"]
    assert "control characters" in r.json()["detail"] and "token=a" not in r.text
    assert workflows.schedules == {} and await all_items(api, "/api/compute/policies") == []


async def test_a_spend_windows_form_is_in_the_schema_and_its_refusal_says_it(api: httpx.AsyncClient) -> None:
    """The schema shows the pattern (clients, the fuzz generate from it); a window off it is refused
    with the form in words, not the regex."""
    schemas = (await api.get("/openapi.json")).json()["components"]["schemas"]
    pattern = schemas["SpendWhen"]["properties"]["window"]["pattern"]
    windows = ("30m", "1h", "7d", "1y", "0h", "h")
    assert [w for w in windows if re.fullmatch(pattern, w)] == ["30m", "1h", "7d"]
    r = await api.post("/api/compute/policies", json={**SPEND_TO_WEBHOOK, "when": {
        "kind": "spend", "window": "1y", "usd": 5}})
    assert r.status_code == 422 and "a number and a unit m, h or d" in r.text, r.text


async def test_a_cards_kind_is_required_by_the_schema_as_by_the_api(api: httpx.AsyncClient) -> None:
    """`kind` tells the union's members apart: the API refuses a card without it, so every schema
    the discriminator maps to requires it (OpenAPI asks so; clients and the fuzz read it)."""
    spec = (await api.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    union = schemas["PolicyIn"]["properties"]["when"]
    mapped = [ref.rsplit("/", 1)[1] for ref in union["discriminator"]["mapping"].values()]
    assert len(mapped) == 6 and all("kind" in schemas[name]["required"] for name in mapped)
    then = schemas["PolicyIn"]["properties"]["then"]["discriminator"]["mapping"].values()
    assert all("kind" in schemas[ref.rsplit("/", 1)[1]]["required"] for ref in then)
    r = await api.post("/api/compute/policies", json={**SPEND_TO_WEBHOOK, "when": {"window": "1h", "usd": 5}})
    assert r.status_code == 422, r.text


async def test_a_card_without_its_kind_is_refused_naming_the_missing_field(api: httpx.AsyncClient) -> None:
    r = await api.post("/api/compute/policies", json={**SPEND_TO_WEBHOOK, "when": {"window": "1h", "usd": 5}})
    assert r.status_code == 422, r.text
    [error] = r.json()["errors"]
    assert error["loc"] == ["body", "when", "kind"] and error["type"] == "missing", error
    assert r.json()["detail"].startswith("body.when.kind: Field required"), r.json()

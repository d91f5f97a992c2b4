"""GET /api/compute/capacity: what is remembered on the project's connections and since when; another
project's memory is never shown; a bearer token is required; pages follow next_cursor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import sqlalchemy as sa
from sqlmodel import Session

from store import capacity
from store.capacity import Scope
from store.models import utcnow
from tests.api.conftest import all_items, connect_fake, make_project

URL = "/api/compute/capacity"


def remember(engine: sa.Engine, connection_id: str, region: str, *, at: datetime | None = None,
             times: int = 1) -> None:
    with Session(engine) as s:
        for _ in range(times):
            capacity.remember_refusal(s, Scope("fakecloud", connection_id, region, instance_type="f.1x"),
                                      "capacity", "fakecloud: sold out", at or utcnow())


async def test_lists_the_projects_remembered_refusals_only(client: httpx.AsyncClient,
                                                            engine: sa.Engine) -> None:
    mine = (await connect_fake(client))["id"]
    token = await make_project(client, "team-b")
    theirs = (await connect_fake(client, project="team-b"))["id"]
    remember(engine, mine, "r1", times=2)
    remember(engine, theirs, "r9")
    remember(engine, mine, "r2", at=utcnow() - timedelta(hours=2))  # forgotten long ago

    r = await client.get(URL)
    assert r.status_code == 200, r.text
    [item] = r.json()["items"]
    assert {k: item[k] for k in ("provider", "connection_id", "region", "zone", "instance_type", "kind",
                                 "reason", "refusals")} == {
        "provider": "fakecloud", "connection_id": mine, "region": "r1", "zone": None, "instance_type": "f.1x",
        "kind": "capacity", "reason": "fakecloud: sold out", "refusals": 2}
    first, until = datetime.fromisoformat(item["first_at"]), datetime.fromisoformat(item["until"])
    assert first.tzinfo is not None
    assert until - datetime.fromisoformat(item["last_at"]) == timedelta(minutes=10)  # refused twice

    r = await client.get(URL, headers={"Authorization": f"Bearer {token}"})
    assert [i["connection_id"] for i in r.json()["items"]] == [theirs]
    r = await client.get(URL, headers={"X-Project": "team-b"})  # the admin token, in team-b
    assert [i["region"] for i in r.json()["items"]] == ["r9"]


async def test_pages_newest_first(client: httpx.AsyncClient, engine: sa.Engine) -> None:
    conn = (await connect_fake(client))["id"]
    now = datetime.now(UTC)
    for i in range(5):
        remember(engine, conn, f"r{i}", at=now - timedelta(seconds=10 * (5 - i)))
    assert [i["region"] for i in await all_items(client, URL, limit=2)] == ["r4", "r3", "r2", "r1", "r0"]


async def test_needs_a_bearer_token(client: httpx.AsyncClient) -> None:
    client.headers.pop("Authorization")
    r = await client.get(URL)
    assert r.status_code == 401 and r.json()["detail"] == "missing or invalid bearer token"

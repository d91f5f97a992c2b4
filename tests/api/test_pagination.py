"""Every list is paginated: `limit`/`cursor` in, `{items, next_cursor}` out; database lists by keyset."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from api.pagination import encode_cursor
from providers.base import GpuSpec, Offer
from store.models import Connection, Instance
from tests.api.conftest import FakeCloud, all_items, connect_fake

INSTANCES = "/api/compute/instances"
CONNECTIONS = "/api/compute/connections"
OFFERS = "/api/compute/backends/fakecloud/offers"
T0 = datetime(2030, 1, 1, tzinfo=UTC)


def add_instances(engine: sa.Engine, *specs: tuple[str, int]) -> None:
    """Instance rows (id, minutes after T0); equal minutes share a created_at (the id breaks the tie)."""
    with Session(engine) as s:
        for iid, minute in specs:
            s.add(Instance(id=iid, provider="fakecloud", connection_id="c", workflow_id=f"allocate-{iid}",
                           created_at=T0 + timedelta(minutes=minute)))
        s.commit()


def add_connections(engine: sa.Engine, *specs: tuple[str, int]) -> None:
    with Session(engine) as s:
        for cid, minute in specs:
            s.add(Connection(id=cid, provider="fakecloud", name=cid, status="connected", secret=b"x",
                             created_at=T0 + timedelta(minutes=minute)))
        s.commit()


async def page(client: httpx.AsyncClient, url: str, **params: Any) -> tuple[list[str], str | None]:
    r = await client.get(url, params=params)
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"items", "next_cursor"}
    return [i["id"] for i in r.json()["items"]], r.json()["next_cursor"]


async def test_instances_newest_first_with_ties_broken_by_id(client: httpx.AsyncClient,
                                                             engine: sa.Engine) -> None:
    add_instances(engine, ("a1", 1), ("a2", 2), ("b2", 2), ("c2", 2), ("a3", 3))
    assert [i["id"] for i in await all_items(client, INSTANCES, limit=2)] == ["a3", "c2", "b2", "a2", "a1"]


async def test_rows_inserted_between_pages_are_neither_skipped_nor_repeated(
        client: httpx.AsyncClient, engine: sa.Engine) -> None:
    add_instances(engine, *[(f"i{n:02d}", n) for n in range(7)])
    seen, cursor = await page(client, INSTANCES, limit=3)
    assert seen == ["i06", "i05", "i04"] and cursor
    # New allocations arrive (newest first: they belong before the cursor), one ties with the cursor row.
    # Two more tie with the cursor row's created_at: "i04b" sorts before it (already passed),
    # "i03z" after it (still to come).
    add_instances(engine, ("n1", 10), ("n2", 11), ("i04b", 4), ("i03z", 4))
    while cursor:
        more, cursor = await page(client, INSTANCES, limit=3, cursor=cursor)
        seen += more
    assert seen == ["i06", "i05", "i04", "i03z", "i03", "i02", "i01", "i00"]
    assert len(seen) == len(set(seen))
    # A fresh walk shows everything, the new rows included.
    assert [i["id"] for i in await all_items(client, INSTANCES, limit=4)] == [
        "n2", "n1", "i06", "i05", "i04b", "i04", "i03z", "i03", "i02", "i01", "i00"]


async def test_connections_oldest_first_and_later_rows_come_at_the_end(
        client: httpx.AsyncClient, engine: sa.Engine) -> None:
    add_connections(engine, ("c0", 0), ("c1", 1), ("c2", 2))
    seen, cursor = await page(client, CONNECTIONS, limit=2)
    assert seen == ["c0", "c1"]
    add_connections(engine, ("c3", 3))
    while cursor:
        more, cursor = await page(client, CONNECTIONS, limit=2, cursor=cursor)
        seen += more
    assert seen == ["c0", "c1", "c2", "c3"]


async def test_filters_apply_across_pages(client: httpx.AsyncClient, engine: sa.Engine) -> None:
    add_instances(engine, *[(f"i{n}", n) for n in range(5)])
    with Session(engine) as s:
        for iid in ("i1", "i3", "i4"):
            row = s.get(Instance, iid)
            assert row is not None
            row.status = "ready"
            s.add(row)
        s.commit()
    got = await all_items(client, INSTANCES, limit=1, status="ready")
    assert [i["id"] for i in got] == ["i4", "i3", "i1"]


async def test_limit_bounds_and_default(client: httpx.AsyncClient, engine: sa.Engine) -> None:
    add_instances(engine, *[(f"i{n:03d}", n) for n in range(51)])
    ids, cursor = await page(client, INSTANCES)
    assert len(ids) == 50 and cursor is not None  # default 50
    assert (await page(client, INSTANCES, cursor=cursor)) == (["i000"], None)
    assert len((await page(client, INSTANCES, limit=200))[0]) == 51
    assert (await page(client, INSTANCES, limit=1))[0] == ["i050"]
    for bad in ("0", "201", "-1", "many", ""):
        r = await client.get(INSTANCES, params={"limit": bad})
        assert r.status_code == 422 and "limit" in r.text, (bad, r.text)


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize("cursor", [
    "not-a-cursor!", "%%%", _b64("not json"), _b64("[1, 2]"), _b64('{"v": 99, "k": "instances"}'),
    encode_cursor("connections", t=T0.isoformat(), i="c0"),  # another list's cursor
    encode_cursor("instances", t="yesterday", i="x"), encode_cursor("instances", t=T0.isoformat(), i=7),
    encode_cursor("instances"), "x" * 1001,
])
async def test_a_bad_cursor_is_a_422_with_the_reason(client: httpx.AsyncClient, cursor: str) -> None:
    r = await client.get(INSTANCES, params={"cursor": cursor})
    assert r.status_code == 422, r.text
    assert "cursor" in r.text


async def test_offers_page_by_offset_for_the_same_filters(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    FakeCloud.OFFERS = [*FakeCloud.OFFERS, Offer(
        provider="fakecloud", instance_type="gpu.a100", gpu=GpuSpec(name="A100", count=1), vcpus=8,
        memory_gib=64, region="r1", price_per_hour=1.5)]
    try:
        first, cursor = await _offer_page(client, limit=2)
        assert first == ["gpu.a10", "gpu.a100"] and cursor
        assert await _offer_page(client, limit=2, cursor=cursor) == (["gpu.h100"], None)
        r = await client.get(OFFERS, params={"limit": 2, "cursor": cursor, "region": "r1"})
        assert r.status_code == 422 and "other filters" in r.json()["detail"]
        r = await client.get(OFFERS, params={"cursor": encode_cursor("offers", o=-1)})
        assert r.status_code == 422 and "invalid cursor" in r.json()["detail"]
    finally:
        FakeCloud.OFFERS = FakeCloud.OFFERS[:-1]


async def _offer_page(client: httpx.AsyncClient, **params: Any) -> tuple[list[str], str | None]:
    r = await client.get(OFFERS, params=params)
    assert r.status_code == 200, r.text
    return [o["instance_type"] for o in r.json()["items"]], r.json()["next_cursor"]


async def test_clouds_page_by_id(client: httpx.AsyncClient) -> None:
    everything = await all_items(client, "/api/compute/clouds")
    one_by_one = await all_items(client, "/api/compute/clouds", limit=1)
    assert [c["id"] for c in one_by_one] == [c["id"] for c in everything]
    assert len(everything) >= 3  # fakecloud, lambda, local
    r = await client.get("/api/compute/clouds", params={"cursor": encode_cursor("instances", t="x", i="y")})
    assert r.status_code == 422 and "invalid cursor" in r.json()["detail"]

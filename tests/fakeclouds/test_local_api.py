from __future__ import annotations

import httpx

from fakeclouds.admin import FakeCloudAdmin
from fakeclouds.server import FakeCloudServer
from tests.fakeclouds.helpers import create_local, wait_gone, wait_local


async def test_account_and_bad_token(cloud: FakeCloudServer, local: httpx.AsyncClient) -> None:
    r = await local.get("/account")
    assert r.status_code == 200 and r.json()["id"] == "local"
    async with httpx.AsyncClient(base_url=f"{cloud.url}/local/v1") as anon:
        wrong = f"Bearer {cloud.tokens['lambda']}"  # another facade's token
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": wrong}):
            r = await anon.get("/account", headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"


async def test_offers_cover_both_regions_with_spot(local: httpx.AsyncClient) -> None:
    offers = (await local.get("/offers")).json()["offers"]
    small = {(o["region"], o["spot"]): o for o in offers if o["instance_type"] == "cpu-small"}
    assert set(small) == {("local-1", False), ("local-1", True), ("local-2", False), ("local-2", True)}
    assert small[("local-1", False)]["price_per_hour"] != small[("local-2", False)]["price_per_hour"]
    assert small[("local-1", True)]["price_per_hour"] < small[("local-1", False)]["price_per_hour"]
    assert all(o["gpu_count"] == 0 and o["gpu_name"] is None and o["available"] for o in offers)


async def test_machine_lifecycle(local: httpx.AsyncClient, admin: FakeCloudAdmin, pubkey: str) -> None:
    r = await create_local(local, pubkey, labels={"owner": "me"}, spot=True)
    assert r.status_code == 201
    m = r.json()
    assert m["status"] == "pending" and m["host"] is None and m["ssh_port"] is None
    assert m["ssh_user"] == "gpuprov"
    assert m["spot"] is True and m["price_per_hour"] == 0.006
    up = await wait_local(local, m["id"])
    assert up["host"] == "127.0.0.1" and up["ssh_port"] > 0
    r = await local.delete(f"/machines/{m['id']}")
    assert r.status_code == 202 and r.json()["status"] == "terminating"
    await wait_gone(local, f"/machines/{m['id']}")
    r = await local.get(f"/machines/{m['id']}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert (await local.delete(f"/machines/{m['id']}")).status_code == 404
    (rec,) = admin.machines()
    assert rec["status"] == "terminated" and rec["billing_seconds"] > 0


async def test_names_are_unique_among_live_machines(local: httpx.AsyncClient, pubkey: str) -> None:
    first = (await create_local(local, pubkey, name="dup")).json()
    r = await create_local(local, pubkey, name="dup")
    assert r.status_code == 409 and r.json()["error"]["code"] == "name_conflict"
    await local.delete(f"/machines/{first['id']}")
    await wait_gone(local, f"/machines/{first['id']}")
    assert (await create_local(local, pubkey, name="dup")).status_code == 201


async def test_list_filters_by_name_and_labels(local: httpx.AsyncClient, pubkey: str) -> None:
    await create_local(local, pubkey, name="a", labels={"owner": "x", "alloc": "1"})
    await create_local(local, pubkey, name="b", labels={"owner": "x", "alloc": "2"})
    await create_local(local, pubkey, name="c", labels={"owner": "y"})
    names = lambda r: sorted(m["name"] for m in r.json()["machines"])  # noqa: E731
    assert names(await local.get("/machines")) == ["a", "b", "c"]
    assert names(await local.get("/machines", params={"name": "b"})) == ["b"]
    assert names(await local.get("/machines", params={"label": "owner=x"})) == ["a", "b"]
    assert names(await local.get("/machines", params=[("label", "owner=x"), ("label", "alloc=2")])) == ["b"]
    assert (await local.get("/machines", params={"label": "novalue"})).status_code == 400


async def test_refusals_are_400_invalid_request(local: httpx.AsyncClient, pubkey: str) -> None:
    bad = [
        {"instance_type": "gpu_1x_a10"},  # a lambda type
        {"region": "us-east-1"},
        {"name": "Bad_Name"},
        {"name": "x" * 64},
        {"ssh_public_keys": ["not a key"]},
        {"ssh_public_keys": []},
        {"ports": [70000]},
        {"surprise": 1},
    ]
    for fields in bad:
        r = await create_local(local, pubkey, **fields)
        assert r.status_code == 400, (fields, r.text)
        assert r.json()["error"]["code"] == "invalid_request"
    r = await local.post("/machines", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert (await local.get("/machines")).json()["machines"] == []


async def test_stock_is_taken_and_returned(local: httpx.AsyncClient, admin: FakeCloudAdmin,
                                           pubkey: str) -> None:
    admin.set_stock("cpu-large", "local-2", 1)
    first = await create_local(local, pubkey, name="one", instance_type="cpu-large", region="local-2")
    assert first.status_code == 201
    offers = (await local.get("/offers")).json()["offers"]
    large2 = [o for o in offers if o["instance_type"] == "cpu-large" and o["region"] == "local-2"]
    assert large2 and not any(o["available"] for o in large2)
    r = await create_local(local, pubkey, name="two", instance_type="cpu-large", region="local-2")
    assert r.status_code == 503 and r.json()["error"]["code"] == "insufficient_capacity"
    await local.delete(f"/machines/{first.json()['id']}")
    await wait_gone(local, f"/machines/{first.json()['id']}")
    r = await create_local(local, pubkey, name="two", instance_type="cpu-large", region="local-2")
    assert r.status_code == 201


async def test_quota_config(local: httpx.AsyncClient, admin: FakeCloudAdmin, pubkey: str) -> None:
    admin.configure(quota={"local": 1})
    assert (await create_local(local, pubkey, name="q1")).status_code == 201
    r = await create_local(local, pubkey, name="q2")
    assert r.status_code == 403 and r.json()["error"]["code"] == "quota_exceeded"

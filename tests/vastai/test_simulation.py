"""The simulated Vast.ai API, spoken to as the CLI does: what it answers, what it refuses, its quirks
(vanishing asks, outbid creates that still make an instance, gone instances) and its 429s."""

from __future__ import annotations

import base64
import json
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds import vastai_api
from fakeclouds.server import FakeCloudServer
from tests.eventually import eventually
from tests.vastai.conftest import (
    CHEAP,
    DEADLINE,
    OTHER_KEY,
    USER_KEY,
    add_fault,
    configure,
    public,
    set_stock,
    ssh_run,
)

ON_DEMAND = {"verified": {"eq": True}, "rentable": {"eq": True}, "rented": {"eq": False},
             "allocated_storage": 32, "order": [["dph_total", "asc"]]}


async def rent(api: httpx.AsyncClient, ask: int = CHEAP.id, **body: Any) -> httpx.Response:
    return await api.put(f"/api/v0/asks/{ask}/", json={"client_id": "me", "image": "ubuntu:22.04",
                                                       "runtype": "ssh", "disk": 16, **body})


async def instance(api: httpx.AsyncClient, iid: int) -> dict[str, Any] | None:
    r = await api.get(f"/api/v0/instances/{iid}/", params={"owner": "me"})
    assert r.status_code == 200, r.text
    return r.json()["instances"]  # type: ignore[no-any-return]


async def running(api: httpx.AsyncClient, iid: int) -> dict[str, Any]:
    inst = await eventually(lambda: instance(api, iid),
                            until=lambda inst: inst and inst["actual_status"] == "running",
                            within=DEADLINE, what=f"instance {iid} running")
    assert inst is not None
    return inst


async def test_bad_token(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    bad = {"Authorization": "Bearer wrong"}
    r = await api.get("/api/v1/instances/", headers=bad)
    assert r.status_code == 401 and r.json()["success"] is False and r.json()["msg"] == "Invalid user key"
    r = await api.post("/api/v0/bundles/", json=ON_DEMAND, headers=bad)  # search says 404 (docs)
    assert r.status_code == 404 and r.json()["msg"] == "Invalid user key"
    assert (await api.get("/api/v0/users/current/")).json()["id"] == 424242


async def test_search_prices_filters_and_bids(api: httpx.AsyncClient) -> None:
    offers = (await api.post("/api/v0/bundles/", json=ON_DEMAND)).json()["offers"]
    assert [o["id"] for o in offers][:2] == [21040117, 21040120]
    first = offers[0]
    storage = round(0.15 * 32 / 720, 6)
    assert first["dph_total"] == pytest.approx(0.16 + storage) and first["storage_total_cost"] == storage
    assert (first["geolocation"], first["num_gpus"], first["gpu_ram"], first["min_bid"]) == \
        ("Quebec, CA", 1, 24576, 0.09)
    us = (await api.post("/api/v0/bundles/", json={**ON_DEMAND, "geolocation": {"in": ["US"]}})).json()
    assert {o["geolocation"] for o in us["offers"]} == {"Texas, US", "California, US"}
    bids = (await api.post("/api/v0/bundles/", json={**ON_DEMAND, "type": "bid"})).json()["offers"]
    assert bids[0]["dph_total"] == pytest.approx(0.09 + storage) and bids[0]["is_bid"] is True
    new = await api.put("/api/v0/search/asks/", json={"select_cols": ["*"], "q": ON_DEMAND})
    assert new.json()["offers"] == offers
    r = await api.post("/api/v0/bundles/", json={**ON_DEMAND, "dph_bogus": {"lt": 1}})
    assert r.status_code == 400 and r.json()["error"] == "invalid_request"


async def test_rent_boot_and_login_with_attached_keys(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    # Booting, it is "loading" with no ports: shown on a machine held booting (a 0.1 s
    # boot was over before the first read on a busy box), destroyed before the one that boots.
    configure(sim, hold_boots=True)
    r = await rent(api, label="job-0")
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    first = await instance(api, r.json()["new_contract"])
    assert first is not None and first["actual_status"] == "loading" and first["ports"] == {}
    assert (await api.delete(f"/api/v0/instances/{first['id']}/")).status_code == 200
    configure(sim, hold_boots=False)
    r = await rent(api, label="job-1", onstart="echo booted > marker")
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    iid = r.json()["new_contract"]
    assert isinstance(iid, int)
    inst = await running(api, iid)
    assert inst["label"] == "job-1" and inst["public_ipaddr"] == "127.0.0.1\n"  # newline as the real API
    port = int(inst["ports"]["22/tcp"][0]["HostPort"])
    assert isinstance(inst["ports"]["22/tcp"][0]["HostPort"], str)
    with pytest.raises(asyncssh.PermissionDenied):  # no key attached yet: nobody gets in
        await ssh_run("127.0.0.1", port, USER_KEY)
    for key in (USER_KEY, OTHER_KEY):
        r = await api.post(f"/api/v0/instances/{iid}/ssh/", json={"ssh_key": public(key)})
        assert r.json() == {"success": True, "msg": "SSH key attached successfully"}
    assert await ssh_run("127.0.0.1", port, OTHER_KEY) == "ok"
    assert await eventually(lambda: ssh_run("127.0.0.1", port, USER_KEY, "cat marker 2>/dev/null || true"),
                            within=DEADLINE, what="the onstart script's marker") == "booted"
    keys = (await api.get(f"/api/v0/instances/{iid}/ssh/")).json()["ssh_keys"]
    assert isinstance(keys, str)  # documented: a JSON string holding the array
    assert [k["public_key"] for k in json.loads(keys)] == [public(USER_KEY), public(OTHER_KEY)]
    again = await api.post(f"/api/v0/instances/{iid}/ssh/", json={"ssh_key": public(USER_KEY)})
    assert again.status_code == 400 and again.json()["success"] is False
    bad = await api.post(f"/api/v0/instances/{iid}/ssh/", json={"ssh_key": "ssh-rsa nope"})
    assert bad.status_code == 400


async def test_destroyed_instances_are_gone_at_once(api: httpx.AsyncClient) -> None:
    iid = (await rent(api)).json()["new_contract"]
    r = await api.delete(f"/api/v0/instances/{iid}/")
    assert r.json() == {"success": True, "msg": "Instance destroyed successfully"}
    assert await instance(api, iid) is None
    r = await api.delete(f"/api/v0/instances/{iid}/")
    assert r.status_code == 404 and r.json() == {"success": False, "error": "no_such_instance",
                                                 "msg": "Instance not found."}
    assert await instance(api, 99999999) is None
    assert (await api.get("/api/v0/instances/abc/")).status_code == 400


async def test_a_vanished_ask_answers_no_such_ask(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    set_stock(sim, CHEAP.id, 0)  # someone else rented it
    offers = (await api.post("/api/v0/bundles/", json=ON_DEMAND)).json()["offers"]
    assert CHEAP.id not in [o["id"] for o in offers] and 21040120 in [o["id"] for o in offers]
    r = await rent(api)
    assert r.status_code == 404
    body = r.json()
    assert body["success"] is False and body["error"] == "invalid_args" and body["ask_id"] == CHEAP.id
    assert "no_such_ask" in body["msg"]
    assert (await rent(api, ask=12345)).status_code == 404  # never listed
    assert (await api.get("/api/v1/instances/")).json()["instances"] == []


async def test_an_outbid_interruptible_create_still_makes_a_stopped_instance(
        sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    assert (await rent(api, price=0.09)).json()["success"] is True  # at the min bid: rented
    async with httpx.AsyncClient(base_url=f"{sim.url}/vastai/_fake") as host:  # the simulation's own route
        assert (await host.put(f"/asks/{CHEAP.id}", json={"min_bid": 0.12})).status_code == 200
        assert (await host.put("/asks/1", json={"min_bid": 1})).status_code == 404
    offers = (await api.post("/api/v0/bundles/", json=ON_DEMAND)).json()["offers"]
    assert offers[0]["min_bid"] == 0.12
    r = await rent(api, price=0.10)
    assert r.status_code == 200 and r.json()["success"] is False  # an error...
    stopped = r.json()["new_contract"]  # ...and an instance all the same
    inst = await instance(api, stopped)
    assert inst is not None and (inst["actual_status"], inst["intended_status"]) == ("stopped", "stopped")
    assert inst["is_bid"] is True


@pytest.mark.parametrize(("body", "why"), [
    ({"image": None}, "image"), ({"disk": 4}, "disk"), ({"runtype": "vnc"}, "runtype"),
    ({"price": 500}, "price"), ({"client_id": "someone"}, "client_id"), ({"label": "x" * 257}, "label"),
    ({"onstart": "x" * 4097}, "4096"),
])
async def test_create_refusals(api: httpx.AsyncClient, body: dict[str, Any], why: str) -> None:
    r = await rent(api, **body)
    assert r.status_code == 400 and r.json()["error"] == "invalid_args" and why in r.json()["msg"]
    assert (await api.get("/api/v1/instances/")).json()["total_instances"] == 0
    assert (await api.put("/api/v0/asks/nope/", json={"image": "x"})).status_code == 400


async def test_instance_list_pages_with_next_token(api: httpx.AsyncClient) -> None:
    ids = [(await rent(api, label="a" if i < 3 else "b")).json()["new_contract"] for i in range(4)]
    page = (await api.get("/api/v1/instances/", params={"limit": 3})).json()
    assert [i["id"] for i in page["instances"]] == sorted(ids)[:3]
    assert page["total_instances"] == 4 and page["label_counts"] == {"a": 3, "b": 1}
    assert json.loads(base64.b64decode(page["next_token"])) == {"values": {"id": sorted(ids)[2]}}
    after = {"limit": 3, "after_token": page["next_token"]}
    rest = (await api.get("/api/v1/instances/", params=after)).json()
    assert [i["id"] for i in rest["instances"]] == sorted(ids)[3:] and rest["next_token"] is None
    b = {"select_filters": json.dumps({"label": {"eq": "b"}})}
    only_b = await api.get("/api/v1/instances/", params=b)
    assert [i["label"] for i in only_b.json()["instances"]] == ["b"]
    for params in ({"after_token": "garbage"}, {"order_by": json.dumps([{"col": "dph_total"}])},
                   {"select_filters": json.dumps({"dph_total": {"lt": 1}})}):
        r = await api.get("/api/v1/instances/", params=params)
        assert r.status_code == 400 and r.json()["error"] == "invalid_request", params
    assert len((await api.get("/api/v1/instances/", params={"limit": 0})).json()["instances"]) == 4  # 5


async def test_minimum_intervals_answer_429_without_retry_after(
        sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    configure(sim, time_scale=20.0)  # every documented interval lasts 20x: the 2nd call is early
    iid = (await rent(api)).json()["new_contract"]
    r = await rent(api)
    assert r.status_code == 429 and "retry-after" not in r.headers
    assert r.json() == {"detail": "API requests too frequent endpoint threshold=4.5"}
    assert (await api.get("/api/v1/instances/")).status_code == 200
    r = await api.get("/api/v1/instances/")
    assert r.status_code == 429 and r.json() == {"detail": "API requests too frequent endpoint threshold=1.0"}
    assert (await api.delete(f"/api/v0/instances/{iid}/")).status_code == 200
    r = await api.delete(f"/api/v0/instances/{iid}/")
    assert r.status_code == 429 and r.json()["error"] == "rate_limit_exceeded"
    assert (await api.get("/api/v0/users/current/")).status_code == 200  # no documented limit


async def test_injected_rate_limits_say_when(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    add_fault(sim, "get", "rate_limit", retry_after=2)
    r = await api.get("/api/v0/instances/1/")
    assert r.status_code == 429 and r.headers["retry-after"] == "2"  # a simulation extension
    assert r.json() == {"detail": "API requests too frequent endpoint threshold=2.0"}


async def test_error_bodies_of_faults(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    add_fault(sim, "create", "quota")
    r = await rent(api)
    assert r.status_code == 400 and r.json()["error"] == "insufficient_credit"
    add_fault(sim, "list", "server_error", status=500)
    r = await api.get("/api/v1/instances/")
    assert r.status_code == 500 and r.json() == {"msg": "Internal server error"}  # only msg
    add_fault(sim, "list", "server_error", status=503)
    r = await api.get("/api/v1/instances/")
    assert r.status_code == 503 and r.headers["content-type"].startswith("text/html")


def test_catalogue_is_consistent() -> None:
    for ask in vastai_api.ASKS:
        assert 0 < ask.min_bid < ask.dph_base and ask.country in {r.name for r in vastai_api.REGIONS}
    assert vastai_api.country_code("Quebec, CA") == vastai_api.country_code("CA") == "CA"

"""The simulated DigitalOcean API refuses what the real one refuses, and shows its quirks: GPU
droplets only with type=gpus, capacity and quota both 422, burst vs hourly 429s, pagination."""

from __future__ import annotations

import ipaddress
import time
from typing import Any

import httpx

from fakeclouds.server import FakeCloudServer
from tests.digitalocean.conftest import OTHER_KEY, add_key, client, launch, public
from tests.eventually import eventually

DEADLINE = 10.0


def _err(r: httpx.Response) -> tuple[int, str, str]:
    body = r.json()
    assert set(body) == {"id", "message", "request_id"}, body
    return r.status_code, body["id"], body["message"]


async def _wait_active(api: httpx.AsyncClient, droplet_id: int) -> dict[str, Any]:
    async def droplet() -> dict[str, Any]:
        got: dict[str, Any] = (await api.get(f"/droplets/{droplet_id}")).json()["droplet"]
        return got

    return await eventually(droplet, until=lambda d: d["status"] == "active", within=DEADLINE,
                            what=f"droplet {droplet_id} active")


async def test_bad_token_is_unauthorized_with_ratelimit_headers(sim: FakeCloudServer) -> None:
    async with client(sim, token="dop_v1_wrong") as bad:
        r = await bad.get("/account")
    assert _err(r)[:2] == (401, "unauthorized")
    assert {"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"} <= set(r.headers)


async def test_every_answer_counts_down_the_hourly_limit(api: httpx.AsyncClient) -> None:
    first = await api.get("/account")
    second = await api.get("/sizes")
    assert first.headers["ratelimit-limit"] == "5000" and "retry-after" not in first.headers
    assert int(second.headers["ratelimit-remaining"]) == int(first.headers["ratelimit-remaining"]) - 1
    assert int(second.headers["ratelimit-reset"]) >= int(time.time())


async def test_sizes_paginate_and_list_regions_in_stock(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    sim.admin.set_stock("gpu-h100x1-80gb", "nyc2", 0)
    first = (await api.get("/sizes", params={"per_page": 3})).json()
    assert first["meta"]["total"] == 7 and len(first["sizes"]) == 3
    assert set(first["links"]["pages"]) == {"next", "last"}
    slugs, url = [], None
    body = first
    while True:
        slugs += [s["slug"] for s in body["sizes"]]
        url = body["links"].get("pages", {}).get("next")
        if not url:
            break
        body = (await api.get(url)).json()
    assert len(slugs) == 7 and "s-2vcpu-4gb" in slugs
    assert set(body["links"]["pages"]) == {"first", "prev"}
    sizes = {s["slug"]: s for s in (await api.get("/sizes", params={"per_page": 500})).json()["sizes"]}
    assert len(sizes) == 7  # per_page above 200 is clamped, not refused
    h100 = sizes["gpu-h100x1-80gb"]
    assert h100["regions"] == ["tor1", "atl1"] and h100["available"] is True  # nyc2 sold out
    assert h100["gpu_info"] == {"count": 1, "model": "nvidia_h100", "vram": {"amount": 80, "unit": "gib"}}
    assert h100["memory"] == 245760 and h100["price_hourly"] == 3.39
    assert "gpu_info" not in sizes["s-2vcpu-4gb"]
    r = await api.get("/sizes", params={"per_page": 0})
    assert _err(r)[:2] == (400, "bad_request")


async def test_gpu_droplets_are_listed_only_with_type_gpus(api: httpx.AsyncClient) -> None:
    key = await add_key(api)
    gpu = await launch(api, key["fingerprint"], name="Trainer-1", tags=["team:ml"])
    assert gpu.status_code == 202, gpu.text
    body = gpu.json()
    assert body["droplet"]["status"] == "new" and body["droplet"]["networks"]["v4"] == []
    assert body["links"]["actions"][0]["rel"] == "create"
    cpu = await launch(api, key["id"], name="cpu-1", size="s-2vcpu-4gb", image="ubuntu-24-04-x64")
    assert cpu.status_code == 202, cpu.text

    def names(r: httpx.Response) -> list[str]:
        return [d["name"] for d in r.json()["droplets"]]

    assert names(await api.get("/droplets")) == ["cpu-1"]  # by default, non-GPU droplets only
    assert names(await api.get("/droplets", params={"type": "droplets"})) == ["cpu-1"]
    assert names(await api.get("/droplets", params={"type": "gpus"})) == ["Trainer-1"]
    assert names(await api.get("/droplets", params={"type": "gpus", "name": "trainer-1"})) == ["Trainer-1"]
    assert names(await api.get("/droplets", params={"name": "trainer-1"})) == []
    assert names(await api.get("/droplets", params={"tag_name": "team:ml"})) == []  # [unconfirmed]
    for combo in ({"tag_name": "team:ml", "type": "gpus"}, {"tag_name": "team:ml", "name": "Trainer-1"}):
        assert _err(await api.get("/droplets", params=combo))[:2] == (422, "unprocessable_entity")
    assert _err(await api.get("/droplets", params={"type": "tpus"}))[0] == 422
    tag = (await api.get("/tags/team:ml")).json()["tag"]  # tags given at create are made
    assert tag["resources"]["droplets"]["count"] == 1


async def test_droplet_lifecycle_and_delete(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    key = await add_key(api)
    droplet_id = (await launch(api, key["fingerprint"])).json()["droplet"]["id"]
    assert isinstance(droplet_id, int)
    droplet = await _wait_active(api, droplet_id)
    public_ip = next(n["ip_address"] for n in droplet["networks"]["v4"] if n["type"] == "public")
    assert ipaddress.ip_address(public_ip).is_loopback and public_ip != "127.0.0.1"
    assert droplet["size_slug"] == "gpu-4000adax1-20gb" and droplet["region"]["slug"] == "tor1"
    assert droplet["gpu_info"]["model"] == "nvidia_rtx4000_ada"
    assert droplet["image"]["slug"] == "gpu-h100x1-base"
    sim.admin.kill(str(droplet_id))
    assert (await api.get(f"/droplets/{droplet_id}")).json()["droplet"]["status"] == "off"
    r = await api.delete(f"/droplets/{droplet_id}")
    assert r.status_code == 204 and r.content == b"" and "ratelimit-remaining" in r.headers
    assert _err(await api.get(f"/droplets/{droplet_id}"))[:2] == (404, "not_found")
    assert _err(await api.delete(f"/droplets/{droplet_id}"))[:2] == (404, "not_found")
    assert _err(await api.get("/droplets/not-a-number"))[0] == 404


async def test_names_are_not_unique_and_names_creates_several(api: httpx.AsyncClient) -> None:
    key = await add_key(api)
    assert (await launch(api, key["fingerprint"], name="same")).status_code == 202
    assert (await launch(api, key["fingerprint"], name="same")).status_code == 202
    many = await launch(api, key["fingerprint"], name=None, names=["a-1", "a-2"], size="gpu-h100x1-80gb")
    assert many.status_code == 202 and [d["name"] for d in many.json()["droplets"]] == ["a-1", "a-2"]
    listed = (await api.get("/droplets", params={"type": "gpus"})).json()["droplets"]
    assert sorted(d["name"] for d in listed) == ["a-1", "a-2", "same", "same"]


async def test_create_refusals_are_422(api: httpx.AsyncClient) -> None:
    key = await add_key(api)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"size": "gpu-9000x1"}, "invalid size"),
        ({"region": "mars1"}, "invalid region"),
        ({"image": "windows-95"}, "invalid image"),
        ({"ssh_keys": ["00:11"]}, "are invalid key identifiers for Droplet creation"),
        ({"name": "bad name!"}, "valid hostname characters"),
        ({"user_data": "#!/bin/sh\n" + "x" * 70_000}, "64 KiB"),
        ({"name": None}, "name"),
        ({"names": [f"n{i}" for i in range(11)], "name": None}, "at most 10"),
        ({"tags": ["bad tag"]}, "invalid characters"),
    ]
    for fields, words in cases:
        status, eid, message = _err(await launch(api, key["fingerprint"], **fields))
        assert (status, eid) == (422, "unprocessable_entity") and words in message, (fields, message)
    r = await api.post("/droplets", json={"name": "x", "size": "gpu-h100x1-80gb"})  # no image
    assert _err(r)[:2] == (422, "unprocessable_entity")
    assert (await api.get("/droplets", params={"type": "gpus"})).json()["droplets"] == []


async def test_capacity_and_quota_are_both_422_told_apart_by_message(api: httpx.AsyncClient,
                                                                     sim: FakeCloudServer) -> None:
    key = await add_key(api)
    # A size never sold in a region, and a sold-out one, answer alike.
    never = await launch(api, key["fingerprint"], size="gpu-l40sx1-48gb", region="nyc2")
    assert _err(never) == (422, "unprocessable_entity", "Size is not available in this region.")
    assert (await launch(api, key["fingerprint"], size="gpu-h100x8-640gb", region="nyc2")).status_code == 202
    sold_out = await launch(api, key["fingerprint"], size="gpu-h100x8-640gb", region="nyc2")
    assert _err(sold_out) == (422, "unprocessable_entity", "Size is not available in this region.")
    sim.admin.configure(quota={"digitalocean": 1})
    over = await launch(api, key["fingerprint"])
    status, eid, message = _err(over)
    assert (status, eid) == (422, "unprocessable_entity") and "exceed your droplet limit" in message
    assert (await api.get("/account")).json()["account"]["droplet_limit"] == 1


async def test_tags_and_firewalls(api: httpx.AsyncClient) -> None:
    assert (await api.post("/tags", json={"name": "fw-a"})).status_code == 201
    again = await api.post("/tags", json={"name": "fw-a"})
    assert again.status_code == 201 and again.json()["tag"]["name"] == "fw-a"
    bad = await api.post("/tags", json={"name": "no spaces"})
    assert bad.status_code == 400 and set(bad.json()) == {"error", "messages", "root_causes"}
    rule = {"protocol": "tcp", "ports": "22", "sources": {"addresses": ["0.0.0.0/0"]}}
    refusals = [
        {"name": "fw", "inbound_rules": [rule], "tags": ["no-such-tag"]},
        {"name": "fw"},
        {"name": "-fw", "inbound_rules": [rule]},
        {"name": "fw", "inbound_rules": [{**rule, "ports": "70000"}]},
        {"name": "fw", "inbound_rules": [{**rule, "ports": "90-80"}]},
        {"name": "fw", "inbound_rules": [{"protocol": "tcp", "ports": "22"}]},
        {"name": "fw", "inbound_rules": [{**rule, "protocol": "sctp"}]},
        # `ports` is required on every rule, ICMP's too ("0"): the official spec's firewall_rule_base
        {"name": "fw", "outbound_rules": [{"protocol": "icmp", "destinations": {"addresses": ["::/0"]}}]},
        {"name": "fw", "inbound_rules": [{"protocol": "tcp", "sources": {"addresses": ["0.0.0.0/0"]}}]},
    ]
    for body in refusals:
        assert _err(await api.post("/firewalls", json=body))[:2] == (400, "bad_request"), body
    icmp = {"protocol": "icmp", "ports": "0", "destinations": {"addresses": ["0.0.0.0/0"]}}
    with_ports = await api.post("/firewalls", json={"name": "fw-icmp", "outbound_rules": [icmp]})
    assert with_ports.status_code == 202
    made = await api.post("/firewalls", json={"name": "fw", "inbound_rules": [rule], "tags": ["fw-a"]})
    assert made.status_code == 202
    fw = made.json()["firewall"]
    assert fw["tags"] == ["fw-a"] and fw["droplet_ids"] == [] and fw["status"] in ("waiting", "succeeded")
    twin = await api.post("/firewalls", json={"name": "fw", "inbound_rules": [rule]})  # names not unique
    assert twin.status_code == 202
    assert [f["name"] for f in (await api.get("/firewalls")).json()["firewalls"]] == ["fw-icmp", "fw", "fw"]
    assert (await api.delete("/tags/fw-a")).status_code == 204  # untags the firewall too
    assert (await api.get(f"/firewalls/{fw['id']}")).json()["firewall"]["tags"] == []
    assert _err(await api.delete("/tags/fw-a"))[0] == 404
    assert (await api.delete(f"/firewalls/{fw['id']}")).status_code == 204
    assert _err(await api.delete(f"/firewalls/{fw['id']}"))[:2] == (404, "not_found")


async def test_account_keys_by_fingerprint_and_the_listing_limit(api: httpx.AsyncClient,
                                                                  sim: FakeCloudServer) -> None:
    key = await add_key(api, OTHER_KEY)
    assert key["fingerprint"].count(":") == 15 and key["public_key"] == public(OTHER_KEY)
    dup = await api.post("/account/keys", json={"name": "again", "public_key": public(OTHER_KEY)})
    assert _err(dup) == (422, "unprocessable_entity", "SSH Key is already in use on your account")
    assert (await api.get(f"/account/keys/{key['fingerprint']}")).json()["ssh_key"]["id"] == key["id"]
    assert _err(await api.post("/account/keys", json={"name": "x", "public_key": "not a key"}))[0] == 422
    sim.admin.configure(time_scale=1.0)  # the documented windows, at real speed
    for _ in range(10):
        assert (await api.get("/account/keys")).status_code == 200
    r = await api.get("/account/keys")
    assert _err(r)[:2] == (429, "too_many_requests") and float(r.headers["retry-after"]) > 0
    assert (await api.get(f"/account/keys/{key['id']}")).status_code == 200  # only the listing is limited
    assert (await api.delete(f"/account/keys/{key['id']}")).status_code == 204
    assert _err(await api.get(f"/account/keys/{key['id']}"))[0] == 404


async def test_burst_limit_429_has_retry_after(burst_limited: FakeCloudServer) -> None:
    async with client(burst_limited) as api:
        for _ in range(3):
            assert (await api.get("/account")).status_code == 200
        r = await api.get("/sizes")
    assert _err(r) == (429, "too_many_requests", "API Rate limit exceeded.")
    assert 0 < float(r.headers["retry-after"]) <= 60
    assert r.headers["ratelimit-remaining"] == "0"


async def test_hourly_limit_429_has_no_retry_after_but_a_reset(hourly_limited: FakeCloudServer) -> None:
    async with client(hourly_limited) as api:
        remaining = [(await api.get("/account")).headers["ratelimit-remaining"] for _ in range(3)]
        r = await api.get("/account")
    assert remaining == ["2", "1", "0"]
    assert _err(r) == (429, "too_many_requests", "API Rate limit exceeded.")
    assert "retry-after" not in r.headers
    assert time.time() + 3000 < int(r.headers["ratelimit-reset"]) <= time.time() + 3601

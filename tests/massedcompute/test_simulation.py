"""The simulated Massed Compute API: its documented shapes, what it refuses, its quirks, its 429."""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx

from fakeclouds.server import FakeCloudServer
from tests.massedcompute.conftest import (
    NAME,
    PREFIX,
    add_key,
    instance,
    launch,
    ssh_run,
    wait_booted,
    wait_gone,
)


def _code(r: httpx.Response) -> str:
    code: str = r.json()["error"]["code"]
    return code


async def test_auth(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    ok = await api.post("/account/token/validation")
    assert ok.status_code == 200 and ok.json() == {"message": "Valid Token"}
    async with httpx.AsyncClient(base_url=f"{sim.url}{PREFIX}") as anonymous:
        wrong: list[dict[str, str]] = [{}, {"Authorization": "Bearer wrong"},
                                       {"Authorization": f"Basic {sim.tokens[NAME]}"}]
        for headers in wrong:
            r = await anonymous.get("/gpu-inventory", headers=headers)
            assert r.status_code == 401 and _code(r) == "unauthorized", headers
        r = await anonymous.post("/instance/launch", json={"imageId": 1},
                                 headers={"Authorization": "Bearer x"})
        assert r.status_code == 401  # auth before the body is looked at


async def test_inventory_shape_follows_stock(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    sim.admin.set_stock("gpu_1x_l40", "us-central-3", 0, facade=NAME)
    inv = (await api.get("/gpu-inventory")).json()["gpu_inventory"]
    assert inv["gpu_1x_l40"] == {
        "instance_type": {"name": "gpu_1x_l40", "description": "1x NVIDIA L40 (48 GB)",
                          "price_cents_per_hour": 99,
                          "specs": {"vcpu_count": 16, "memory_gib": 64, "storage_gb": 512}},
        "regions_with_capacity_available": [{"name": "us-central-1", "description": "US Central 1"}],
        "capacity_available": 3,
    }
    assert [r["name"] for r in inv["gpu_1x_h100"]["regions_with_capacity_available"]] == ["us-central-1"]
    images = (await api.get("/images")).json()["images"]
    assert {"id": 7, "name": "Art"}.items() <= next(i for i in images if i["id"] == 7).items()


async def test_ssh_keys(api: httpx.AsyncClient) -> None:
    key = await add_key(api, "mine")
    assert set(key) == {"id", "name", "publicKey", "created"}
    r = await api.post("/ssh-keys", json={"name": "mine", "publicKey": key["publicKey"]})
    assert r.status_code == 409 and _code(r) == "ssh_key_exists"
    r = await api.post("/ssh-keys", json={"name": "bad", "publicKey": "ssh-rsa not-a-key"})
    assert r.status_code == 400 and _code(r) == "invalid_public_key"
    r = await api.post("/ssh-keys", json={"name": "nokey"})
    assert r.status_code == 400 and _code(r) == "invalid_request"
    listed = (await api.get("/ssh-keys")).json()["sshKeys"]
    assert [k["name"] for k in listed] == ["mine"]
    assert (await api.delete(f"/ssh-keys/{key['id']}")).status_code == 200
    r = await api.delete(f"/ssh-keys/{key['id']}")
    assert r.status_code == 404 and _code(r) == "not_found"


async def test_launch_refusals_make_nothing(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    await add_key(api, "k1")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"productName": "gpu_9x_nope"}, "invalid_product"),
        ({"imageId": 999}, "invalid_image"),
        ({"regionName": "mars-1"}, "invalid_region"),
        ({"sshKeys": ["k1", "missing"]}, "invalid_ssh_key"),
        ({"coupon": "FREE"}, "invalid_coupon"),
        ({"imageId": "1"}, "invalid_request"),  # an integer, not a string that looks like one
        ({"sshKey": ["k1"]}, "invalid_request"),  # the doc page's older field name: unknown here
        ({"instanceName": "n" * 65}, "invalid_request"),
    ]
    for fields, code in cases:
        r = await launch(api, **fields)
        assert r.status_code == 400 and _code(r) == code, (fields, r.text)
    r = await api.post("/instance/launch", json={"productName": "gpu_1x_a6000", "regionName": "any"})
    assert r.status_code == 400 and _code(r) == "invalid_request"  # imageId is required
    r = await api.post("/instance/launch", content=b"not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert sim.admin.machines() == []


async def test_lifecycle_rented_before_booted(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    await add_key(api, "k1")
    # The quirk: a VM is "rented" from the start; only os_booted says it is up. Read on a VM held
    # booting (a 0.2 s boot can be over before the first read on a busy box), gone before
    # the one that boots.
    sim.admin.configure(hold_boots=True)
    r = await launch(api, instanceName="job-0", sshKeys=["k1"])
    assert r.status_code == 200, r.text
    slow = r.json()["instanceUuid"]
    booting = await instance(api, slow)
    assert (booting["status"], booting["os_booted"], booting["ip"]) == ("rented", 0, None)
    assert (await api.post("/instance/terminate", json={"instanceUuids": [slow]})).status_code == 200
    await wait_gone(api, slow)
    sim.admin.configure(hold_boots=False)
    r = await launch(api, instanceName="job-1", sshKeys=["k1"], command="echo started > ran.txt")
    assert r.status_code == 200, r.text
    uuid_ = r.json()["instanceUuid"]
    inst = await wait_booted(api, uuid_)
    assert inst["status"] == "rented" and inst["active"] == 1
    assert ipaddress.ip_address(inst["ip"]).is_loopback and inst["ip"] != "127.0.0.1"
    assert inst["username"] == "Ubuntu" and inst["password"]  # documented: cleartext password
    assert inst["name"] == "job-1" and inst["image"]["id"] == 1
    assert inst["command_startup"] == "echo started > ran.txt"
    assert (inst["product_name"], inst["region_name"]) == ("gpu_1x_a6000", "us-central-1")
    assert [i["uuid"] for i in (await api.get("/instance")).json()["runningInstances"]] == [uuid_]
    # SSH on 22 at `ip` with the named key, as the login user; the startup command ran at boot.
    assert (await ssh_run(inst["ip"], "cat ran.txt")).strip() == "started"

    r = await api.post("/instance/terminate", json={"instanceUuids": [uuid_]})
    assert r.status_code == 200
    assert (await api.post("/instance/terminate", json={"instanceUuids": [uuid_]})).status_code in (200, 404)
    await wait_gone(api, uuid_)
    r = await api.post("/instance/terminate", json={"instanceUuids": [uuid_]})
    assert r.status_code == 404 and _code(r) == "not_found"
    assert (await api.get("/instance")).json()["runningInstances"] == []
    r = await api.post("/instance/terminate", json={"instanceUuids": []})
    assert r.status_code == 400


async def test_any_region_and_capacity(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    sim.admin.set_stock("gpu_1x_h100", "us-central-1", 1, facade=NAME)
    r = await launch(api, productName="gpu_1x_h100", regionName="any")
    assert r.status_code == 200
    assert (await instance(api, r.json()["instanceUuid"]))["region_name"] == "us-central-1"
    r = await launch(api, productName="gpu_1x_h100", regionName="any")
    assert r.status_code == 400 and _code(r) == "insufficient_capacity"
    r = await launch(api, productName="gpu_1x_h100", regionName="us-central-3")  # not sold there
    assert _code(r) == "insufficient_capacity"
    sim.admin.set_stock("gpu_1x_a6000", "us-central-1", 0, facade=NAME)
    r = await launch(api, regionName="any")
    assert (await instance(api, r.json()["instanceUuid"]))["region_name"] == "us-central-3"


async def test_names_are_not_unique(api: httpx.AsyncClient) -> None:
    a, b = await launch(api, instanceName="same"), await launch(api, instanceName="same")
    assert a.status_code == b.status_code == 200
    listed = (await api.get("/instance")).json()["runningInstances"]
    assert [i["name"] for i in listed] == ["same", "same"]


async def test_billing_and_quota_refusals(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    sim.engine.facade_state[NAME]["billing_configured"] = False
    r = await launch(api)
    assert r.status_code == 402 and _code(r) == "billing_not_configured"
    sim.engine.facade_state[NAME]["billing_configured"] = True
    sim.admin.configure(quota={NAME: 0})
    r = await launch(api)
    assert r.status_code == 403 and _code(r) == "instance_limit_reached"
    assert sim.admin.machines() == []


async def test_dead_vm_is_error(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    uuid_ = (await launch(api)).json()["instanceUuid"]
    await wait_booted(api, uuid_)
    sim.admin.kill(uuid_)
    assert (await instance(api, uuid_))["status"] == "error"


async def test_rate_limit_answers_429_with_retry_after(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    sim.admin.configure(time_scale=1.0)  # the declared 120 calls a minute, at real speed
    try:
        statuses = [(await api.get("/images")) for _ in range(121)]
    finally:
        sim.admin.configure(time_scale=0.001)
    assert [r.status_code for r in statuses[:120]] == [200] * 120
    refused = statuses[120]
    assert refused.status_code == 429 and _code(refused) == "rate_limited"
    assert float(refused.headers["Retry-After"]) > 0

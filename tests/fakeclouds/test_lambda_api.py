from __future__ import annotations

import ipaddress
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds.admin import FakeCloudAdmin
from fakeclouds.server import FakeCloudServer
from tests.fakeclouds.helpers import lambda_key, launch_lambda, wait_gone, wait_lambda


def _code(r: httpx.Response) -> str:
    return r.json()["error"]["code"]


async def test_bad_token_is_invalid_api_key(cloud: FakeCloudServer, lam: httpx.AsyncClient) -> None:
    r = await lam.get("/instances", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and _code(r) == "global/invalid-api-key"


async def test_instance_types_shape(lam: httpx.AsyncClient, admin: FakeCloudAdmin) -> None:
    admin.set_stock("gpu_1x_a10", "us-west-1", 0)
    data = (await lam.get("/instance-types")).json()["data"]
    a10 = data["gpu_1x_a10"]
    assert a10["instance_type"] == {
        "name": "gpu_1x_a10", "description": "1x A10 (24 GB PCIe)", "gpu_description": "A10 (24 GB PCIe)",
        "price_cents_per_hour": 75, "specs": {"vcpus": 30, "memory_gib": 200, "storage_gib": 1400, "gpus": 1},
    }
    regions = {r["name"] for r in a10["regions_with_capacity_available"]}
    assert regions == {"us-east-1", "us-south-1", "europe-central-1"}
    assert data["gpu_1x_a100_sxm4"]["instance_type"]["price_cents_per_hour"] == 129
    assert data["gpu_1x_h100_pcie"]["instance_type"]["price_cents_per_hour"] == 249
    assert data["gpu_8x_h100_sxm5"]["instance_type"]["price_cents_per_hour"] == 2392
    assert data["gpu_8x_h100_sxm5"]["instance_type"]["specs"]["gpus"] == 8


async def test_ssh_keys(lam: httpx.AsyncClient, pubkey: str) -> None:
    await lambda_key(lam, pubkey, "mine")
    r = await lam.post("/ssh-keys", json={"name": "mine", "public_key": pubkey})
    assert r.status_code == 400 and _code(r) == "global/invalid-parameters"
    generated = (await lam.post("/ssh-keys", json={"name": "gen"})).json()["data"]
    assert generated["private_key"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    keys = (await lam.get("/ssh-keys")).json()["data"]
    assert {k["name"] for k in keys} >= {"mine", "gen"} and all("private_key" not in k for k in keys)
    assert (await lam.delete(f"/ssh-keys/{generated['id']}")).status_code == 200
    r = await lam.delete(f"/ssh-keys/{generated['id']}")
    assert r.status_code == 404 and _code(r) == "global/not-found"  # v1.10's generic 404


async def test_launch_get_list_terminate(lam: httpx.AsyncClient, admin: FakeCloudAdmin, pubkey: str) -> None:
    # Booting: read on a machine held booting (a 0.1 s boot can be over before the
    # first read on a busy box), gone before the one that boots is launched.
    await admin.aio.configure(hold_boots=True)
    r = await launch_lambda(lam, pubkey, name="job-0")
    (slow,) = r.json()["data"]["instance_ids"]
    booting = (await lam.get(f"/instances/{slow}")).json()["data"]
    assert booting["status"] == "booting" and "ip" not in booting  # optional: absent while unknown
    assert booting["actions"]["restart"] == {"available": False, "reason_code": "vm-has-not-launched"}
    r = await lam.post("/instance-operations/terminate", json={"instance_ids": [slow]})
    assert r.status_code == 200, r.text
    await wait_gone(lam, f"/instances/{slow}")
    await admin.aio.configure(hold_boots=False)
    r = await launch_lambda(lam, pubkey, name="job-1")
    assert r.status_code == 200, r.text
    (iid,) = r.json()["data"]["instance_ids"]
    inst = await wait_lambda(lam, iid)
    assert "x_sim_ssh_port" not in inst  # like real Lambda: SSH is on port 22 at `ip`
    ip = ipaddress.ip_address(inst["ip"])
    assert ip.is_loopback and inst["ip"] != "127.0.0.1" and inst["private_ip"] == inst["ip"]
    assert inst["name"] == "job-1"
    assert inst["region"]["name"] == "us-east-1" and inst["instance_type"]["name"] == "gpu_1x_a10"
    assert inst["ssh_key_names"] == ["k1"]
    assert [i["id"] for i in (await lam.get("/instances")).json()["data"]] == [iid]
    r = await lam.post("/instance-operations/terminate", json={"instance_ids": [iid]})
    assert r.status_code == 200
    assert [i["status"] for i in r.json()["data"]["terminated_instances"]] == ["terminating"]
    await wait_gone(lam, f"/instances/{iid}")
    assert _code(await lam.get(f"/instances/{iid}")) == "global/object-does-not-exist"
    r = await lam.post("/instance-operations/terminate", json={"instance_ids": [iid]})
    assert r.status_code == 404
    assert (await lam.get("/instances")).json()["data"] == []


async def test_names_are_not_unique(lam: httpx.AsyncClient, pubkey: str) -> None:
    a = await launch_lambda(lam, pubkey, name="same")
    b = await launch_lambda(lam, pubkey, name="same")
    assert a.status_code == b.status_code == 200
    assert a.json()["data"]["instance_ids"] != b.json()["data"]["instance_ids"]
    assert [i["name"] for i in (await lam.get("/instances")).json()["data"]] == ["same", "same"]


async def test_launch_refusals(lam: httpx.AsyncClient, pubkey: str) -> None:
    await lambda_key(lam, pubkey, "k2")
    cases: list[dict[str, Any]] = [
        {"instance_type_name": "gpu_9x_nope"},
        {"region_name": "mars-1"},
        {"ssh_key_names": []},
        {"ssh_key_names": ["k1", "k2"]},
        {"name": "n" * 65},
        {"quantity": 0},
    ]
    for fields in cases:
        r = await launch_lambda(lam, pubkey, **fields)
        assert r.status_code == 400 and _code(r) == "global/invalid-parameters", (fields, r.text)
    r = await lam.post("/instance-operations/launch", json={"region_name": "us-east-1"})
    assert r.status_code == 400 and _code(r) == "global/invalid-parameters"
    # An unknown key is a launch resource that does not exist (the spec lists it under 400 and 404).
    r = await launch_lambda(lam, pubkey, ssh_key_names=["missing"])
    assert r.status_code == 404 and _code(r) == "global/object-does-not-exist"
    assert (await lam.get("/instances")).json()["data"] == []


async def test_out_of_stock_is_insufficient_capacity(lam: httpx.AsyncClient, pubkey: str) -> None:
    ok = await launch_lambda(lam, pubkey, instance_type_name="gpu_8x_h100_sxm5", region_name="us-west-1")
    assert ok.status_code == 200
    r = await launch_lambda(lam, pubkey, instance_type_name="gpu_8x_h100_sxm5", region_name="us-west-1")
    assert r.status_code == 400 and _code(r) == "instance-operations/launch/insufficient-capacity"
    r = await launch_lambda(lam, pubkey, instance_type_name="gpu_8x_h100_sxm5", region_name="us-south-1")
    assert _code(r) == "instance-operations/launch/insufficient-capacity"
    types = (await lam.get("/instance-types")).json()["data"]
    assert types["gpu_8x_h100_sxm5"]["regions_with_capacity_available"] == [
        {"name": "us-east-1", "description": "Virginia, USA"}]


async def test_dead_instance_is_unhealthy(lam: httpx.AsyncClient, admin: FakeCloudAdmin, pubkey: str) -> None:
    (iid,) = (await launch_lambda(lam, pubkey)).json()["data"]["instance_ids"]
    await wait_lambda(lam, iid)
    admin.kill(iid)
    inst = (await lam.get(f"/instances/{iid}")).json()["data"]
    assert inst["status"] == "unhealthy"
    with pytest.raises(OSError):  # it keeps its address, but nothing listens there any more
        await asyncssh.connect(inst["ip"], 22, known_hosts=None, agent_path=None, connect_timeout=5)

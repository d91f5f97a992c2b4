"""The simulated Prime Intellect refuses what the real API refuses and models its quirks."""

from __future__ import annotations

import re
import time
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds import primeintellect_api as pia
from fakeclouds.engine import PENDING, RUNNING, Machine
from fakeclouds.server import FakeCloudServer
from tests.eventually import eventually
from tests.fakeclouds.helpers import WITHIN
from tests.primeintellect.conftest import PUBLIC_KEY, USER_KEY

A6000 = "pi-tensordock-1xa6000_48gb-pcie"


def pod_body(name: str | None = "job-1", **pod: Any) -> dict[str, Any]:
    base = {"name": name, "cloudId": "NVIDIA RTX A6000", "gpuType": "A6000_48GB", "socket": "PCIe",
            "gpuCount": 1, "dataCenterId": "US-KS-2", "image": "ubuntu_22_cuda_12"}
    return {"pod": {**base, **pod}, "provider": {"type": "tensordock"}}


async def add_key(api: httpx.AsyncClient, name: str = "mine", key: str = PUBLIC_KEY) -> httpx.Response:
    return await api.post("/ssh_keys/", json={"name": name, "publicKey": key})


async def active(api: httpx.AsyncClient, pod_id: str) -> dict[str, Any]:
    async def ssh_ready() -> dict[str, Any] | None:
        [st] = (await api.get("/pods/status", params={"pod_ids": [pod_id]})).json()["data"]
        return st if isinstance(st["sshConnection"], str) else None
    found: dict[str, Any] = await eventually(ssh_ready, within=WITHIN, what="the pod's SSH connection")
    return found


async def test_bad_token_is_a_401_detail(api: httpx.AsyncClient) -> None:
    r = await api.get("/pods/", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and isinstance(r.json()["detail"], str)
    r = await api.post("/pods/", json=pod_body(), headers={"Authorization": ""})
    assert r.status_code == 401


async def test_availability_is_paginated_and_filtered(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    everything = (await api.get("/availability/gpus", params={"page_size": 100})).json()
    total = everything["totalCount"]
    assert total == len(everything["items"]) >= 5
    seen: list[tuple[str, str]] = []
    for page in range(1, 4):
        body = (await api.get("/availability/gpus", params={"page": page, "page_size": 2})).json()
        assert body["totalCount"] == total and len(body["items"]) <= 2
        seen += [(i["cloudId"], i["dataCenter"]) for i in body["items"]]
    assert seen == [(i["cloudId"], i["dataCenter"]) for i in everything["items"]][:6]

    item = next(i for i in everything["items"]
                if i["cloudId"] == "NVIDIA RTX A6000" and i["dataCenter"] == "US-KS-2")
    assert item["region"] == "united_states" and item["country"] == "US" and item["provider"] == "tensordock"
    assert item["gpuType"] == "A6000_48GB" and item["socket"] == "PCIe" and item["gpuCount"] == 1
    assert item["prices"]["onDemand"] == 0.49 and item["stockStatus"] == "Medium"  # 4 in stock
    assert item["vcpu"]["defaultCount"] > 0 and item["memory"]["defaultCount"] > 0

    canada = (await api.get("/availability/gpus", params={"regions": ["canada"]})).json()["items"]
    assert canada and {i["region"] for i in canada} == {"canada"}
    eights = (await api.get("/availability/gpus", params={"gpu_count": 8})).json()["items"]
    assert [i["gpuCount"] for i in eights] == [8]
    h100 = (await api.get("/availability/gpus", params={"gpu_type": "H100_80GB"})).json()["items"]
    assert h100 and {i["gpuType"] for i in h100} == {"H100_80GB"}

    await sim.admin.aio.set_stock(A6000, "US-KS-2", 0, facade="primeintellect")
    after = (await api.get("/availability/gpus")).json()
    assert after["totalCount"] == total - 1, "a listing out of stock is not listed"
    await sim.admin.aio.set_stock(A6000, "US-KS-2", 1, facade="primeintellect")
    one = await api.get("/availability/gpus",
                        params={"regions": ["united_states"], "gpu_type": "A6000_48GB"})
    assert [i["stockStatus"] for i in one.json()["items"]] == ["Low"]


@pytest.mark.parametrize("params", [{"regions": ["atlantis"]}, {"page_size": 101}, {"page": 0},
                                    {"gpu_count": "two"}])
async def test_availability_refuses_bad_queries_as_fastapi_does(api: httpx.AsyncClient,
                                                                params: dict[str, Any]) -> None:
    r = await api.get("/availability/gpus", params=params)
    assert r.status_code == 422
    [err] = r.json()["errors"]  # the spec's ErrorResponse, not FastAPI's default {detail: [{loc, msg}]}
    assert err["param"].startswith("query.") and err["details"]


async def test_availability_root_needs_its_trailing_slash(api: httpx.AsyncClient) -> None:
    r = await api.get("/availability")
    assert r.status_code == 307 and r.headers["location"].endswith("/availability/")
    grouped = (await api.get("/availability/")).json()
    assert {"A6000_48GB", "A100_80GB", "H100_80GB"} <= set(grouped)


async def test_collections_are_served_at_the_specs_slash_paths(api: httpx.AsyncClient,
                                                               sim: FakeCloudServer) -> None:
    """The vendor's OpenAPI has `/pods/` and `/ssh_keys/`: served; the slashless forms 307 there, as a
    FastAPI server does. The `slashless` reading turns it around (which one the real server takes is
    unconfirmed)."""
    for path in ("/pods/", "/ssh_keys/"):
        assert (await api.get(path)).status_code == 200, path
        moved = await api.get(path.rstrip("/"), params={"offset": 0})
        assert moved.status_code == 307 and moved.headers["location"].endswith(f"/api/v1{path}?offset=0")
    moved = await api.post("/ssh_keys", json={"name": "k", "publicKey": PUBLIC_KEY})
    assert moved.status_code == 307 and (await api.get("/ssh_keys/")).json()["data"] == []  # nothing made
    sim.engine.facade_state[pia.NAME]["slashless"] = True
    for path in ("/pods", "/ssh_keys"):
        assert (await api.get(path)).status_code == 200, path
        moved = await api.get(path + "/")
        assert moved.status_code == 307 and moved.headers["location"].endswith(f"/api/v1{path}")


async def test_ssh_keys_are_account_level(api: httpx.AsyncClient) -> None:
    r = await add_key(api)
    assert r.status_code == 200 and r.json()["publicKey"] == PUBLIC_KEY
    again = await add_key(api, "other-name", PUBLIC_KEY + " some comment")
    assert again.status_code == 400 and "exists" in again.json()["detail"]
    assert (await add_key(api, "bad", "ssh-ed25519 not-base64!")).status_code == 400
    missing = await api.post("/ssh_keys/", json={"name": "x"})
    assert missing.status_code == 422 and missing.json()["errors"][0]["param"] == "body.publicKey"
    keys = (await api.get("/ssh_keys/")).json()["data"]
    assert [(k["name"], k["publicKey"]) for k in keys] == [("mine", PUBLIC_KEY)]
    assert (await api.delete(f"/ssh_keys/{keys[0]['id']}")).status_code == 200
    assert (await api.delete(f"/ssh_keys/{keys[0]['id']}")).status_code == 404


async def test_create_refusals(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    r = await api.post("/pods/", json=pod_body())
    assert r.status_code == 400 and "SSH key" in r.json()["detail"], "no account key: refused"
    await add_key(api)
    r = await api.post("/pods/", json={"pod": {"name": "x", "gpuType": "A100_80GB"},
                                      "provider": {"type": "tensordock"}})
    assert r.status_code == 422 and r.json()["errors"][0]["param"] == "body.pod.cloudId"
    r = await api.post("/pods/", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    r = await api.post("/pods/", json=pod_body(cloudId="NVIDIA RTX 9999"))
    assert r.status_code == 400 and "No GPU configuration" in r.json()["detail"]
    r = await api.post("/pods/", json=pod_body(dataCenterId="EUR-IS-1"))
    assert r.status_code == 400 and "does not offer" in r.json()["detail"]
    for bad in ("has space", "1234", "x" * 65):
        r = await api.post("/pods/", json=pod_body(name=bad))
        assert r.status_code == 400 and "letters" in r.json()["detail"], bad
    assert await sim.admin.aio.machines() == []


async def test_out_of_stock_and_quota_are_worded(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    await add_key(api)
    await sim.admin.aio.set_stock(A6000, "US-KS-2", 0, facade="primeintellect")
    r = await api.post("/pods/", json=pod_body())
    assert r.status_code == 400 and "out of stock" in r.json()["detail"]
    await sim.admin.aio.set_stock(A6000, "US-KS-2", 2, facade="primeintellect")
    await sim.admin.aio.configure(quota={"primeintellect": 0})
    r = await api.post("/pods/", json=pod_body())
    assert r.status_code == 402 and isinstance(r.json()["detail"], str)
    assert await sim.admin.aio.machines() == []


async def test_pod_lifecycle(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    await add_key(api)
    r = await api.post("/pods/", json=pod_body(name="job-1"))
    assert r.status_code == 200, r.text
    pod = r.json()
    assert pod["sshConnection"] == [None] and pod["ip"] == [None]  # its status: at the end
    assert (pod["name"], pod["gpuName"], pod["gpuCount"], pod["providerType"]) == \
        ("job-1", "A6000_48GB", 1, "tensordock")
    st = await active(api, pod["id"])
    assert st["status"] == "ACTIVE" and st["installationProgress"] == 100
    m = re.fullmatch(r"root@127\.0\.0\.1 -p (\d+)", st["sshConnection"])
    assert m and st["ip"] == "127.0.0.1"
    machine = await sim.admin.aio.machine(pod["id"])
    assert int(m.group(1)) == machine["ssh_port"] and machine["region"] == "US-KS-2"

    # Every account key went onto the pod: the user logs in as the pod says, on the mapped port.
    async with asyncssh.connect("127.0.0.1", port=int(m.group(1)), username="root", client_keys=[USER_KEY],
                                known_hosts=None) as conn:
        assert (await conn.run("echo ok", check=True)).stdout == "ok\n"

    listed = (await api.get("/pods/", params={"offset": 0, "limit": 10})).json()
    assert listed["total_count"] == 1 and [p["id"] for p in listed["data"]] == [pod["id"]]
    assert (await api.get(f"/pods/{pod['id']}")).json()["status"] == "ACTIVE"
    both = (await api.get("/pods/status", params={"pod_ids": [pod["id"], "nope"]})).json()["data"]
    assert [s["podId"] for s in both] == [pod["id"]], "unknown ids are left out"

    assert (await api.delete(f"/pods/{pod['id']}")).status_code == 200
    async def gone() -> bool:
        return (await api.get("/pods/status", params={"pod_ids": [pod["id"]]})).json()["data"] == []
    await eventually(gone, within=WITHIN, what="the pod to go")
    r = await api.get(f"/pods/{pod['id']}")
    assert r.status_code == 404 and r.json() == {"detail": "Pod not found"}
    assert (await api.delete(f"/pods/{pod['id']}")).status_code == 404
    assert (await api.get("/pods/")).json()["data"] == []
    history = (await api.get("/pods/history")).json()["data"]
    assert [h["id"] for h in history] == [pod["id"]] and history[0]["terminatedAt"]

    # A pod is PROVISIONING for the first half of its boot, a time of the clock: shown on a pod held
    # booting (half of the module's 0.3 s boot is 150 ms, which a busy CI box once spent
    # between the create and its answer). The phases themselves are checked without a clock in
    # test_pod_phases_while_booting.
    await sim.admin.aio.configure(hold_boots=True)
    r = await api.post("/pods/", json=pod_body(name="job-2"))
    assert r.status_code == 200 and r.json()["status"] == "PROVISIONING", r.text
    assert (await api.delete(f"/pods/{r.json()['id']}")).status_code == 200
    await sim.admin.aio.configure(hold_boots=False)


async def test_pods_page_and_names_are_not_unique(api: httpx.AsyncClient) -> None:
    await add_key(api)
    ids = [(await api.post("/pods/", json=pod_body(name="same"))).json()["id"] for _ in range(3)]
    assert len(set(ids)) == 3
    pages = [(await api.get("/pods/", params={"offset": o, "limit": 2})).json() for o in (0, 2)]
    assert [p["total_count"] for p in pages] == [3, 3]
    assert [pod["id"] for page in pages for pod in page["data"]] == ids
    assert (await api.get("/pods/", params={"limit": 0})).status_code == 422
    assert (await api.get("/pods/status")).status_code == 422


def test_pod_phases_while_booting() -> None:
    """PROVISIONING, then ACTIVE while the image installs with no SSH yet, then ACTIVE with SSH."""
    now = time.time()
    m = Machine(id="p1", facade=pia.NAME, name="n", instance_type=A6000, region="US-KS-2", spot=False,
                ssh_user="root", public_keys=[PUBLIC_KEY], price_per_hour=0.49, created_at=now,
                boot_at=now + 60)
    assert (pia.pod_json(m)["status"], pia.pod_json(m)["sshConnection"]) == ("PROVISIONING", [None])
    m.created_at = now - 100  # past half of its boot (at now - 20)
    installing = pia.pod_json(m)
    assert (installing["status"], installing["installationStatus"], installing["sshConnection"]) == \
        ("ACTIVE", "ACTIVE", [None])  # InstallationStatusEnum's word while installing (no INSTALLING)
    m.status, m.address, m.ssh_port = RUNNING, "127.0.0.1", 2222
    assert pia.status_json(m)["sshConnection"] == "root@127.0.0.1 -p 2222"
    m.status, m.stuck = PENDING, True
    assert pia.pod_json(m)["status"] == "PROVISIONING", "a stuck pod never gets past provisioning"


async def test_too_many_requests(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    # The guessed limit (120 a minute per key), its window scaled to 30 s: the 121st call is refused.
    await sim.admin.aio.configure(time_scale=0.5)
    [limit] = pia.FACADE.rate_limits
    for _ in range(limit.calls):
        assert (await api.get("/ssh_keys/")).status_code == 200
    r = await api.get("/ssh_keys/")
    assert r.status_code == 429 and r.json() == {"detail": "Too many requests"}
    assert 0 < float(r.headers["Retry-After"]) <= 30

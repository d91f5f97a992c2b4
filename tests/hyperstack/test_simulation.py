"""The simulated Hyperstack refuses what the real API refuses, answers in its shapes, and models its
quirks (api_key header, environments and key pairs, count required, unique names, statuses, spot
flavors, the per-IP rate limit that blocks every call for a minute)."""

from __future__ import annotations

import ipaddress
import time
from typing import Any

import httpx
import pytest

from fakeclouds import hyperstack_api
from fakeclouds.engine import Machine
from fakeclouds.server import FakeCloudServer
from tests.eventually import eventually
from tests.hyperstack.conftest import OTHER_KEY, USER_KEY, public

VMS = "/core/virtual-machines"


def _err(r: httpx.Response) -> tuple[int, str]:
    body = r.json()
    assert body["status"] is False and isinstance(body["message"], str) and body["message"]
    return r.status_code, body["error_reason"]


async def _env(api: httpx.AsyncClient, name: str = "env-ca", region: str = "CANADA-1") -> None:
    r = await api.post("/core/environments", json={"name": name, "region": region})
    assert r.status_code == 200, r.text
    r = await api.post("/core/keypairs", json={"name": f"{name}-key", "environment_name": name,
                                               "public_key": public(USER_KEY)})
    assert r.status_code == 200, r.text


def _vm(name: str, env: str = "env-ca", **extra: Any) -> dict[str, Any]:
    return {"name": name, "environment_name": env, "flavor_name": "n3-A100x1", "key_name": f"{env}-key",
            "count": 1, "assign_floating_ip": True, **extra}


async def _wait(api: httpx.AsyncClient, vm_id: int, done: Any, within: float = 15.0) -> list[Any]:
    seen: list[Any] = []

    async def read() -> httpx.Response:
        r = await api.get(f"{VMS}/{vm_id}")
        seen.append(r.json().get("instance") if r.status_code == 200 else None)
        return r

    await eventually(read, until=done, within=within, what=f"VM {vm_id}",
                     detail=lambda: [s and s["status"] for s in seen])
    return seen


async def test_the_key_goes_in_an_api_key_header_and_errors_have_hyperstacks_shape(
        sim: FakeCloudServer) -> None:
    base = sim.url + hyperstack_api.FACADE.prefix
    async with httpx.AsyncClient(base_url=base) as raw:
        token = sim.tokens["hyperstack"]
        assert _err(await raw.get("/core/flavors")) == (401, "unauthorized")
        assert _err(await raw.get("/core/flavors", headers={"Authorization": f"Bearer {token}"})) == \
            (401, "unauthorized")
        assert _err(await raw.get("/core/flavors", headers={"api_key": "wrong"})) == (401, "unauthorized")
        assert (await raw.get("/core/flavors", headers={"api_key": token})).status_code == 200


async def test_environments_and_key_pairs(api: httpx.AsyncClient) -> None:
    assert _err(await api.post("/core/environments", json={"name": "e", "region": "MARS-1"})) == \
        (400, "bad_request")
    await _env(api)
    assert _err(await api.post("/core/environments", json={"name": "env-ca", "region": "US-1"})) == \
        (409, "already_exist")
    avail = (await api.get("/core/environments/name-availability/env-ca")).json()
    assert avail["available"] is False and avail["name"] == "env-ca"
    [env] = (await api.get("/core/environments", params={"search": "env-ca"})).json()["environments"]
    assert env["region"] == "CANADA-1" and isinstance(env["id"], int)
    key = {"name": "env-ca-key", "environment_name": "env-ca", "public_key": public(USER_KEY)}
    assert _err(await api.post("/core/keypairs", json=key)) == (409, "already_exist")
    nowhere, bad_key = {**key, "environment_name": "nope"}, {**key, "name": "x", "public_key": "ssh-rsa nope"}
    assert _err(await api.post("/core/keypairs", json=nowhere)) == (404, "not_found")
    assert _err(await api.post("/core/keypairs", json=bad_key)) == (400, "bad_request")
    [kp] = (await api.get("/core/keypairs")).json()["keypairs"]
    assert kp["environment"]["name"] == "env-ca" and kp["fingerprint"]
    assert (await api.delete(f"/core/keypair/{kp['id']}")).status_code == 200  # singular path
    assert _err(await api.delete(f"/core/keypair/{kp['id']}")) == (404, "not_found")


async def test_create_refusals(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    await _env(api)
    await _env(api, "env-us", "US-1")
    body = _vm("vm-a")
    without_count = {k: v for k, v in body.items() if k != "count"}
    assert _err(await api.post(VMS, json=without_count)) == (400, "bad_request")
    assert _err(await api.post(VMS, json={**body, "environment_name": "nope"})) == \
        (404, "not_found")
    # a key pair belongs to its environment
    assert _err(await api.post(VMS, json={**body, "key_name": "env-us-key"})) == \
        (404, "not_found")
    for bad in ({"flavor_name": "n3-L40x1"},  # not sold in CANADA-1
                {"flavor_name": "n3-H100x1-spot"},  # no spot flavor of it
                {"image_name": "Windows 95"},
                {"name": "a name with spaces"},
                {"security_rules": [{"direction": "ingress", "ethertype": "IPv4", "protocol": "tcpp",
                                     "remote_ip_prefix": "0.0.0.0/0"}]},
                {"security_rules": [{"direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
                                     "remote_ip_prefix": "0.0.0.0/0", "port_range_min": 90,
                                     "port_range_max": 80}]}):
        assert _err(await api.post(VMS, json={**body, **bad})) == (400, "bad_request"), bad
    sim.admin.set_stock("n3-A100x1", "CANADA-1", 0)
    assert _err(await api.post(VMS, json=body)) == (400, "out_of_stock")
    assert sim.admin.live_machines() == []


async def test_vm_lifecycle_names_labels_and_rules(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    await _env(api)
    rule = {"direction": "ingress", "ethertype": "IPv4", "protocol": "tcp", "remote_ip_prefix": "0.0.0.0/0",
            "port_range_min": 22, "port_range_max": 22}
    r = await api.post(VMS, json=_vm("vm-a", labels=["team=a", "x"], security_rules=[rule]))
    assert r.status_code == 200, r.text
    [vm] = r.json()["instances"]
    assert isinstance(vm["id"], int) and vm["status"] in ("CREATING", "BUILD")
    assert vm["labels"] == ["team=a", "x"] and vm["floating_ip"] is None
    assert vm["port_randomization"] is True  # on by default with a floating IP
    assert vm["environment"]["region"] == "CANADA-1" and vm["flavor"]["gpu"] == "A100-80G-PCIe"
    assert [(x["protocol"], x["port_range_min"]) for x in vm["security_rules"]] == [("tcp", 22)]
    # names are unique: the same one again is refused, nothing made
    assert _err(await api.post(VMS, json=_vm("vm-a"))) == (409, "already_exist")
    assert (await api.get(VMS + "/name-availability/vm-a")).json()["available"] is False

    order = ["CREATING", "BUILD", "ACTIVE"]
    seen = await _wait(api, vm["id"], lambda r: r.json()["instance"]["status"] == "ACTIVE")
    statuses = [s["status"] for s in seen if s]
    assert statuses == sorted(statuses, key=order.index), statuses  # never goes back
    active = seen[-1]
    assert active is not None and active["vm_state"] == "active" and active["power_state"] == "RUNNING"
    assert ipaddress.ip_address(active["floating_ip"]).is_loopback and active["fixed_ip"].startswith("10.")

    added = await api.post(f"{VMS}/{vm['id']}/sg-rules",
                           json={**rule, "port_range_min": 8080, "port_range_max": 8080})
    rule_id = added.json()["security_rule"]["id"]
    assert (await api.delete(f"{VMS}/{vm['id']}/sg-rules/{rule_id}")).status_code == 200
    assert _err(await api.delete(f"{VMS}/{vm['id']}/sg-rules/{rule_id}")) == (404, "not_found")

    sim.admin.configure(terminate_delay=60)  # DELETING until the reset below
    assert (await api.delete(f"{VMS}/{vm['id']}")).status_code == 200
    assert (await api.get(f"{VMS}/{vm['id']}")).json()["instance"]["status"] == "DELETING"
    assert _err(await api.delete(f"{VMS}/{vm['id']}")) == (409, "conflict")
    sim.admin.reset()  # the deletion completes
    assert _err(await api.get(f"{VMS}/{vm['id']}")) == (404, "not_found")
    assert _err(await api.delete(f"{VMS}/{vm['id']}")) == (404, "not_found")
    assert _err(await api.get(VMS + "/abc")) == (400, "bad_request")


def test_creating_is_the_first_half_of_the_boot_then_build() -> None:
    now = time.time()
    m = Machine(id="1", facade="hyperstack", name="n", instance_type="n3-A100x1", region="CANADA-1",
                spot=False, ssh_user="ubuntu", public_keys=[], price_per_hour=1.0, created_at=now,
                boot_at=now + 100)
    assert hyperstack_api._status(m)[0] == "CREATING"
    m.created_at, m.boot_at = now - 60, now + 40
    assert hyperstack_api._status(m) == ("BUILD", "building", "NOSTATE")
    m.stuck = True  # an injected stuck boot never gets past CREATING
    assert hyperstack_api._status(m)[0] == "CREATING"


async def test_count_names_every_vm_and_is_all_or_nothing(api: httpx.AsyncClient,
                                                          sim: FakeCloudServer) -> None:
    await _env(api)
    r = await api.post(VMS, json=_vm("batch", count=2))
    assert [vm["name"] for vm in r.json()["instances"]] == ["batch-1", "batch-2"]
    assert _err(await api.post(VMS, json=_vm("batch", count=2))) == (409, "already_exist")
    assert _err(await api.post(VMS, json=_vm("more", count=5))) == (400, "out_of_stock")
    # the page size is `pageSize` in the query (hyperstack-sdk-python virtual_machine_api.py:4461), though
    # the envelope calls it `page_size`; a `page_size` in the query is not read
    listed = (await api.get(VMS, params={"pageSize": 1, "page": 2})).json()
    assert listed["count"] == 2 and [vm["name"] for vm in listed["instances"]] == ["batch-2"]
    assert listed["page_size"] == 1
    assert (await api.get(VMS, params={"page_size": 1})).json()["page_size"] == 20
    assert len(sim.admin.live_machines()) == 2


async def test_flavors_stocks_and_pricebook_follow_the_engine(api: httpx.AsyncClient,
                                                              sim: FakeCloudServer) -> None:
    sim.admin.set_stock("n3-A100x1", "CANADA-1", 0)
    data = (await api.get("/core/flavors", params={"region": "CANADA-1"})).json()["data"]
    assert {g["region_name"] for g in data} == {"CANADA-1"}
    flavors = {f["name"]: f for g in data for f in g["flavors"]}
    assert flavors["n3-A100x1"]["stock_available"] is False and flavors["n3-A100x1"]["gpu"] == "A100-80G-PCIe"
    assert flavors["n3-A100x1-spot"]["labels"] == [{"id": 1, "label": "spot"}]
    assert "n3-H100x1-spot" not in flavors and flavors["n3-RTX-A6000x1"]["stock_available"] is True
    assert _err(await api.get("/core/flavors", params={"region": "MARS-1"})) == (400, "bad_request")
    stocks = {s["region"]: {m["model"]: m for m in s["models"]}
              for s in (await api.get("/core/stocks")).json()["stocks"]}
    assert stocks["CANADA-1"]["A100-80G-PCIe"]["configurations"]["1x"] == 0
    assert stocks["US-1"]["H100-80G-SXM5"]["configurations"]["8x"] == 1
    assert stocks["US-1"]["H100-80G-SXM5"]["available"] == "8"
    prices = {p["name"]: p["value"] for p in (await api.get("/pricebook")).json()}
    assert prices["A100-80G-PCIe"] == 1.35 and prices["A100-80G-PCIe-spot"] < 1.35
    assert prices["H100-80G-SXM5"] == 2.4  # per GPU-hour


async def test_a_spot_flavor_makes_a_spot_machine(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    await _env(api)
    r = await api.post(VMS, json=_vm("cheap", flavor_name="n3-A100x1-spot"))
    [vm] = r.json()["instances"]
    assert vm["flavor"]["name"] == "n3-A100x1-spot"
    assert sim.admin.machine(str(vm["id"]))["spot"] is True


async def test_user_data_keys_are_authorized(api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    await _env(api)
    user_data = f"#cloud-config\nssh_authorized_keys:\n  - {public(OTHER_KEY)}\n"
    [vm] = (await api.post(VMS, json=_vm("ud", user_data=user_data))).json()["instances"]
    assert sim.admin.machine(str(vm["id"]))["public_keys"] == [public(USER_KEY), public(OTHER_KEY)]


async def test_rate_limit_blocks_every_call_from_the_address_for_a_minute(
        api: httpx.AsyncClient, sim: FakeCloudServer) -> None:
    sim.admin.configure(time_scale=1.0)  # the documented minute, at real speed
    [limit] = hyperstack_api.FACADE.rate_limits
    assert (limit.calls, limit.per_s, limit.by, limit.block_s) == (500, 60, "ip", 60)
    # 499 calls already counted from this address (the server's limiter, filled directly: fast)
    for _ in range(limit.calls - 1):
        sim.engine.limiter.check("hyperstack", [limit], {"ip": "127.0.0.1", "token": "t"}, "list")
    assert (await api.get(VMS)).status_code == 200  # the 500th
    r = await api.get(VMS)
    assert _err(r) == (429, "too_many_requests")
    assert 50 < float(r.headers["Retry-After"]) <= 60
    # now everything from this address is refused, whatever the call or key
    assert _err(await api.get("/pricebook")) == (429, "too_many_requests")
    assert _err(await api.get("/core/flavors", headers={"api_key": "other"})) == (429, "too_many_requests")
    sim.admin.reset()  # a fresh cloud forgets the block
    assert (await api.get("/pricebook")).status_code == 200


@pytest.mark.parametrize("op", ["create", "list", "offers"])
async def test_injected_faults_reach_the_documented_ops(api: httpx.AsyncClient, sim: FakeCloudServer,
                                                        op: str) -> None:
    await _env(api)
    sim.admin.add_fault("hyperstack", op, "server_error", status=503)
    call = {"create": lambda: api.post(VMS, json=_vm("f")),
            "list": lambda: api.get(VMS),
            "offers": lambda: api.get("/core/stocks")}[op]
    assert _err(await call()) == (503, "internal_server_error")
    assert (await call()).status_code == 200

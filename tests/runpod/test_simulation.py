"""The simulated RunPod API v2 refuses what the real one refuses, in its own problem+json format, and
models its quirks: 400 for rules and capacity alike, 402 balance, names not unique, SSH keys through
PUBLIC_KEY / startSsh, the mapped SSH port, per-data-center stock, 429 with its headers."""

from __future__ import annotations

from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds.admin import FakeCloudAdmin
from fakeclouds.runpod_api import NO_CAPACITY, POLICY
from fakeclouds.server import FakeCloudServer
from tests.eventually import eventually
from tests.fakeclouds.helpers import WITHIN
from tests.runpod.conftest import OTHER_KEY, USER_KEY, pod_body, public

A4000 = "1x NVIDIA RTX A4000"
POD = {"include": "AVAILABILITY", "product": "POD"}


def problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    return body


async def running(api: httpx.AsyncClient, pod_id: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        pod: dict[str, Any] = (await api.get(f"/pods/{pod_id}")).json()
        return pod if pod["status"] == "RUNNING" else None
    found: dict[str, Any] = await eventually(check, within=WITHIN, what=f"pod {pod_id} running")
    return found


async def login(pod: dict[str, Any], key: asyncssh.SSHKey) -> str:
    direct = pod["ssh"]["direct"]
    async with asyncssh.connect(direct["host"], direct["port"], username=direct["username"],
                                client_keys=[key], known_hosts=None, agent_path=None,
                                connect_timeout=10) as conn:
        return str((await conn.run("echo ok", check=True)).stdout).strip()


async def test_missing_or_wrong_key_is_401_problem(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    body = problem(await api.get("/pods", headers={"Authorization": "Bearer wrong"}), 401)
    assert body["title"] == "Unauthorized" and "wrong" not in body["detail"]
    async with httpx.AsyncClient(base_url=str(api.base_url)) as anonymous:
        problem(await anonymous.get("/catalog/gpus"), 401)


async def test_catalog_gpus_availability_per_data_center(api: httpx.AsyncClient,
                                                          admin: FakeCloudAdmin) -> None:
    plain = (await api.get("/catalog/gpus")).json()["gpus"]
    a4000 = next(g for g in plain if g["id"] == "NVIDIA RTX A4000")
    assert a4000["price"] == {"secure": 0.25, "community": 0.17} and a4000["memory"] == 16
    assert "availability" not in a4000 and "dataCenters" not in a4000  # only with include=AVAILABILITY
    admin.set_stock(A4000, "EU-RO-1", 0)
    admin.set_stock(A4000, "US-KS-2", 1)
    gpus = (await api.get("/catalog/gpus", params=POD)).json()["gpus"]
    a4000 = next(g for g in gpus if g["id"] == "NVIDIA RTX A4000")
    assert a4000["dataCenters"] == [  # the secure tier's data centers only (cloud defaults to SECURE)
        {"id": "US-KS-2", "name": "US Kansas 2", "availability": "LOW"},
        {"id": "EU-RO-1", "name": "EU Romania 1", "availability": "NONE"}]
    assert a4000["availability"] == "LOW"
    community = (await api.get("/catalog/gpus", params={
        "include": "AVAILABILITY", "product": "POD", "cloud": "COMMUNITY"})).json()["gpus"]
    assert [d["id"] for d in next(g for g in community if g["id"] == "NVIDIA RTX A4000")["dataCenters"]] == [
        "EU-SE-1"]
    eight = (await api.get("/catalog/gpus", params={**POD, "count": 8})).json()
    assert "dataCenters" not in next(g for g in eight["gpus"] if g["id"] == "NVIDIA RTX A4000")  # max 4
    romania = (await api.get("/catalog/gpus", params={
        "include": "AVAILABILITY", "product": "POD", "countryCodes": "RO"})).json()["gpus"]
    assert {g["id"] for g in romania} == {"NVIDIA RTX A4000", "NVIDIA L40S"}  # types without RO drop out
    assert all([d["id"] for d in g["dataCenters"]] == ["EU-RO-1"] for g in romania)


async def test_catalog_refusals(api: httpx.AsyncClient) -> None:
    problem(await api.get("/catalog/gpus", params={"include": "AVAILABILITY"}), 400)  # product required
    problem(await api.get("/catalog/gpus", params={"product": "POD"}), 400)  # only with include
    problem(await api.get("/catalog/gpus", params={"count": 2}), 400)
    problem(await api.get("/catalog/gpus", params={"include": "AVAILABILITY", "product": "POD",
                                                   "countryCodes": "usa"}), 422)
    problem(await api.get("/catalog/datacenters", params={"regions": "ATLANTIS"}), 422)
    europe = {"regions": "EUROPE", "include": "GPU_AVAILABILITY"}
    dcs = (await api.get("/catalog/datacenters", params=europe)).json()["dataCenters"]
    assert {d["id"] for d in dcs} == {"EU-RO-1", "EUR-IS-1", "EU-SE-1"}
    assert all(d["region"] == "EUROPE" and d["gpuAvailability"] for d in dcs)


async def test_pod_lifecycle_and_ssh_on_the_mapped_port(api: httpx.AsyncClient) -> None:
    r = await api.post("/pods", json=pod_body())
    assert r.status_code == 201, r.text
    assert r.headers["RateLimit-Policy"] == POLICY
    pod = r.json()
    assert pod["status"] == "PROVISIONING" and pod["ssh"]["direct"] is None and pod["runtime"] is None
    assert pod["gpu"] == {"id": "NVIDIA RTX A4000", "count": 1} and pod["dataCenterId"] == "US-KS-2"
    assert pod["cloud"] == "SECURE" and pod["cost"] == 0.25
    up = await running(api, pod["id"])
    direct = up["ssh"]["direct"]
    assert direct["host"] == "127.0.0.1" and direct["port"] != 22 and direct["username"] == "root"
    assert up["runtime"]["ports"] == [
        {"private": 22, "public": direct["port"], "type": "tcp", "ip": "127.0.0.1"}]
    assert up["ssh"]["proxy"]["host"] == "ssh.runpod.io"
    assert await login(up, USER_KEY) == "ok"
    with pytest.raises(asyncssh.PermissionDenied):
        await login(up, OTHER_KEY)
    assert [p["id"] for p in (await api.get("/pods")).json()["pods"]] == [pod["id"]]

    r = await api.delete(f"/pods/{pod['id']}")
    assert r.status_code == 204 and r.content == b""
    assert (await api.get("/pods")).json()["pods"] == []  # gone from listings at once
    after = await api.get(f"/pods/{pod['id']}")
    assert after.status_code == 404 or after.json()["status"] == "TERMINATED"
    await eventually(lambda: _is_404(api, pod["id"]), within=WITHIN, what="the deleted pod's 404")
    problem(await api.delete(f"/pods/{pod['id']}"), 404)


async def _is_404(api: httpx.AsyncClient, pod_id: str) -> bool:
    return (await api.get(f"/pods/{pod_id}")).status_code == 404


@pytest.mark.parametrize("fields", [
    {"bogus": 1},
    {"name": ""},
    {"name": None},
    {"image": None},
    {"gpu": {"id": "NVIDIA RTX A4000", "count": 0}},
    {"cloud": "GOLD"},
    {"gpu": {"id": "NVIDIA RTX A4000", "minCudaVersion": "12"}},
])
async def test_schema_violations_are_422_with_errors(api: httpx.AsyncClient, fields: dict[str, Any]) -> None:
    body = problem(await api.post("/pods", json=pod_body(**fields)), 422)
    assert body["errors"]
    assert (await api.get("/pods")).json()["pods"] == []


@pytest.mark.parametrize("fields", [
    {"cpu": {"flavor": "cpu3c"}},
    {"gpu": None},
    {"gpu": {"id": "NVIDIA GeForce GTX 280"}},
    {"dataCenterIds": ["XX-NOPE-1"]},
    {"ports": ["22"]},
    {"gpu": {"id": "NVIDIA RTX A4000", "allowedCudaVersions": ["12.8"], "minCudaVersion": "12.1"}},
])
async def test_rule_violations_are_400(api: httpx.AsyncClient, fields: dict[str, Any]) -> None:
    body = problem(await api.post("/pods", json=pod_body(**fields)), 400)
    assert body["detail"] != NO_CAPACITY
    assert (await api.get("/pods")).json()["pods"] == []


async def test_no_capacity_is_a_400_told_apart_only_by_its_detail(api: httpx.AsyncClient,
                                                                  admin: FakeCloudAdmin) -> None:
    admin.set_stock(A4000, "US-KS-2", 0)
    body = problem(await api.post("/pods", json=pod_body()), 400)
    assert body["detail"] == NO_CAPACITY and "errors" not in body
    # A community data center has no secure hosts: asked for with the default SECURE tier, no capacity.
    refused = problem(await api.post("/pods", json=pod_body(dataCenterIds=["EU-SE-1"])), 400)
    assert refused["detail"] == NO_CAPACITY
    r = await api.post("/pods", json=pod_body(dataCenterIds=["EU-SE-1"], cloud="COMMUNITY"))
    assert r.status_code == 201 and r.json()["cost"] == 0.17
    anywhere = await api.post("/pods", json=pod_body(dataCenterIds=[]))  # the scheduler chooses
    assert anywhere.status_code == 201 and anywhere.json()["dataCenterId"] == "EU-RO-1"


async def test_balance_is_402(api: httpx.AsyncClient, admin: FakeCloudAdmin) -> None:
    admin.configure(quota={"runpod": 0})
    assert problem(await api.post("/pods", json=pod_body()), 402)["title"] == "Payment Required"


async def test_names_are_not_unique(api: httpx.AsyncClient) -> None:
    a = await api.post("/pods", json=pod_body(name="same"))
    b = await api.post("/pods", json=pod_body(name="same"))
    assert a.status_code == b.status_code == 201 and a.json()["id"] != b.json()["id"]
    assert [p["name"] for p in (await api.get("/pods")).json()["pods"]] == ["same", "same"]


async def test_ssh_keys_reach_the_pod_through_public_key(api: httpx.AsyncClient) -> None:
    problem(await api.put("/account/ssh-keys", json={"keys": ["not a key"]}), 422)
    r = await api.put("/account/ssh-keys", json={"keys": [public(OTHER_KEY)]})
    assert r.json() == {"keys": [public(OTHER_KEY)]}
    assert (await api.get("/account/ssh-keys")).json() == {"keys": [public(OTHER_KEY)]}
    env_unset: dict[str, str] = {}
    account = (await api.post("/pods", json=pod_body(env=env_unset, startSsh=True))).json()  # account keys
    explicit = (await api.post("/pods", json=pod_body(startSsh=True))).json()  # PUBLIC_KEY set: it wins
    neither = (await api.post("/pods", json=pod_body(env=env_unset))).json()  # no startSsh: no key at all
    no_port = (await api.post("/pods", json=pod_body(ports=["8888/http"]))).json()
    assert await login(await running(api, account["id"]), OTHER_KEY) == "ok"
    up = await running(api, explicit["id"])
    assert await login(up, USER_KEY) == "ok"
    with pytest.raises(asyncssh.PermissionDenied):
        await login(up, OTHER_KEY)
    up = await running(api, neither["id"])
    for key in (USER_KEY, OTHER_KEY):
        with pytest.raises(asyncssh.PermissionDenied):
            await login(up, key)
    up = await running(api, no_port["id"])
    assert up["ssh"]["direct"] is None  # 22/tcp not exposed: no direct SSH
    assert up["runtime"]["ports"] == [{"private": 8888, "public": None, "type": "http", "ip": None}]


async def test_dead_pod_is_error_and_actions(api: httpx.AsyncClient, admin: FakeCloudAdmin) -> None:
    pod = (await api.post("/pods", json=pod_body())).json()
    await running(api, pod["id"])
    problem(await api.post(f"/pods/{pod['id']}/action", json={"action": "start"}), 409)  # not while RUNNING
    problem(await api.post(f"/pods/{pod['id']}/action", json={"action": "explode"}), 422)
    admin.kill(pod["id"])
    dead = (await api.get(f"/pods/{pod['id']}")).json()
    assert (dead["status"], dead["actions"], dead["ssh"]["direct"]) == ("ERROR", ["start", "terminate"], None)
    r = await api.post(f"/pods/{pod['id']}/action", json={"action": "terminate"})
    assert r.status_code == 204
    problem(await api.get("/pods/no-such-pod"), 404)


async def test_injected_faults_use_its_error_format(api: httpx.AsyncClient, admin: FakeCloudAdmin) -> None:
    admin.add_fault("runpod", "create", "lose_response")
    problem(await api.post("/pods", json=pod_body()), 504)
    assert len((await api.get("/pods")).json()["pods"]) == 1  # the create took effect all the same
    admin.add_fault("runpod", "list", "server_error", status=503)
    problem(await api.get("/pods"), 503)
    admin.add_fault("runpod", "create", "capacity")
    assert problem(await api.post("/pods", json=pod_body()), 400)["detail"] == NO_CAPACITY


async def test_429_with_retry_after_and_ratelimit_headers(api: httpx.AsyncClient,
                                                           admin: FakeCloudAdmin) -> None:
    admin.configure(time_scale=1.0)  # the documented 60 calls per minute, at real speed
    for _ in range(60):
        ok = await api.get("/pods")
        assert ok.status_code == 200 and ok.headers["RateLimit-Policy"] == POLICY
    r = await api.get("/catalog/gpus")  # every call counts against the same per-key windows
    body = problem(r, 429)
    assert body["detail"] == "rate limit exceeded for the minute window"
    assert float(r.headers["Retry-After"]) > 0
    assert r.headers["RateLimit"].startswith('"minute";r=0;t=')
    assert r.headers["RateLimit-Policy"] == '"minute";q=60;w=60, "hour";q=3000;w=3600, "day";q=50000;w=86400'

"""The simulated Lambda speaks the official OpenAPI 1.10: what it refuses, its firewall rulesets,
tags, images, `preempted`, Basic auth, and its documented rate limits (as 429s)."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

from fakeclouds import lambda_api
from fakeclouds.server import FakeCloudServer
from tests import simclouds
from tests.eventually import eventually
from tests.lambda_.conftest import add_key, code, launch_body

WITHIN = 20.0


async def get_until(lam: httpx.AsyncClient, path: str, done: Any) -> httpx.Response:
    """GET `path` until `done(response)`."""
    return await until_answered(lambda: lam.get(path), done, f"GET {path}")


async def until_answered(call: Any, done: Any, what: str) -> httpx.Response:
    """`call()` again until `done(response)`; a failure shows the last response's body."""
    last: list[httpx.Response] = []

    async def answer() -> httpx.Response:
        last[:] = [await call()]
        return last[0]

    r: httpx.Response = await eventually(answer, until=done, within=WITHIN, what=what,
                                         detail=lambda: last[0].text if last else "")
    return r


async def launch(lam: httpx.AsyncClient, **fields: Any) -> str:
    r = await lam.post("/instance-operations/launch", json=launch_body(**fields))
    assert r.status_code == 200, r.text
    return str(r.json()["data"]["instance_ids"][0])


def status_is(status: str) -> Any:
    return lambda r: r.status_code == 200 and r.json()["data"]["status"] == status


async def test_basic_auth_is_accepted_as_the_spec_says(sim: FakeCloudServer, lam: httpx.AsyncClient) -> None:
    token = sim.tokens["lambda"]
    url = simclouds.endpoint(sim, "lambda") + "/instances"
    async with httpx.AsyncClient() as c:
        for header in (f"Basic {base64.b64encode(f'{token}:'.encode()).decode()}", f"Basic {token}",
                       f"Bearer {token}"):
            assert (await c.get(url, headers={"Authorization": header})).status_code == 200, header
        for header in (f"Basic {base64.b64encode(b'wrong:').decode()}", "Bearer wrong", token):
            r = await c.get(url, headers={"Authorization": header})
            assert r.status_code == 401 and code(r) == "global/invalid-api-key"


async def test_rulesets_are_checked_attached_and_refused_while_in_use(sim: FakeCloudServer,
                                                                      lam: httpx.AsyncClient) -> None:
    ssh = {"protocol": "tcp", "port_range": [22, 22], "source_network": "0.0.0.0/0", "description": "ssh"}
    bad_rules = [{**ssh, "port_range": None}, {**ssh, "protocol": "icmp"}, {**ssh, "source_network": "nope"},
                 {**ssh, "port_range": [9, 1]}, {**ssh, "description": "d" * 129}]
    for rule in bad_rules:
        r = await lam.post("/firewall-rulesets", json={"name": "x", "region": "us-east-1", "rules": [rule]})
        assert r.status_code == 400 and code(r) == "global/invalid-parameters", rule
    r = await lam.post("/firewall-rulesets", json={"name": "x", "region": "mars-1", "rules": [ssh]})
    assert r.status_code == 400
    made = (await lam.post("/firewall-rulesets", json={"name": "fw", "region": "us-east-1",
                                                        "rules": [ssh]})).json()["data"]
    assert made["region"] == {"name": "us-east-1", "description": "Virginia, USA"}
    assert made["instance_ids"] == []
    assert [r["name"] for r in sim.admin.side_resources() if r["kind"] == "firewall-ruleset"] == ["fw"]

    await add_key(lam)
    r = await lam.post("/instance-operations/launch", json=launch_body(firewall_rulesets=[{"id": "nope"}]))
    assert r.status_code == 404 and code(r) == "global/object-does-not-exist"
    r = await lam.post("/instance-operations/launch",
                       json=launch_body(region_name="us-west-1", firewall_rulesets=[{"id": made["id"]}]))
    assert r.status_code == 400 and "us-east-1" in r.json()["error"]["message"]  # another region's
    iid = await launch(lam, firewall_rulesets=[{"id": made["id"]}])
    inst = (await lam.get(f"/instances/{iid}")).json()["data"]
    assert inst["firewall_rulesets"] == [{"id": made["id"]}]
    assert (await lam.get(f"/firewall-rulesets/{made['id']}")).json()["data"]["instance_ids"] == [iid]

    sim.admin.configure(terminate_delay=2)  # long enough to see the ruleset refused while terminating
    r = await lam.delete(f"/firewall-rulesets/{made['id']}")
    assert r.status_code == 400 and code(r) == "firewall-rulesets/firewall-ruleset-in-use"
    assert (await lam.post("/instance-operations/terminate", json={"instance_ids": [iid]})).status_code == 200
    r = await lam.delete(f"/firewall-rulesets/{made['id']}")
    assert r.status_code == 400 and code(r) == "firewall-rulesets/firewall-ruleset-in-use"  # terminating
    await get_until(lam, f"/instances/{iid}", lambda r: r.status_code == 404)
    assert (await lam.delete(f"/firewall-rulesets/{made['id']}")).status_code == 200
    r = await lam.get(f"/firewall-rulesets/{made['id']}")
    assert r.status_code == 404 and code(r) == "global/object-does-not-exist"


async def test_global_rules(lam: httpx.AsyncClient) -> None:
    glob = (await lam.get("/firewall-rulesets/global")).json()["data"]
    assert glob["id"] == "global" and {r["protocol"] for r in glob["rules"]} == {"icmp", "tcp"}
    rules = [{"protocol": "tcp", "port_range": [8080, 8080], "source_network": "1.2.3.4",
              "description": "web"}]
    assert (await lam.put("/firewall-rules", json={"data": rules})).json()["data"] == rules  # overwrites all
    assert (await lam.get("/firewall-rulesets/global")).json()["data"]["rules"] == rules


async def test_tags_hostname_and_images(lam: httpx.AsyncClient) -> None:
    await add_key(lam)
    bad: dict[str, Any]
    for bad in ({"tags": [{"key": "Upper", "value": "v"}]}, {"tags": [{"key": "k" * 56, "value": "v"}]},
                {"tags": [{"key": "ok", "value": "v" * 129}]}, {"hostname": "-bad"},
                {"image": {"family": "windows-95"}}, {"image": {}},
                {"image": {"id": lambda_api.image_id("ubuntu-lts", "us-west-1")}},  # another region's
                {"user_data": "#!/bin/sh\n" + "x" * lambda_api.USER_DATA_MAX}):
        r = await lam.post("/instance-operations/launch", json=launch_body(**bad))
        assert r.status_code == 400 and code(r) == "global/invalid-parameters", bad
    tags = [{"key": "gpuprov-key", "value": "k-1"}, {"key": "team:ml", "value": ""}]
    iid = await launch(lam, tags=tags, hostname="head-1", image={"family": "ubuntu-lts"})
    inst = (await lam.get(f"/instances/{iid}")).json()["data"]
    assert inst["tags"] == tags and inst["hostname"] == "head-1"
    by_id = await launch(lam, image={"id": lambda_api.image_id("ubuntu-lts", "us-east-1")})
    assert (await lam.get(f"/instances/{by_id}")).status_code == 200

    images = (await lam.get("/images")).json()["data"]
    first = images[0]
    assert set(first) == {"id", "name", "description", "family", "version", "architecture", "region",
                          "created_time", "updated_time"}
    assert {i["region"]["name"] for i in images} == {r.name for r in lambda_api.REGIONS}
    regions = (await lam.get("/regions")).json()["data"]
    assert {"name": "us-east-1", "description": "Virginia, USA"} in regions


async def test_actions_follow_the_status(sim: FakeCloudServer, lam: httpx.AsyncClient) -> None:
    await add_key(lam)
    iid = await launch(lam)
    active = (await get_until(lam, f"/instances/{iid}", status_is("active"))).json()["data"]
    assert all(a == {"available": True} for a in active["actions"].values()), active["actions"]
    sim.admin.configure(terminate_delay=5)
    out = (await lam.post("/instance-operations/terminate", json={"instance_ids": [iid]})).json()["data"]
    [inst] = out["terminated_instances"]
    assert inst["status"] == "terminating"
    assert inst["actions"]["terminate"] == {"available": False, "reason_code": "vm-is-terminating"}


async def test_preempted_shows_until_terminated_and_holds_its_ruleset(sim: FakeCloudServer,
                                                                        lam: httpx.AsyncClient) -> None:
    await add_key(lam)
    rule = {"protocol": "tcp", "port_range": [22, 22], "source_network": "0.0.0.0/0", "description": "ssh"}
    rs = (await lam.post("/firewall-rulesets", json={"name": "fw", "region": "us-east-1",
                                                      "rules": [rule]})).json()["data"]["id"]
    sim.admin.add_fault("lambda", "create", "preempt", seconds=0)
    iid = await launch(lam, firewall_rulesets=[{"id": rs}])
    inst = (await get_until(lam, f"/instances/{iid}", status_is("preempted"))).json()["data"]
    assert "ip" not in inst
    machine = sim.admin.machine(iid)
    assert (machine["status"], machine["detail"]) == ("terminated", "preempted")  # gone: not billing
    assert [i["status"] for i in (await lam.get("/instances")).json()["data"]] == ["preempted"]
    assert code(await lam.delete(f"/firewall-rulesets/{rs}")) == "firewall-rulesets/firewall-ruleset-in-use"
    out = (await lam.post("/instance-operations/terminate", json={"instance_ids": [iid]})).json()["data"]
    assert [i["status"] for i in out["terminated_instances"]] == ["terminated"]
    assert (await lam.get(f"/instances/{iid}")).status_code == 404
    assert (await lam.delete(f"/firewall-rulesets/{rs}")).status_code == 200

    other = await launch(lam)  # the admin's preempt, at any time
    await get_until(lam, f"/instances/{other}", status_is("active"))
    sim.admin.preempt(other)
    assert (await lam.get(f"/instances/{other}")).json()["data"]["status"] == "preempted"


async def test_upstream_outage_is_a_provider_code(sim: FakeCloudServer, lam: httpx.AsyncClient) -> None:
    sim.admin.add_fault("lambda", "list", "server_error", status=503)
    r = await lam.get("/instances")
    assert r.status_code == 503 and code(r) == "provider/internal-unavailable"


async def test_documented_rate_limits_are_429s(sim: FakeCloudServer, lam: httpx.AsyncClient) -> None:
    """1 request/s and 1 launch per 12 s per key, at real speed (time_scale 1): consecutive calls by
    hand are within the windows. A refused call has no effect; 0 turns the limits off."""
    await add_key(lam)
    sim.admin.configure(time_scale=1.0)
    assert (await lam.get("/instances")).status_code == 200
    r = await lam.get("/instances")
    assert r.status_code == 429 and code(r) == "global/too-many-requests"
    assert 0 < float(r.headers["Retry-After"]) <= 1.0
    # Once the second has passed (polled), one launch; the next launch is refused for 12 s, also once
    # the second has passed again (polled: until the refusal names the launch limit).
    assert (await eventually_post(lam, launch_body())).status_code == 200
    def refused_for_the_launch_limit(r: httpx.Response) -> bool:
        assert r.status_code == 429, r.text
        return "launch rate limit" in r.text

    r = await until_answered(lambda: lam.post("/instance-operations/launch", json=launch_body(name="second")),
                             refused_for_the_launch_limit, "a refusal naming the launch rate limit")
    assert r.status_code == 429 and code(r) == "global/too-many-requests"
    assert 0 < float(r.headers["Retry-After"]) <= 12.0
    assert [m["name"] for m in sim.admin.machines()] == ["job"]  # the refused launch made nothing
    assert lambda_api.rate_limited(sim.engine) >= 2

    sim.admin.configure(time_scale=0)
    for _ in range(3):
        assert (await lam.post("/instance-operations/launch", json=launch_body())).status_code == 200


async def eventually_post(lam: httpx.AsyncClient, body: dict[str, Any]) -> httpx.Response:
    """POST the launch until it is not refused as rate-limited (429)."""
    return await until_answered(lambda: lam.post("/instance-operations/launch", json=body),
                                lambda r: r.status_code != 429, "a launch past the rate limit")


def test_the_facade_declares_the_documented_limits() -> None:
    limits = {(lim.calls, lim.per_s, tuple(sorted(lim.ops))) for lim in lambda_api.FACADE.rate_limits}
    assert limits == {(1, 1.0, ()), (1, 12.0, ("create",)), (5, 60.0, ("create",))}


@pytest.mark.parametrize("path", ["/instances", "/firewall-rulesets", "/images"])
async def test_every_endpoint_wants_the_key(sim: FakeCloudServer, path: str) -> None:
    async with httpx.AsyncClient(base_url=simclouds.endpoint(sim, "lambda")) as c:
        r = await c.get(path)
    assert r.status_code == 401 and code(r) == "global/invalid-api-key"

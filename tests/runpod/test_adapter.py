"""The RunPod adapter's mapping against the simulated API v2: offers per data center (continent or
country regions, tiers, counts), the create body (image, PUBLIC_KEY, 22/tcp), statuses and the mapped
SSH address, problem+json errors onto the taxonomy, idempotency by exact name."""

from __future__ import annotations

import json
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds.admin import FakeCloudAdmin
from fakeclouds.server import FakeCloudServer
from providers.base import (
    AuthError,
    CapacityError,
    InstanceRef,
    InstanceState,
    InvalidRequest,
    Offer,
    OfferQuery,
    QuotaError,
    RateLimited,
    Unsupported,
)
from providers.runpod import DEFAULT_IMAGE, RunPodProvider, parse_instance_type, problem_fields
from tests.eventually import eventually
from tests.fakeclouds.helpers import WITHIN
from tests.runpod.conftest import OTHER_KEY, USER_KEY, adapter, public, spec

A4000 = "1x NVIDIA RTX A4000"


async def offer_in(p: RunPodProvider, zone: str, instance_type: str = A4000) -> Offer:
    found = [o for o in await p.offers(OfferQuery()) if o.zone == zone and o.instance_type == instance_type]
    assert len(found) == 1, found
    return found[0]


async def test_offers_are_per_data_center_with_continent_regions(runpod: RunPodProvider) -> None:
    offers = await runpod.offers(OfferQuery())
    a4000 = [o for o in offers if o.instance_type == A4000]
    assert {(o.zone, o.region) for o in a4000} == {("US-KS-2", "NORTH_AMERICA"), ("EU-RO-1", "EUROPE")}
    o = a4000[0]
    assert o.price_per_hour == 0.25 and not o.spot and o.available
    assert o.gpu is not None and (o.gpu.name, o.gpu.count, o.gpu.memory_gib) == ("A4000", 1, 16.0)
    assert (o.vcpus, o.memory_gib) == (2, 8.0)  # v1's documented per-GPU floors
    assert {x.gpu.name for x in offers if x.gpu} == {"A4000", "RTX4090", "A6000", "L40S", "H100"}
    assert not any("community" in x.instance_type for x in offers)  # Secure Cloud unless the toggle is on
    assert [x.instance_type for x in await runpod.offers(OfferQuery(gpu="h100"))] == [
        "1x NVIDIA H100 80GB HBM3"] * 2
    assert await runpod.offers(OfferQuery(spot=True)) == []


async def test_regions_are_a_continent_or_a_country(runpod: RunPodProvider) -> None:
    us = await runpod.offers(OfferQuery(region="US"))
    assert us and {o.region for o in us} == {"US"} and {o.zone for o in us} == {"US-KS-2", "US-TX-3"}
    north_america = await runpod.offers(OfferQuery(region="NORTH_AMERICA"))
    assert {o.zone for o in north_america} == {"US-KS-2", "US-TX-3", "CA-MTL-1"}
    assert {o.zone for o in await runpod.offers(OfferQuery(region="EUROPE"))} == {"EU-RO-1", "EUR-IS-1"}
    assert await runpod.offers(OfferQuery(region="ASIA")) == []
    assert await runpod.offers(OfferQuery(region="mars-1")) == []


async def test_community_offers_only_with_the_toggle(sim: FakeCloudServer) -> None:
    async with adapter(sim, include_community=True) as p:
        offers = await p.offers(OfferQuery(gpu="a4000"))
    assert sorted((o.instance_type, o.zone, o.price_per_hour) for o in offers) == [
        ("1x NVIDIA RTX A4000", "EU-RO-1", 0.25), ("1x NVIDIA RTX A4000", "US-KS-2", 0.25),
        ("1x NVIDIA RTX A4000 (community)", "EU-SE-1", 0.17)]
    assert parse_instance_type(offers[0].instance_type) == ("NVIDIA RTX A4000", 1, "COMMUNITY")


async def test_gpu_count_and_stock(runpod: RunPodProvider, admin: FakeCloudAdmin) -> None:
    two = await runpod.offers(OfferQuery(gpu="a4000", gpu_count=2))
    assert {(o.instance_type, o.price_per_hour, o.vcpus) for o in two} == {("2x NVIDIA RTX A4000", 0.5, 4)}
    eight = await runpod.offers(OfferQuery(gpu_count=8))
    assert {o.gpu.name for o in eight if o.gpu} == {"A6000", "L40S", "H100"}  # A4000/4090 stop at 4
    admin.set_stock(A4000, "US-KS-2", 0)
    assert [o.zone for o in await runpod.offers(OfferQuery(gpu="a4000"))] == ["EU-RO-1"]
    both = await runpod.offers(OfferQuery(gpu="a4000", include_unavailable=True))
    assert {(o.zone, o.available) for o in both} == {("US-KS-2", False), ("EU-RO-1", True)}


async def test_create_sends_the_keys_image_and_port_and_reports_the_mapped_ssh_port(
        runpod: RunPodProvider, admin: FakeCloudAdmin, sim: FakeCloudServer) -> None:
    offer = await offer_in(runpod, "EU-RO-1")
    # Pending: read on a pod held booting (a 0.3 s boot can be over before the first
    # read on a busy box), deleted before the one that boots.
    admin.configure(hold_boots=True)
    slow = await runpod.create(offer, spec(runpod))
    first = await runpod.get(slow)
    assert first is not None and first.state == InstanceState.PENDING and first.host is None
    await runpod.terminate(slow)
    admin.configure(hold_boots=False)
    s = spec(runpod)
    ref = await runpod.create(offer, s)
    assert (ref.key, ref.region) == (s.key, "EUROPE")
    pod = await raw_pod(sim, ref.instance_id)
    assert pod["name"] == f"gpuprov-{runpod.installation_id}-{s.key}" and pod["image"] == DEFAULT_IMAGE
    assert pod["ports"] == ["22/tcp"] and pod["dataCenterId"] == "EU-RO-1" and pod["cloud"] == "SECURE"
    assert pod["env"]["PUBLIC_KEY"].splitlines() == [public(OTHER_KEY), public(USER_KEY)]
    assert (pod["env"]["GPUPROV_INSTALLATION"], pod["env"]["GPUPROV_KEY"]) == (runpod.installation_id, s.key)

    async def up() -> Any:
        st = await runpod.get(ref)
        return st if st and st.state == InstanceState.RUNNING else None
    st = await eventually(up, within=WITHIN, what="running")
    assert (st.host, st.ssh_user, st.detail, st.instance_type) == ("127.0.0.1", "root", "RUNNING", A4000)
    assert st.ssh_port != 22  # RunPod maps 22/tcp to a random public port
    # The second key of the spec (the user's) logs in on that port, as root.
    async with asyncssh.connect(st.host, st.ssh_port, username="root", client_keys=[USER_KEY],
                                known_hosts=None, agent_path=None, connect_timeout=10) as conn:
        assert (await conn.run("echo hi", check=True)).stdout == "hi\n"

    await runpod.terminate(ref)
    gone = await runpod.get(ref)
    assert gone is None or gone.state == InstanceState.TERMINATED
    await runpod.terminate(ref)  # already gone: success
    assert await runpod.list_owned() == []


async def raw_pod(sim: FakeCloudServer, pod_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        r = await client.get(f"{sim.url}/runpod/v2/pods/{pod_id}",
                             headers={"Authorization": f"Bearer {sim.tokens['runpod']}"})
    pod: dict[str, Any] = r.json()
    return pod


async def test_image_is_the_container_image(runpod: RunPodProvider, sim: FakeCloudServer) -> None:
    offer = await offer_in(runpod, "US-KS-2")
    ref = await runpod.create(offer, spec(runpod, image="ghcr.io/me/trainer:1.2"))
    assert (await raw_pod(sim, ref.instance_id))["image"] == "ghcr.io/me/trainer:1.2"
    with pytest.raises(InvalidRequest):
        await runpod.create(offer, spec(runpod, image="bad image; rm -rf /"))


async def test_refused_before_any_call(runpod: RunPodProvider, sim: FakeCloudServer) -> None:
    offer = await offer_in(runpod, "US-KS-2")
    with pytest.raises(Unsupported):
        await runpod.create(offer, spec(runpod, ports=[8080]))
    with pytest.raises(Unsupported):
        await runpod.create(offer, spec(runpod, user_data="#!/bin/sh\necho hi\n"))
    community = offer.model_copy(update={"instance_type": f"{A4000} (community)", "zone": "EU-SE-1"})
    with pytest.raises(InvalidRequest, match="Community"):
        await runpod.create(community, spec(runpod))
    assert await runpod.list_owned() == []


async def test_no_capacity_and_rule_violations_are_both_400_but_mapped_apart(
        runpod: RunPodProvider, admin: FakeCloudAdmin) -> None:
    offer = await offer_in(runpod, "US-KS-2")
    admin.set_stock(A4000, "US-KS-2", 0)
    with pytest.raises(CapacityError) as cap:
        await runpod.create(offer, spec(runpod))
    assert (cap.value.scope.region, cap.value.scope.zone, cap.value.scope.instance_type) == (
        "NORTH_AMERICA", "US-KS-2", A4000)
    unknown = offer.model_copy(update={"instance_type": "1x NVIDIA GeForce GTX 280"})
    with pytest.raises(InvalidRequest, match="unknown GPU type"):
        await runpod.create(unknown, spec(runpod))
    assert await runpod.list_owned() == []


async def test_balance_rate_limit_and_auth(runpod: RunPodProvider, admin: FakeCloudAdmin,
                                           sim: FakeCloudServer) -> None:
    offer = await offer_in(runpod, "US-KS-2")
    admin.configure(quota={"runpod": 0})
    with pytest.raises(QuotaError) as quota:
        await runpod.create(offer, spec(runpod))
    assert str(quota.value.scope) == "runpod"  # the balance: no offer of this account will launch
    admin.add_fault("runpod", "list", "rate_limit", retry_after=7)
    with pytest.raises(RateLimited) as limited:
        await runpod.list_owned()
    assert limited.value.retry_after == pytest.approx(7.0)
    async with adapter(sim, token="not-the-key") as bad:
        with pytest.raises(AuthError) as denied:
            await bad.verify()
    assert "not-the-key" not in str(denied.value)
    assert (await runpod.verify()).startswith("RunPod API key ")


async def test_idempotency_is_by_exact_name(runpod: RunPodProvider, sim: FakeCloudServer) -> None:
    offer = await offer_in(runpod, "US-KS-2")
    longer = await runpod.create(offer, spec(runpod, "abc-1"))
    short = await runpod.create(offer, spec(runpod, "abc"))  # a prefix of the other's name: not it
    assert short.instance_id != longer.instance_id
    again = await runpod.create(offer, spec(runpod, "abc"))
    assert again.instance_id == short.instance_id
    assert [r.instance_id for r in await runpod.find_all("abc")] == [short.instance_id]
    other = adapter(sim)  # another installation on the same account
    async with other:
        theirs = await other.create(offer, spec(other, "abc"))
        assert theirs.instance_id != short.instance_id
        assert [r.key for r in await other.list_owned()] == ["abc"]
    assert sorted(r.key for r in await runpod.list_owned()) == ["abc", "abc-1"]


async def test_a_dead_pod_is_error(runpod: RunPodProvider, admin: FakeCloudAdmin) -> None:
    ref = await runpod.create(await offer_in(runpod, "US-KS-2"), spec(runpod))
    await admin.aio.wait_status(ref.instance_id, "running")
    admin.kill(ref.instance_id)
    st = await runpod.get(ref)
    assert st is not None and (st.state, st.detail, st.host) == (InstanceState.ERROR, "ERROR", None)


def mocked(pod: dict[str, Any]) -> RunPodProvider:
    """The adapter answering from a fixed pod (states the simulation never shows)."""
    p = adapter_unit()
    p._transport = httpx.MockTransport(lambda req: httpx.Response(200, json=pod))
    return p


def adapter_unit() -> RunPodProvider:
    creds = RunPodProvider.parse_credentials({"api_key": "k"})
    return RunPodProvider(creds, installation_id="abcd1234")


async def test_running_without_a_mapped_ssh_port_is_still_pending() -> None:
    pod = {"id": "p1", "name": "x", "status": "RUNNING", "gpu": {"id": "NVIDIA L40S", "count": 2},
           "cloud": "COMMUNITY", "ssh": {"proxy": None, "direct": None}, "runtime": {"ports": []}}
    ref = InstanceRef(provider="runpod", instance_id="p1", key="k-1")
    async with mocked(pod) as p:
        st = await p.get(ref)
    assert st is not None and st.state == InstanceState.PENDING
    assert st.instance_type == "2x NVIDIA L40S (community)"
    pod["runtime"] = {"ports": [{"private": 22, "public": 40022, "type": "tcp", "ip": "203.0.113.9"}]}
    async with mocked(pod) as p:
        st = await p.get(ref)
    assert st is not None
    assert (st.state, st.host, st.ssh_port) == (InstanceState.RUNNING, "203.0.113.9", 40022)
    pod["status"] = "EXITED"
    async with mocked(pod) as p:
        st = await p.get(ref)
    assert st is not None and st.state == InstanceState.STOPPED


def test_problem_fields_never_quote_a_foreign_body() -> None:
    req = httpx.Request("POST", "https://api.runpod.io/v2/pods")
    html = httpx.Response(502, text="<html>secret-ish proxy page</html>", request=req)
    assert "secret" not in " ".join(problem_fields(html))
    body = {"title": "Bad Request", "status": 400, "detail": "line\n\x1b[31mforged", "errors": ["$: bad"]}
    escaped = httpx.Response(400, request=req, content=json.dumps(body).encode())
    title, detail = problem_fields(escaped)
    assert title == "Bad Request" and "\n" not in detail and "\x1b" not in detail and "$: bad" in detail

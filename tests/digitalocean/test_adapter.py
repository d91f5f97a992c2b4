"""The DigitalOcean adapter against the simulated API: offers, what a create makes (droplet, tag,
firewall, account key), statuses and addresses, 422 capacity vs quota, burst vs hourly 429s,
side resources left without a droplet, pagination."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import httpx
import pytest

from fakeclouds.server import FakeCloudServer
from providers import cloudinit
from providers.base import (
    AuthError,
    CapacityError,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    Offer,
    OfferQuery,
    QuotaError,
    RateLimited,
    Transient,
)
from providers.digitalocean import DigitalOceanProvider, md5_fingerprint
from tests.conformance.checks import WAIT_GONE, WAIT_RUNNING, wait_for
from tests.digitalocean.conftest import OTHER_KEY, USER_KEY, adapter, client, public, spec


def _running(st: InstanceStatus | None) -> bool:
    return st is not None and st.state == InstanceState.RUNNING


def _gone(st: InstanceStatus | None) -> bool:
    return st is None


async def _offer(p: DigitalOceanProvider, slug: str = "gpu-4000adax1-20gb", region: str = "tor1") -> Offer:
    found = [o for o in await p.offers(OfferQuery(region=region)) if o.instance_type == slug]
    assert len(found) == 1, found
    return found[0]


def _side(server: FakeCloudServer, key: str) -> list[tuple[str, str]]:
    return sorted((r["kind"], r["name"]) for r in server.admin.side_resources() if key in r["name"])


async def test_offers_are_gpu_sizes_per_region_in_stock(sim: FakeCloudServer,
                                                        do: DigitalOceanProvider) -> None:
    sim.admin.set_stock("gpu-h100x1-80gb", "nyc2", 0)
    offers = await do.offers(OfferQuery())
    assert all(o.gpu is not None and not o.spot for o in offers)  # the CPU size is not offered
    by = {(o.instance_type, o.region): o for o in offers}
    assert ("gpu-h100x1-80gb", "nyc2") not in by and ("gpu-h100x1-80gb", "atl1") in by
    ada = by[("gpu-4000adax1-20gb", "tor1")]
    assert ada.gpu is not None and (ada.gpu.name, ada.gpu.count, ada.gpu.memory_gib) == ("RTX4000ADA", 1, 20)
    assert (ada.vcpus, ada.memory_gib, ada.price_per_hour) == (8, 32, 0.76)
    h100x8 = by[("gpu-h100x8-640gb", "atl1")]
    assert h100x8.gpu is not None and (h100x8.gpu.name, h100x8.gpu.count) == ("H100", 8)
    ada_offers = await do.offers(OfferQuery(gpu="rtx 4000 ada"))
    assert {o.instance_type for o in ada_offers} == {"gpu-4000adax1-20gb"}
    assert {o.region for o in await do.offers(OfferQuery(gpu="mi300x"))} == {"atl1"}
    assert await do.offers(OfferQuery(spot=True)) == []
    do.page_size = 2  # seven sizes over four pages: the same offers
    assert await do.offers(OfferQuery()) == offers


async def test_create_makes_tag_firewall_and_one_account_key(sim: FakeCloudServer,
                                                             do: DigitalOceanProvider) -> None:
    s = spec(do, ports=[8080])
    ref = await do.create(await _offer(do), s)
    name = f"gpuprov-{do.installation_id}-{s.key}"
    assert _side(sim, s.key) == [("firewall", name), ("tag", name)]
    async with client(sim) as api:
        droplet = (await api.get(f"/droplets/{ref.instance_id}")).json()["droplet"]
        assert droplet["name"] == name and droplet["image"]["slug"] == "gpu-h100x1-base"
        assert droplet["tags"] == [name, f"gpuprov:{do.installation_id}"]
        [fw] = [f for f in (await api.get("/firewalls")).json()["firewalls"] if f["name"] == name]
        keys = (await api.get("/account/keys")).json()["ssh_keys"]
    assert fw["tags"] == [name]
    assert [(r["protocol"], r["ports"]) for r in fw["inbound_rules"]] == [("tcp", "22"), ("tcp", "8080")]
    assert {r["protocol"] for r in fw["outbound_rules"]} == {"tcp", "udp", "icmp"}  # else nothing gets out
    # every rule carries `ports` (the spec requires it; "0" for ICMP): the simulation refuses one without
    assert [r["ports"] for r in fw["outbound_rules"] if r["protocol"] == "icmp"] == ["0"]
    assert [k["fingerprint"] for k in keys] == [md5_fingerprint(public(USER_KEY))]
    # A second machine with the same key, from another adapter (another worker): no second key.
    async with contextlib.aclosing(adapter(sim, do.installation_id)) as other:
        ref2 = await other.create(await _offer(other), spec(other))
    async with client(sim) as api:
        assert len((await api.get("/account/keys")).json()["ssh_keys"]) == 1
    for r in (ref, ref2):
        await do.terminate(r)


async def test_extra_keys_and_k3s_go_in_user_data(sim: FakeCloudServer, do: DigitalOceanProvider) -> None:
    s = spec(do, k3s=True, user_data="#!/bin/sh\necho mine\n").model_copy(
        update={"ssh_public_keys": [public(USER_KEY), public(OTHER_KEY)]})
    ref = await do.create(await _offer(do), s)
    machine = sim.admin.machine(ref.instance_id)
    assert public(OTHER_KEY) in machine["public_keys"] and public(USER_KEY) in machine["public_keys"]
    assert cloudinit.K3S_AT_BOOT in machine["user_data"] and "echo mine" in machine["user_data"]
    st = (await wait_for(do, ref, _running, WAIT_RUNNING))[-1]
    address = sim.admin.machine(ref.instance_id)["address"]  # its own loopback address, once booted
    assert st is not None and st.host == address and (st.ssh_port, st.ssh_user) == (22, "root")
    await do.terminate(ref)


async def test_statuses_and_terminate_leaves_nothing(sim: FakeCloudServer, do: DigitalOceanProvider) -> None:
    # Booting, a droplet is "new" with no address: read on one held booting (a 0.2 s
    # boot can be over before the first read on a busy box), deleted before the one that boots.
    sim.admin.configure(hold_boots=True)
    slow = await do.create(await _offer(do, "gpu-h100x1-80gb", "atl1"), spec(do))
    first = await do.get(slow)
    assert first is not None and (first.state, first.host, first.detail) == ("pending", None, "new")
    await do.terminate(slow)
    sim.admin.configure(hold_boots=False)
    s = spec(do)
    ref = await do.create(await _offer(do, "gpu-h100x1-80gb", "atl1"), s)
    assert ref.region == "atl1"
    seen = await wait_for(do, ref, _running, WAIT_RUNNING)
    assert seen[-1] is not None and seen[-1].instance_type == "gpu-h100x1-80gb"
    sim.admin.kill(ref.instance_id)
    dead = await do.get(ref)
    assert dead is not None and (dead.state, dead.detail) == (InstanceState.ERROR, "off")
    await do.terminate(ref)
    await wait_for(do, ref, _gone, WAIT_GONE)
    assert _side(sim, s.key) == [] and await do.list_owned() == []
    await do.terminate(ref)  # gone: success
    assert await do.get(InstanceRef(provider="digitalocean", instance_id="nope", key=s.key)) is None


async def test_capacity_and_quota_are_told_apart_and_clean_up(sim: FakeCloudServer,
                                                              do: DigitalOceanProvider) -> None:
    offer = await _offer(do, "gpu-h100x8-640gb", "nyc2")
    sim.admin.set_stock("gpu-h100x8-640gb", "nyc2", 0)  # sold out since the offer was read
    s = spec(do)
    with pytest.raises(CapacityError) as cap:
        await do.create(offer, s)
    scope = cap.value.scope
    assert (scope.provider, scope.region, scope.instance_type) == ("digitalocean", "nyc2", "gpu-h100x8-640gb")
    assert _side(sim, s.key) == []  # refused: its tag and firewall went at once
    sim.admin.configure(quota={"digitalocean": 0})
    s = spec(do)
    with pytest.raises(QuotaError) as quota:
        await do.create(await _offer(do), s)
    assert (quota.value.scope.provider, quota.value.scope.region) == ("digitalocean", None)  # the account's
    assert _side(sim, s.key) == []
    s = spec(do, image="no-such-image")
    with pytest.raises(InvalidRequest):
        await do.create(await _offer(do), s)
    assert _side(sim, s.key) == []


async def test_a_lost_answer_leaves_side_resources_the_retry_reuses(sim: FakeCloudServer,
                                                                  do: DigitalOceanProvider) -> None:
    s = spec(do)
    sim.admin.add_fault("digitalocean", "create", "server_error", status=500)
    with pytest.raises(Transient):
        await do.create(await _offer(do), s)
    leftovers = [r for r in await do.list_owned() if r.key == s.key]
    assert sorted(r.kind for r in leftovers) == ["firewall", "tag"] and await do.find(s.key) is None
    ref = await do.create(await _offer(do), s)
    assert [r.instance_id for r in await do.list_owned()] == [ref.instance_id]  # the same two, now in use
    assert len(_side(sim, s.key)) == 2
    await do.terminate(ref)
    assert _side(sim, s.key) == []


async def test_duplicates_keep_the_firewall_until_the_last_goes(sim: FakeCloudServer,
                                                                do: DigitalOceanProvider) -> None:
    s = spec(do)
    sim.admin.add_fault("digitalocean", "create", "latency", times=2, seconds=0.5)
    a, b = await asyncio.gather(do.create(await _offer(do), s), do.create(await _offer(do), s))
    assert a.instance_id != b.instance_id  # names are not unique: both lookups found nothing
    assert {r.instance_id for r in await do.find_all(s.key)} == {a.instance_id, b.instance_id}
    await do.terminate(a)
    assert ("tag", f"gpuprov-{do.installation_id}-{s.key}") in _side(sim, s.key)  # b still needs them
    await do.terminate(b)
    assert _side(sim, s.key) == []  # every firewall the race made, and the tag


async def test_release_removes_what_a_failed_create_left(sim: FakeCloudServer,
                                                         do: DigitalOceanProvider) -> None:
    s = spec(do)
    sim.admin.add_fault("digitalocean", "create", "lose_response")
    with pytest.raises(Transient) as lost:
        await do.create(await _offer(do), s)
    assert lost.value.in_doubt
    found = await do.find(s.key)  # the droplet was made all the same
    assert found is not None
    await do.terminate(found)
    other = spec(do)
    sim.admin.add_fault("digitalocean", "create", "server_error", status=503)
    with pytest.raises(Transient):
        await do.create(await _offer(do), other)
    await do.release(other.key)
    await do.release(other.key)  # nothing left: success
    assert _side(sim, other.key) == [] and await do.list_owned() == []


async def test_list_owned_is_this_installation_only(sim: FakeCloudServer, do: DigitalOceanProvider) -> None:
    async with contextlib.aclosing(adapter(sim)) as theirs:
        mine = await do.create(await _offer(do), spec(do))
        their = await theirs.create(await _offer(theirs), spec(theirs))
        assert [r.instance_id for r in await do.list_owned()] == [mine.instance_id]
        assert [r.instance_id for r in await theirs.list_owned()] == [their.instance_id]
        await theirs.terminate(their)
    await do.terminate(mine)


async def test_errors_map_to_the_taxonomy(sim: FakeCloudServer, do: DigitalOceanProvider) -> None:
    async with contextlib.aclosing(adapter(sim)) as p:
        p.credentials = p.parse_credentials({"api_key": "dop_v1_wrong"})
        with pytest.raises(AuthError):
            await p.verify()
    assert "Simulated Team" in await do.verify()
    sim.admin.add_fault("digitalocean", "offers", "rate_limit", retry_after=2.5)
    with pytest.raises(RateLimited) as limited:
        await do.offers(OfferQuery())
    assert limited.value.retry_after == pytest.approx(2.5)
    with pytest.raises(InvalidRequest):
        await do.create(await _offer(do), spec(do, user_data="#!/bin/sh\n" + "x" * 70_000))
    with pytest.raises(InvalidRequest):
        await do.create(await _offer(do), spec(do, image="Not An Image!"))


async def test_burst_and_hourly_429s(burst_limited: FakeCloudServer, hourly_limited: FakeCloudServer) -> None:
    async with contextlib.aclosing(adapter(burst_limited)) as p:
        with pytest.raises(RateLimited) as burst:
            for _ in range(4):
                await p.verify()
    assert 0 < burst.value.retry_after <= 60  # from retry-after
    async with contextlib.aclosing(adapter(hourly_limited)) as p:
        with pytest.raises(RateLimited) as hourly:
            for _ in range(4):
                await p.verify()
    assert 3000 < hourly.value.retry_after <= 3601  # no retry-after: until ratelimit-reset


def _mock(handler: Any) -> DigitalOceanProvider:
    p = DigitalOceanProvider(DigitalOceanProvider.parse_credentials({"api_key": "dop_v1_secret"}),
                             installation_id="abcd1234")
    p._transport = httpx.MockTransport(handler)
    return p


async def test_next_links_are_followed_on_our_endpoint_only() -> None:
    seen: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        page = int(request.url.params["page"])
        elsewhere = "https://elsewhere.example/v2/tags?page=2&per_page=200"
        links = {"pages": {"next": elsewhere}} if page == 1 else {}
        return httpx.Response(200, json={"tags": [{"name": f"gpuprov-abcd1234-k{page}"}], "links": links,
                                         "meta": {"total": 2}})

    async with contextlib.aclosing(_mock(handler)) as p:
        tags = await p._tags()
    assert tags == ["gpuprov-abcd1234-k1", "gpuprov-abcd1234-k2"]
    assert {u.host for u in seen} == {"api.digitalocean.com"} and len(seen) == 2


async def test_foreign_bodies_are_described_never_quoted() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, text="<html>secret proxy page</html>")

    async with contextlib.aclosing(_mock(handler)) as p:
        with pytest.raises(Transient) as exc:
            await p.verify()
    assert "secret" not in exc.value.message and exc.value.in_doubt

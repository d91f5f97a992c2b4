"""The Vast.ai adapter against the simulated API: offers from asks, addresses on mapped ports, keys
attached per instance, the marketplace's quirks (vanishing asks, outbid creates, gone instances),
pagination, 429s without Retry-After, and every refusal mapped onto the taxonomy."""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

import httpx
import pytest

from fakeclouds import vastai_api
from fakeclouds.server import FakeCloudServer
from providers import pacing
from providers.base import (
    AuthError,
    CapacityError,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    OfferQuery,
    ProviderError,
    QuotaError,
    RateLimited,
    Transient,
    Unsupported,
)
from providers.vastai import MIN_INTERVAL_S, VastAIProvider, limited_endpoint
from tests.eventually import eventually
from tests.vastai.conftest import (
    CHEAP,
    DEADLINE,
    OTHER_KEY,
    USER_KEY,
    adapter,
    add_fault,
    configure,
    offer,
    on_engine,
    public,
    set_stock,
    spec,
    ssh_run,
)

STORAGE_32GB = round(0.15 * 32 / 720, 6)


class Recording(httpx.AsyncBaseTransport):
    """Forwards to the simulation, recording each answer's status; the first `throttle` calls to a
    path ending in `path` are answered as Vast answers calls that come too often."""

    def __init__(self, path: str = "", throttle: int = 0) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.path, self.throttle = path, throttle
        self.seen: list[tuple[str, int]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self.throttle and request.url.path.endswith(self.path):
            self.throttle -= 1
            self.seen.append((request.url.path, 429))
            return httpx.Response(429, json={"detail": "API requests too frequent endpoint threshold=1.0"})
        resp = await self.inner.handle_async_request(request)
        self.seen.append((request.url.path, resp.status_code))
        return resp

    async def aclose(self) -> None:
        await self.inner.aclose()


class Quick(VastAIProvider):
    backoff_s: ClassVar[tuple[float, ...]] = (0.01, 0.01, 0.01)


class SmallPages(VastAIProvider):
    page_size: ClassVar[int] = 2


async def running(p: VastAIProvider, ref: InstanceRef) -> InstanceStatus:
    st = await eventually(lambda: p.get(ref), until=lambda st: st and st.state == InstanceState.RUNNING,
                          within=DEADLINE, what=f"{ref.instance_id} running")
    assert st is not None
    return st


def machine(sim: FakeCloudServer, instance_id: str) -> Any:
    return on_engine(sim, lambda engine: engine.machines[instance_id])


async def test_offers_are_asks(vast: VastAIProvider) -> None:
    offers = await vast.offers(OfferQuery())
    cheap = [o for o in offers if o.instance_type == "21040117-1xRTX3090"]
    assert [o.spot for o in cheap] == [True, False]  # cheapest first: the bid, then on demand
    bid, on_demand = cheap
    assert (on_demand.region, on_demand.vcpus, on_demand.memory_gib) == ("CA", 8, 32.0)
    assert on_demand.gpu is not None and (on_demand.gpu.name, on_demand.gpu.count, on_demand.gpu.memory_gib) \
        == ("RTX3090", 1, 24.0)
    assert on_demand.price_per_hour == pytest.approx(0.16 + STORAGE_32GB, abs=1e-4)
    assert bid.price_per_hour == 0.09  # the ask's min bid: what a spot create bids
    assert {o.region for o in offers} == {"CA", "US", "SE", "DE", "NL"}
    assert {o.region for o in await vast.offers(OfferQuery(region="US"))} == {"US"}
    two = await vast.offers(OfferQuery(gpu_count=2))
    assert {o.instance_type for o in two} == {"21040120-2xRTX3090"}
    assert {o.instance_type for o in await vast.offers(OfferQuery(gpu="rtx 4090", spot=False))} == \
        {"20977563-1xRTX4090", "20977570-4xRTX4090"}


async def test_create_logs_in_as_root_on_the_mapped_port(sim: FakeCloudServer, vast: VastAIProvider) -> None:
    s = spec(vast, ssh_public_keys=[public(USER_KEY), public(OTHER_KEY)])
    ref = await vast.create(await offer(vast), s)
    assert (ref.key, ref.region) == (s.key, "CA")
    st = await running(vast, ref)
    assert (st.host, st.ssh_user) == ("127.0.0.1", "root")  # the answer's trailing newline stripped
    assert st.ssh_port == machine(sim, ref.instance_id).ssh_port != 22
    assert "running" in (st.detail or "")
    for key in (USER_KEY, OTHER_KEY):
        assert await ssh_run("127.0.0.1", st.ssh_port, key) == "ok"
    assert machine(sim, ref.instance_id).name == f"gpuprov-{vast.installation_id}-{s.key}"
    # Found again, now with the cloud's start_date (the create's answer has only the contract id).
    found = await vast.find(s.key)
    assert found is not None and found.created_at is not None
    assert found == ref.model_copy(update={"created_at": found.created_at})
    assert await vast.list_owned() == [found]
    assert await vast.create(await offer(vast), s) == found  # same key: the same instance


async def test_a_lost_create_answer_retried_attaches_the_keys(sim: FakeCloudServer, vast: VastAIProvider,
                                                              api: httpx.AsyncClient) -> None:
    configure(sim, time_scale=0.001)  # `api` turned limits off; the adapter copes with them
    s = spec(vast)
    add_fault(sim, "create", "lose_response")
    with pytest.raises(Transient) as lost:
        await vast.create(await offer(vast), s)
    assert lost.value.in_doubt
    ref = await vast.create(await offer(vast), s)
    st = await running(vast, ref)
    assert st.host and await ssh_run(st.host, st.ssh_port, USER_KEY) == "ok"
    keys = json.loads((await api.get(f"/api/v0/instances/{ref.instance_id}/ssh/")).json()["ssh_keys"])
    assert [k["public_key"] for k in keys] == [public(USER_KEY)]
    assert await vast.create(await offer(vast), s) == ref  # a third try attaches nothing twice


async def test_a_vanished_ask_blocks_only_itself(sim: FakeCloudServer, vast: VastAIProvider) -> None:
    chosen = await offer(vast)
    neighbour = await offer(vast, ask=21040120)  # same host, same country, another ask
    set_stock(sim, CHEAP.id, 0)  # rented by someone else since the offer was listed
    with pytest.raises(CapacityError) as exc:
        await vast.create(chosen, spec(vast))
    scope = exc.value.scope
    assert (scope.provider, scope.region, scope.instance_type) == ("vastai", "CA", chosen.instance_type)
    assert scope.covers(chosen) and not scope.covers(neighbour)
    assert on_engine(sim, lambda engine: list(engine.machines)) == []


async def test_an_outbid_spot_create_leaves_nothing(sim: FakeCloudServer, vast: VastAIProvider) -> None:
    bid = await offer(vast, spot=True)
    async with httpx.AsyncClient() as client:  # the host raises its minimum after we listed the ask
        assert (await client.put(f"{sim.url}/vastai/_fake/asks/{CHEAP.id}",
                                 json={"min_bid": 0.12})).status_code == 200
    with pytest.raises(CapacityError) as exc:
        await vast.create(bid, spec(vast))
    assert exc.value.scope.instance_type == bid.instance_type
    [made] = on_engine(sim, lambda engine: list(engine.machines.values()))  # made stopped, then destroyed
    assert made.extra["stopped"] and made.status in ("terminating", "terminated")
    assert await vast.list_owned() == []


async def test_a_spot_offer_rents_an_interruptible_instance_that_can_be_outbid(
        sim: FakeCloudServer, vast: VastAIProvider) -> None:
    ref = await vast.create(await offer(vast, spot=True), spec(vast))
    m = machine(sim, ref.instance_id)
    assert m.spot and m.extra["bid"] == 0.09
    await running(vast, ref)
    sim.admin.preempt(ref.instance_id)  # outbid: Vast stops it (tests/vastai/test_preemption.py)
    st = await vast.get(ref)
    assert st is not None and st.state == InstanceState.STOPPED and st.host is None and st.preempted
    assert st.detail is not None and st.detail.startswith("stopped - outbid")


async def test_terminate_gone_is_success_but_a_bare_404_is_not(sim: FakeCloudServer,
                                                                vast: VastAIProvider) -> None:
    ref = await vast.create(await offer(vast), spec(vast))
    await vast.terminate(ref)
    assert await vast.get(ref) is None
    await vast.terminate(ref)  # no_such_instance: already gone
    await vast.terminate(ref.model_copy(update={"instance_id": "not-a-number"}))
    async with adapter(sim, endpoint=f"{sim.url}/nowhere", installation_id=vast.installation_id) as lost:
        with pytest.raises(InvalidRequest):  # a wrong endpoint must not pass for "gone"
            await lost.terminate(ref)
        with pytest.raises(InvalidRequest):
            await lost.get(ref)


async def test_list_owned_follows_next_token(sim: FakeCloudServer) -> None:
    ours, theirs = adapter(sim, SmallPages), adapter(sim)
    rec = Recording()
    ours._transport = rec
    async with ours, theirs:
        cheap = await offer(theirs)
        await theirs.create(cheap, spec(theirs))
        made = [await ours.create(cheap, spec(ours)) for _ in range(4)]
        rec.seen.clear()
        by_id = {r.instance_id: r.key for r in made}
        assert {r.instance_id: r.key for r in await ours.list_owned()} == by_id
        # 5 instances, 2 a page: three pages answered. A page the simulation throttled (its one list a
        # second, at test speed one a millisecond: two pages asked within it on a fast box) is asked again.
        assert [path for path, status in rec.seen if status == 200] == ["/vastai/api/v1/instances/"] * 3
        assert {status for _, status in rec.seen} <= {200, 429}, rec.seen


async def test_429_without_retry_after_is_retried_then_raised(sim: FakeCloudServer) -> None:
    p = adapter(sim, Quick)
    async with p:
        p._transport = rec = Recording("/api/v1/instances/", throttle=2)
        assert await p.list_owned() == []
        assert [status for _, status in rec.seen] == [429, 429, 200]
        rec.throttle = 4
        with pytest.raises(RateLimited) as exc:
            await p.list_owned()
        assert exc.value.retry_after == 5.0 and len(rec.seen) == 3 + 4  # one call, three retries
        rec.seen.clear()
        add_fault(sim, "offers", "rate_limit", retry_after=3)  # a 429 that says when: not retried here
        with pytest.raises(RateLimited) as exc:
            await p.offers(OfferQuery())
        assert exc.value.retry_after == 3.0 and len(rec.seen) == 1


async def test_the_simulations_minimum_intervals_reach_the_adapter(sim: FakeCloudServer) -> None:
    class NoRetry(VastAIProvider):
        backoff_s: ClassVar[tuple[float, ...]] = ()

    configure(sim, time_scale=20.0)  # the list's 1 s interval lasts 20 s
    async with adapter(sim, NoRetry) as p:
        await p.list_owned()
        with pytest.raises(RateLimited) as exc:
            await p.list_owned()
        assert exc.value.retry_after == 5.0  # Vast says nothing: our default


# Every documented interval x 0.1 on both sides (create's 4.5 s lasts 0.45 s): long beside a loopback
# call's latency, so the pacer, not the network, is what spaces the calls, as at real speed.
PACED_SCALE = 0.1


async def test_concurrent_creates_and_polls_on_one_key_wait_their_turn(
        sim: FakeCloudServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three creates at once on one key, the listing polled meanwhile, then the three machines shown
    at once, where the documented intervals bind on both sides: every machine made, no call refused.
    (Unpaced, the second and third creates and shows met 429s, and a fourth caller past the backoff
    RateLimited: the create `make fuzz` saw refused.)"""
    monkeypatch.setenv(pacing.TIME_SCALE_ENV, str(PACED_SCALE))
    configure(sim, time_scale=PACED_SCALE)
    p = adapter(sim)
    p._transport = rec = Recording()
    async with p:
        cheap = await offer(p)
        creating = asyncio.gather(*(p.create(cheap, spec(p)) for _ in range(3)))
        polls = 0
        while not creating.done():
            await p.list_owned()  # a watch's round shares the key's list budget
            polls += 1
        refs = await creating
        shown = await asyncio.gather(*(p.get(r) for r in refs))
    assert len({r.instance_id for r in refs}) == 3 and all(shown)
    assert polls >= 2
    assert {status for _, status in rec.seen} == {200}, [s for s in rec.seen if s[1] != 200]


async def test_searches_in_a_row_stay_within_ten_a_minute(sim: FakeCloudServer,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Twelve searches in a row on one key where search's window binds on both sides (a minute lasts
    0.6 s): none refused. Unpaced, the eleventh met a 429 (a plan then "no cloud answered with
    offers" when Vast.ai was its only cloud: `make fuzz`)."""
    monkeypatch.setenv(pacing.TIME_SCALE_ENV, "0.01")
    configure(sim, time_scale=0.01)
    p = adapter(sim)
    p._transport = rec = Recording()
    async with p:
        for _ in range(12):
            assert await p.offers(OfferQuery())
    assert [status for _, status in rec.seen] == [200] * 12


def test_the_paced_endpoints_are_the_ones_the_simulation_limits() -> None:
    """The adapter's intervals (MIN_INTERVAL_S, by the docs' endpoint names) are the thresholds the
    simulation enforces by its op names, and each path the adapter sends maps onto its endpoint."""
    sim_op = {"create": "create", "show": "get", "list": "list", "destroy": "terminate", "search": "offers"}
    enforced = {next(iter(limit.ops)): limit for limit in vastai_api.RATE_LIMITS}
    for endpoint, interval in MIN_INTERVAL_S.items():
        limit = enforced.pop(sim_op[endpoint])
        assert interval == limit.per_s / limit.calls, endpoint  # 1 per 4.5 s: 4.5; 10 per 60 s: 6
    assert not enforced, f"limited by the simulation, not paced: {sorted(enforced)}"
    assert limited_endpoint("PUT", "/api/v0/asks/123/") == "create"
    assert limited_endpoint("GET", "/api/v0/instances/7/") == "show"
    assert limited_endpoint("DELETE", "/api/v0/instances/7/") == "destroy"
    assert limited_endpoint("GET", "/api/v1/instances/") == "list"
    assert limited_endpoint("POST", "/api/v0/bundles/") == limited_endpoint("PUT", "/api/v0/search/asks/") \
        == "search"
    for method, path in [("GET", "/api/v0/instances/7/ssh/"), ("POST", "/api/v0/instances/7/ssh/"),
                         ("GET", "/api/v0/users/current/"), ("GET", "/api/v0/bundles/")]:
        assert limited_endpoint(method, path) is None, (method, path)


async def test_refusals_map_onto_the_taxonomy(sim: FakeCloudServer, vast: VastAIProvider) -> None:
    cheap = await offer(vast)
    add_fault(sim, "create", "quota")
    with pytest.raises(QuotaError) as quota:  # out of credit: the whole account
        await vast.create(cheap, spec(vast))
    assert (quota.value.scope.provider, quota.value.scope.region) == ("vastai", None)
    add_fault(sim, "list", "server_error", status=500)
    with pytest.raises(Transient, match="Internal server error"):  # a body with only `msg`
        await vast.list_owned()
    add_fault(sim, "list", "server_error", status=503)
    with pytest.raises(Transient) as gateway:
        await vast.list_owned()
    assert "<html" not in gateway.value.message and "non-JSON" in gateway.value.message
    with pytest.raises(Unsupported):
        await vast.create(cheap, spec(vast, ports=[8080]))
    with pytest.raises(InvalidRequest, match="shell script"):
        await vast.create(cheap, spec(vast, user_data="#cloud-config\nruncmd: [ls]\n"))
    with pytest.raises(InvalidRequest, match="4096"):
        await vast.create(cheap, spec(vast, user_data="#!/bin/sh\n" + "x" * 4096))
    assert on_engine(sim, lambda engine: list(engine.machines)) == []


async def test_user_data_runs_as_onstart(vast: VastAIProvider) -> None:
    ref = await vast.create(await offer(vast), spec(vast, user_data="#!/bin/sh\necho hello > greeting\n"))
    st = await running(vast, ref)
    assert st.host
    host, port = st.host, st.ssh_port
    assert await eventually(lambda: ssh_run(host, port, USER_KEY, "cat greeting 2>/dev/null || true"),
                            within=DEADLINE, what="the onstart script's greeting") == "hello"


async def test_verify_and_bad_keys(sim: FakeCloudServer, vast: VastAIProvider) -> None:
    identity = await vast.verify()
    assert "424242" in identity and sim.tokens["vastai"] not in identity
    async with adapter(sim, token="wrong") as bad:
        with pytest.raises(AuthError):
            await bad.verify()
        with pytest.raises(AuthError):  # search answers a bad key 404 "Invalid user key"
            await bad.offers(OfferQuery())


@pytest.mark.parametrize(("inst", "state", "host", "port"), [
    ({"actual_status": None}, InstanceState.PENDING, None, 22),
    ({"actual_status": "loading", "public_ipaddr": "1.2.3.4\n"}, InstanceState.PENDING, None, 22),
    ({"actual_status": "running", "public_ipaddr": "1.2.3.4", "ports": {}}, InstanceState.PENDING, None, 22),
    ({"actual_status": "running", "public_ipaddr": " 1.2.3.4\n",
      "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": "41022"}]}},
     InstanceState.RUNNING, "1.2.3.4", 41022),
    ({"actual_status": "exited", "status_msg": "OCI runtime create failed"}, InstanceState.ERROR, None, 22),
    ({"actual_status": "offline"}, InstanceState.ERROR, None, 22),
    ({"actual_status": "something new"}, InstanceState.ERROR, None, 22),
])
def test_status_mapping(inst: dict[str, Any], state: InstanceState, host: str | None, port: int) -> None:
    p = VastAIProvider(VastAIProvider.parse_credentials({"api_key": "k"}), installation_id="abcd1234")
    ref = InstanceRef(provider="vastai", instance_id="1", key="k-1")
    st = p._status(ref, {"id": 1, **inst})
    assert (st.state, st.host, st.ssh_port, st.ssh_user) == (state, host, port, "root")


def test_capabilities_and_catalogue_agree() -> None:
    caps = VastAIProvider.capabilities
    assert (caps.k3s, caps.k8s_api, caps.ports, caps.spot, caps.custom_image, caps.login_user) == \
        ("none", False, False, True, True, "root")
    assert caps.k3s_reason and caps.ports_reason and caps.side_resources == [] and caps.create_in_flight_s > 0
    assert not caps.regions and not caps.default_regions  # anywhere: every country with an ask
    assert vastai_api.FACADE.login_user == caps.login_user and vastai_api.FACADE.ssh_port is None
    with pytest.raises(ProviderError):
        VastAIProvider.parse_credentials({})

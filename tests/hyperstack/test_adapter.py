"""The Hyperstack adapter's mapping, against the simulated Hyperstack (and, for answers the simulation
never gives, a stub transport): offers joined from three calls, the create body (environment, key
pair, labels, rules, user data, port randomization off), statuses, addresses and errors."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from fakeclouds import cloudinit
from fakeclouds.server import FakeCloudServer
from providers import cloudinit as boot
from providers.base import (
    AuthError,
    CapacityError,
    InstanceRef,
    InstanceState,
    InvalidRequest,
    OfferQuery,
    QuotaError,
    RateLimited,
    Transient,
)
from providers.hyperstack import HyperstackProvider, gpu_of, vm_name
from tests.eventually import eventually
from tests.hyperstack.conftest import OTHER_KEY, USER_KEY, adapter, offer, public, spec


async def _running(p: HyperstackProvider, ref: InstanceRef, within: float = 15.0) -> list[Any]:
    seen: list[Any] = []

    async def read() -> Any:
        seen.append(await p.get(ref))
        return seen[-1]

    await eventually(read, until=lambda st: st is not None and st.state == InstanceState.RUNNING,
                     within=within, what=f"{ref.instance_id} running",
                     detail=lambda: [s and s.state for s in seen])
    return seen


def _stub(answer: Callable[[httpx.Request], httpx.Response]) -> HyperstackProvider:
    p = HyperstackProvider(HyperstackProvider.parse_credentials({"api_key": "s3cret-key"}),
                           installation_id="inst0001")
    p._transport = httpx.MockTransport(answer)
    return p


def test_gpu_models_and_names() -> None:
    assert gpu_of("A100-80G-PCIe") == ("A100", 80.0)
    assert gpu_of("H100-80G-SXM5") == ("H100", 80.0)
    assert gpu_of("RTX-A6000") == ("A6000", 48.0)
    assert gpu_of("L40") == ("L40", 48.0)
    name = vm_name("inst0001", "k" * 63)
    assert len(name) == 50 and name == vm_name("inst0001", "k" * 63) and name.startswith("gpuprov-inst0001-")
    assert vm_name("inst0001", "short-key") == "gpuprov-inst0001-short-key"


async def test_offers_join_flavors_stock_and_pricebook(hs: HyperstackProvider, sim: FakeCloudServer) -> None:
    offers = await hs.offers(OfferQuery())
    assert {o.region for o in offers} == {"CANADA-1", "US-1", "NORWAY-1"}
    a100 = await offer(hs)
    assert (a100.gpu and a100.gpu.name, a100.gpu and a100.gpu.memory_gib, a100.vcpus, a100.memory_gib) == \
        ("A100", 80.0, 28, 120.0)
    assert a100.price_per_hour == 1.35 and not a100.spot
    spot = await offer(hs, spot=True)
    assert spot.spot and spot.instance_type == "n3-A100x1" and spot.price_per_hour < a100.price_per_hour
    [h100x8] = [o for o in offers if o.instance_type == "n3-H100-SXM5x8"]
    assert h100x8.gpu is not None and h100x8.gpu.count == 8 and h100x8.price_per_hour == pytest.approx(19.2)
    # sold out: gone from the offers, shown unavailable when asked for
    sim.admin.set_stock("n3-A100x1", "CANADA-1", 0)
    now = await hs.offers(OfferQuery(region="CANADA-1"))
    assert "n3-A100x1" not in {o.instance_type for o in now}
    every = await hs.offers(OfferQuery(region="CANADA-1", include_unavailable=True))
    assert {o.available for o in every if o.instance_type == "n3-A100x1"} == {False}
    assert await hs.offers(OfferQuery(gpu="a6000", region="US-1")) == []


async def test_create_sends_what_hyperstack_needs(hs: HyperstackProvider, sim: FakeCloudServer) -> None:
    s = spec(hs, ports=[8080, 22], k3s=True)
    s = s.model_copy(update={"ssh_public_keys": [public(USER_KEY), public(OTHER_KEY)]})
    ref = await hs.create(await offer(hs), s)
    m = sim.admin.machine(ref.instance_id)
    assert m["name"] == f"gpuprov-{hs.installation_id}-{s.key}" and ref.region == "CANADA-1"
    assert m["extra"]["labels"] == ["gpuprov", f"gpuprov-installation={hs.installation_id}",
                                    f"gpuprov-key={s.key}"]
    assert m["extra"]["assign_floating_ip"] is True and m["extra"]["port_randomization"] is False
    assert m["extra"]["environment"]["name"] == f"gpuprov-{hs.installation_id}-canada-1"
    assert m["extra"]["image_name"] == "Ubuntu Server 22.04 LTS R535 CUDA 12.2"
    assert [(r["protocol"], r["direction"], r["port_range_min"]) for r in m["extra"]["security_rules"]] == \
        [("tcp", "ingress", 22), ("tcp", "ingress", 8080)]
    # the first key in the environment's key pair, the others and k3s through cloud-init
    assert m["public_keys"] == [public(USER_KEY), public(OTHER_KEY)]
    parsed = cloudinit.parse(m["user_data"])
    assert parsed.authorized_keys == [public(OTHER_KEY)] and parsed.scripts == [boot.K3S_AT_BOOT]
    st = (await _running(hs, ref))[-1]
    address = sim.admin.machine(ref.instance_id)["address"]
    assert (st.host, st.ssh_port, st.ssh_user, st.instance_type) == (address, 22, "ubuntu", "n3-A100x1")


async def test_environment_and_key_pair_are_shared_per_region(hs: HyperstackProvider,
                                                              sim: FakeCloudServer) -> None:
    twin = adapter(sim, installation_id=hs.installation_id)  # another worker of this installation
    async with twin:
        await asyncio.gather(hs.prepare("CANADA-1"), twin.prepare("CANADA-1"))  # racing: one wins
        a = await hs.create(await offer(hs), spec(hs))
        b = await twin.create(await offer(twin), spec(twin))
        c = await hs.create(await offer(hs, "n3-H100x1", "US-1"), spec(hs))
    rows = [r for r in sim.admin.side_resources() if hs.installation_id in r["name"]]
    assert sorted((r["kind"], r["name"].split("-")[2]) for r in rows) == \
        [("environment", "canada"), ("environment", "us"), ("keypair", "canada"), ("keypair", "us")]
    assert len({a.instance_id, b.instance_id, c.instance_id}) == 3


async def test_a_key_pair_removed_behind_its_back_is_made_again(hs: HyperstackProvider, sim: FakeCloudServer,
                                                                api: httpx.AsyncClient) -> None:
    await hs.create(await offer(hs), spec(hs))
    [kp] = [k for k in (await api.get("/core/keypairs", params={"pageSize": 100})).json()["keypairs"]
            if hs.installation_id in k["name"]]
    assert (await api.delete(f"/core/keypair/{kp['id']}")).status_code == 200
    ref = await hs.create(await offer(hs), spec(hs))  # 404 from the create: forgets, prepares, retries
    assert sim.admin.machine(ref.instance_id)["status"] in ("pending", "running")


async def test_ownership_and_long_keys(hs: HyperstackProvider, sim: FakeCloudServer,
                                       api: httpx.AsyncClient) -> None:
    key = "a" * 60  # too long for a 50-character name: shortened, the label keeps it whole
    ref = await hs.create(await offer(hs), spec(hs, key))
    assert len(sim.admin.machine(ref.instance_id)["name"]) == 50
    assert [(r.instance_id, r.key) for r in await hs.list_owned()] == [(ref.instance_id, key)]
    assert (await hs.find(key)) == ref and await hs.create(await offer(hs), spec(hs, key)) == ref
    other = adapter(sim)
    async with other:  # another installation on the account sees none of it
        assert await other.list_owned() == [] and await other.find(key) is None
    # a VM someone made by hand under a name like ours but no gpuprov name is not ours either
    assert await hs.find_all("b" * 10) == []


async def test_terminate_twice_and_gone(hs: HyperstackProvider, sim: FakeCloudServer) -> None:
    sim.admin.configure(terminate_delay=60.0)  # DELETING until the reset below
    ref = await hs.create(await offer(hs), spec(hs))
    await hs.terminate(ref)
    st = await hs.get(ref)
    assert st is not None and st.state == InstanceState.TERMINATING and st.detail == "DELETING"
    await hs.terminate(ref)  # 409 while DELETING: already on its way, success
    with pytest.raises(Transient, match="still being deleted"):  # the name is still held
        await hs.create(await offer(hs), spec(hs, ref.key))
    sim.admin.reset()  # the deletion completes
    assert await hs.get(ref) is None  # GET 404 once gone
    await hs.terminate(ref)  # DELETE 404: gone is success


async def test_refusals_map_to_the_taxonomy(hs: HyperstackProvider, sim: FakeCloudServer) -> None:
    a100 = await offer(hs)
    sim.admin.set_stock("n3-A100x1", "CANADA-1", 0)
    with pytest.raises(CapacityError) as cap:
        await hs.create(a100, spec(hs))
    assert (cap.value.scope.region, cap.value.scope.instance_type) == ("CANADA-1", "n3-A100x1")
    sim.admin.add_fault("hyperstack", "create", "quota")
    with pytest.raises(QuotaError):
        await hs.create(await offer(hs, "n3-H100x1"), spec(hs))
    with pytest.raises(InvalidRequest):
        await hs.create(await offer(hs, "n3-H100x1"), spec(hs, image="No Such Image"))
    bad = adapter(sim, token="wrong-key")
    async with bad:
        with pytest.raises(AuthError) as auth:
            await bad.verify()
        assert "wrong-key" not in str(auth.value)
    assert "sim-user" in await hs.verify()


async def test_the_documented_rate_limit_is_rate_limited(hs: HyperstackProvider,
                                                         sim: FakeCloudServer) -> None:
    sim.admin.configure(time_scale=1.0)
    [limit] = sim.engine.facade("hyperstack").rate_limits
    for _ in range(limit.calls):
        sim.engine.limiter.check("hyperstack", [limit], {"ip": "127.0.0.1", "token": "t"}, "list")
    with pytest.raises(RateLimited) as exc:
        await hs.list_owned()
    assert 50 < exc.value.retry_after <= 60


async def test_answers_the_simulation_never_gives() -> None:
    """Statuses and errors from a stub transport: ACTIVE before the floating IP, unknown words,
    a 429 without Retry-After, an unknown reason saying out of stock, a proxy's page."""
    vm: dict[str, Any] = {"id": 7, "name": "gpuprov-inst0001-k1", "status": "ACTIVE", "floating_ip": None,
                          "floating_ip_status": "ATTACHING", "environment": {"region": "US-1"}}
    answers: list[httpx.Response] = []

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["api_key"] == "s3cret-key" and "authorization" not in request.headers
        return answers.pop(0)

    p = _stub(answer)
    ref = InstanceRef(provider="hyperstack", instance_id="7", key="k1")
    for status, ip, state in (("ACTIVE", None, InstanceState.PENDING), ("ACTIVE", "203.0.113.5", "running"),
                              ("BUILD", None, "pending"), ("SHUTOFF", "203.0.113.5", "stopped"),
                              ("HIBERNATING", None, "stopping"), ("WEIRD", None, "error")):
        answers.append(httpx.Response(200, json={"status": True, "instance": {**vm, "status": status,
                                                                             "floating_ip": ip}}))
        st = await p.get(ref)
        assert st is not None and st.state == state, (status, st)
    answers.append(httpx.Response(429, json={"status": False, "message": "slow down",
                                             "error_reason": "rate_limited"}))
    with pytest.raises(RateLimited) as limited:
        await p.get(ref)
    assert limited.value.retry_after == 60.0
    answers.append(httpx.Response(400, json={"status": False, "message": "Not enough stock for this flavor",
                                             "error_reason": "something_new"}))
    with pytest.raises(CapacityError):
        await p.terminate(ref)
    answers.append(httpx.Response(502, text="<html>s3cret-key proxy error</html>"))
    with pytest.raises(Transient) as bad_gateway:
        await p.get(ref)
    assert bad_gateway.value.in_doubt and "s3cret" not in str(bad_gateway.value)
    answers.append(httpx.Response(200, content=b"{not json"))
    with pytest.raises(Transient):
        await p.get(ref)
    answers.append(httpx.Response(200, json={"status": True, "instance": {"status": "ACTIVE"}}))
    answers.append(httpx.Response(200, json={"instances": [{"name": "gpuprov-inst0001-x"}], "count": 1}))
    st = await p.get(ref)
    assert st is not None and st.state == InstanceState.PENDING  # no IP yet
    with pytest.raises(Transient):  # an instance without an id
        await p.list_owned()
    await p.aclose()

"""The Prime Intellect adapter's mapping: offers, the account key, statuses and addresses, errors."""

from __future__ import annotations

import json
from typing import Any

import asyncssh
import httpx
import pytest

from fakeclouds.server import FakeCloudServer
from providers.base import (
    AuthError,
    CapacityError,
    ConnectionOptions,
    InstanceRef,
    InstanceState,
    InvalidRequest,
    OfferQuery,
    QuotaError,
    RateLimited,
    Transient,
    Unsupported,
)
from providers.credentials import ApiKeyCredentials
from providers.primeintellect import (
    PODS,
    SSH_KEYS,
    Listing,
    PrimeIntellectProvider,
    parse_ssh_connection,
    pod_name,
)
from tests.eventually import eventually
from tests.fakeclouds.helpers import WITHIN
from tests.primeintellect.conftest import PUBLIC_KEY, USER_KEY, adapter, offer_of, spec

A6000 = "pi-tensordock-1xa6000_48gb-pcie"


class SmallPages(PrimeIntellectProvider):
    page_size = 2


async def test_verify_names_the_user_not_the_key(pi: PrimeIntellectProvider, sim: FakeCloudServer) -> None:
    assert await pi.verify() == "Prime Intellect user sim-user"
    async with adapter(sim, token="wrong") as bad:
        with pytest.raises(AuthError):
            await bad.verify()


async def test_offers_follow_every_page(sim: FakeCloudServer, pi: PrimeIntellectProvider) -> None:
    async with adapter(sim, SmallPages) as small:
        paged = await small.offers(OfferQuery())
    assert paged == await pi.offers(OfferQuery()) and len(paged) >= 5, "2 a page: every page was read"
    cheapest = paged[0]
    assert cheapest.instance_type == "tensordock__1xA6000_48GB__PCIe__NVIDIA RTX A6000"
    assert (cheapest.region, cheapest.zone, cheapest.price_per_hour) == ("canada", "CA-MTL-1", 0.49)
    assert cheapest.gpu is not None and (cheapest.gpu.name, cheapest.gpu.count, cheapest.gpu.memory_gib) == \
        ("A6000", 1, 48.0)
    assert {o.gpu.name for o in paged if o.gpu} == {"A6000", "A100", "H100"}
    assert Listing.parse(cheapest.instance_type) == \
        Listing("tensordock", 1, "A6000_48GB", "PCIe", "NVIDIA RTX A6000")
    eu = await pi.offers(OfferQuery(region="eu_north"))
    assert [(o.instance_type, o.zone) for o in eu] == \
        [("datacrunch__1xA6000_48GB__PCIe__1A6000.10V", "EUR-IS-1")]
    eights = await pi.offers(OfferQuery(gpu_count=8))
    assert [o.gpu.count for o in eights if o.gpu] == [8] and eights[0].vcpus == 208
    assert await pi.offers(OfferQuery(spot=True)) == []
    assert await pi.offers(OfferQuery(region="atlantis")) == []


async def test_create_registers_the_installation_key_once(pi: PrimeIntellectProvider, sim: FakeCloudServer,
                                                          api: httpx.AsyncClient) -> None:
    offer = await offer_of(pi)
    a = await pi.create(offer, spec(pi))
    b = await pi.create(offer, spec(pi))
    keys = (await api.get("/ssh_keys/")).json()["data"]
    assert [(k["name"], k["publicKey"]) for k in keys] == [(f"gpuprov-{pi.installation_id}", PUBLIC_KEY)]
    # Another installation with the same key reuses it, whatever it is named.
    async with adapter(sim) as other:
        c = await other.create(offer, spec(other))
    assert len((await api.get("/ssh_keys/")).json()["data"]) == 1
    machines = {m["id"]: m for m in await sim.admin.aio.machines()}
    assert set(machines) == {a.instance_id, b.instance_id, c.instance_id}
    m = machines[a.instance_id]
    assert (m["name"], m["region"], m["instance_type"]) == \
        (pod_name(pi.installation_id, a.key), "US-KS-2", A6000)
    assert m["extra"]["image"] == "ubuntu_22_cuda_12"
    assert (a.region, a.key) == ("united_states", a.key)


async def test_pending_then_running_on_the_port_the_pod_names(pi: PrimeIntellectProvider,
                                                              sim: FakeCloudServer) -> None:
    # Pending: read on a pod held booting (a 0.3 s boot can be over before the first
    # read on a busy box), gone before the one that boots.
    await sim.admin.aio.configure(hold_boots=True)
    slow = await pi.create(await offer_of(pi), spec(pi))
    first = await pi.get(slow)
    assert first is not None and first.state == InstanceState.PENDING and first.host is None
    await pi.terminate(slow)
    await eventually(lambda: _gone(pi, slow), within=WITHIN, what="the booting pod to go")
    await sim.admin.aio.configure(hold_boots=False)
    ref = await pi.create(await offer_of(pi), spec(pi))

    async def running() -> Any:
        st = await pi.get(ref)
        return st if st and st.state == InstanceState.RUNNING else None
    st = await eventually(running, within=WITHIN, what="the pod to run")
    machine = await sim.admin.aio.machine(ref.instance_id)
    assert (st.host, st.ssh_port, st.ssh_user) == ("127.0.0.1", machine["ssh_port"], "root")
    assert st.ssh_port != 22 and st.detail == "ACTIVE"
    async with asyncssh.connect(st.host, port=st.ssh_port, username=st.ssh_user, client_keys=[USER_KEY],
                                known_hosts=None) as conn:
        assert (await conn.run("nvidia-smi --query-gpu=name --format=csv,noheader", check=True)).stdout \
            == "NVIDIA RTX A6000\n"

    await pi.terminate(ref)
    await eventually(lambda: _gone(pi, ref), within=WITHIN, what="the pod to go")
    await pi.terminate(ref)  # a 404: already gone is success
    assert await pi.list_owned() == []


async def _gone(pi: PrimeIntellectProvider, ref: InstanceRef) -> bool:
    return await pi.get(ref) is None


def _status(pi: PrimeIntellectProvider, **entry: Any) -> Any:
    ref = InstanceRef(provider="primeintellect", instance_id="p1", key="k")
    return pi._status(ref, {"podId": "p1", **entry})


@pytest.mark.parametrize(("entry", "state", "login"), [
    ({"status": "PROVISIONING", "sshConnection": [None], "ip": [None]}, InstanceState.PENDING, None),
    ({"status": "PENDING", "sshConnection": None}, InstanceState.PENDING, None),
    ({"status": "ACTIVE", "sshConnection": [None], "installationProgress": 40}, InstanceState.PENDING, None),
    ({"status": "ACTIVE", "sshConnection": "root@1.2.3.4 -p 12345", "installationProgress": 60},
     InstanceState.PENDING, None),
    ({"status": "ACTIVE", "sshConnection": "ubuntu@1.2.3.4 -p 12345", "installationProgress": 100},
     InstanceState.RUNNING, ("1.2.3.4", 12345, "ubuntu")),
    ({"status": "ACTIVE", "sshConnection": ["root@5.6.7.8 -p 2200", "root@5.6.7.9 -p 2201"]},
     InstanceState.RUNNING, ("5.6.7.8", 2200, "root")),
    ({"status": "ACTIVE", "sshConnection": "root@host.example.com", "ip": "9.9.9.9"},
     InstanceState.RUNNING, ("host.example.com", 22, "root")),
    ({"status": "ACTIVE", "sshConnection": "root@-oProxyCommand=evil -p 22"}, InstanceState.PENDING, None),
    ({"status": "ACTIVE", "sshConnection": "root@1.2.3.4 -p 2200", "installationFailure": "pip failed"},
     InstanceState.ERROR, None),
    ({"status": "STOPPED"}, InstanceState.STOPPED, None),
    ({"status": "ERROR"}, InstanceState.ERROR, None),
    ({"status": "DELETING"}, InstanceState.TERMINATING, None),
    ({"status": "TERMINATED"}, InstanceState.TERMINATED, None),
    ({"status": "SOMETHING_NEW"}, InstanceState.PENDING, None),
])
def test_status_and_login_mapping(entry: dict[str, Any], state: InstanceState,
                                  login: tuple[str, int, str] | None) -> None:
    pi = PrimeIntellectProvider(ApiKeyCredentials(api_key="k"), installation_id="abcd1234")  # type: ignore[arg-type]
    st = _status(pi, **entry)
    assert st.state == state, st
    if login is not None:
        assert (st.host, st.ssh_port, st.ssh_user) == login
    if state == InstanceState.PENDING:
        assert st.host is None, "no address before the pod is reachable"


def test_ssh_connection_parsing() -> None:
    assert parse_ssh_connection("root@1.2.3.4 -p 12345") == ("root", "1.2.3.4", 12345)
    assert parse_ssh_connection([None]) is None and parse_ssh_connection(None) is None
    assert parse_ssh_connection("ssh root@[::1] -p 1") is None  # not a form the API sends
    assert parse_ssh_connection("root@1.2.3.4 -p 99999") is None
    assert parse_ssh_connection("root;rm@1.2.3.4") is None


async def test_sold_out_between_offers_and_create(pi: PrimeIntellectProvider, sim: FakeCloudServer) -> None:
    offer = await offer_of(pi)
    await sim.admin.aio.set_stock(A6000, "US-KS-2", 0, facade="primeintellect")
    with pytest.raises(CapacityError) as exc:
        await pi.create(offer, spec(pi))
    assert (exc.value.scope.region, exc.value.scope.zone, exc.value.scope.instance_type) == \
        ("united_states", "US-KS-2", offer.instance_type)
    other_dc = await offer_of(pi, zone="CA-MTL-1")
    assert not exc.value.scope.covers(other_dc), "the same listing in another data center is still tried"
    assert await sim.admin.aio.machines() == []


async def test_refusals_by_status_and_words(pi: PrimeIntellectProvider, sim: FakeCloudServer) -> None:
    offer = await offer_of(pi)
    await sim.admin.aio.add_fault("primeintellect", "create", "capacity")
    with pytest.raises(CapacityError, match="out of stock"):
        await pi.create(offer, spec(pi))
    await sim.admin.aio.configure(quota={"primeintellect": 0})
    with pytest.raises(QuotaError) as quota:
        await pi.create(offer, spec(pi))
    assert quota.value.scope.region is None, "the account's quota covers every offer of the cloud"
    await sim.admin.aio.configure(quota={"primeintellect": None})
    await sim.admin.aio.add_fault("primeintellect", "offers", "rate_limit", retry_after=2.5)
    with pytest.raises(RateLimited) as rl:
        await pi.offers(OfferQuery())
    assert rl.value.retry_after == 2.5
    await sim.admin.aio.add_fault("primeintellect", "create", "lose_response")
    lost = spec(pi)
    with pytest.raises(Transient) as t:
        await pi.create(offer, lost)
    assert t.value.in_doubt
    found = await pi.create(offer, lost)  # the retry finds the pod by its name
    assert [r.instance_id for r in await pi.find_all(lost.key)] == [found.instance_id]


def mocked(handler: Any) -> PrimeIntellectProvider:
    p = PrimeIntellectProvider(ApiKeyCredentials(api_key="secret-key"),  # type: ignore[arg-type]
                               options=ConnectionOptions(endpoint="https://api.primeintellect.ai/api/v1"),
                               installation_id="abcd1234")
    p._transport = httpx.MockTransport(handler)
    return p


def answering(status: int, body: Any, headers: dict[str, str] | None = None) -> PrimeIntellectProvider:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == "Bearer secret-key"
        if isinstance(body, bytes):
            return httpx.Response(status, content=body, headers=headers)
        return httpx.Response(status, json=body, headers=headers)
    return mocked(handler)


@pytest.mark.parametrize(("status", "body", "error"), [
    (409, {"detail": "Requested GPU is not available right now"}, CapacityError),
    (400, {"detail": "Team quota exceeded for GPUs"}, QuotaError),
    (400, {"detail": "Insufficient balance"}, QuotaError),
    (402, {"detail": "Payment required"}, QuotaError),
    (503, {"detail": "Service Unavailable"}, Transient),
    (422, {"errors": [{"param": "body.pod.gpuCount", "details": "Input should be greater than 0"}]},
     InvalidRequest),  # the spec's ErrorResponse
    (422, {"detail": [{"loc": ["body", "pod", "gpuCount"], "msg": "Input should be greater than 0"}]},
     InvalidRequest),  # FastAPI's default, should the server answer it
    (400, b"<html>capacity proxy page</html>", InvalidRequest),
    (403, {"detail": "Not allowed"}, AuthError),
])
async def test_create_errors_by_detail(status: int, body: Any, error: type[Exception]) -> None:
    """The POST /pods answer mapped: only `detail`'s words classify, and only a 4xx on create."""
    item = {"cloudId": "c", "gpuType": "A100_80GB", "socket": "PCIe", "provider": "tensordock", "gpuCount": 1,
            "region": "united_states", "dataCenter": "US-KS-2", "stockStatus": "High", "gpuMemory": 80,
            "prices": {"onDemand": 1.0}, "vcpu": {"defaultCount": 8}, "memory": {"defaultCount": 32},
            "disk": {"defaultCount": 100}, "images": ["ubuntu_22_cuda_12"]}
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path.removeprefix("/api/v1")
        if path == PODS and request.method == "GET":
            return httpx.Response(200, json={"total_count": 0, "offset": 0, "limit": 100, "data": []})
        if path == SSH_KEYS:
            return httpx.Response(200, json={"data": [{"name": "x", "publicKey": PUBLIC_KEY}]})
        if path == "/availability/gpus":
            return httpx.Response(200, json={"items": [item], "totalCount": 1})
        sent.append(json.loads(request.content))
        if isinstance(body, bytes):
            return httpx.Response(status, content=body)
        return httpx.Response(status, json=body)

    async with mocked(handler) as p:
        [offer] = await p.offers(OfferQuery())
        with pytest.raises(error) as exc:
            await p.create(offer, spec(p))
    pod = sent[0]["pod"]
    assert pod.pop("name").startswith("gpuprov-abcd1234-t-")
    assert pod == {"cloudId": "c", "gpuType": "A100_80GB", "socket": "PCIe", "gpuCount": 1, "diskSize": 100,
                   "vcpus": 8, "memory": 32, "image": "ubuntu_22_cuda_12", "dataCenterId": "US-KS-2"}
    assert sent[0]["provider"] == {"type": "tensordock"}
    assert "proxy page" not in str(exc.value) and "secret-key" not in str(exc.value)
    if status == 422:
        assert "body.pod.gpuCount" in str(exc.value)


async def test_a_gateway_unavailable_outside_create_is_transient() -> None:
    async with answering(503, {"detail": "temporarily unavailable"}) as p:
        with pytest.raises(Transient):
            await p.list_owned()
    async with answering(429, {"detail": "Too many requests"}, {"Retry-After": "7"}) as p:
        with pytest.raises(RateLimited) as rl:
            await p.verify()
        assert rl.value.retry_after == 7
    async with answering(307, {}, {"Location": "/api/v1/elsewhere/"}) as p:
        with pytest.raises(InvalidRequest, match="redirect"):
            await p.verify()


async def test_what_the_adapter_refuses_before_calling(pi: PrimeIntellectProvider,
                                                       sim: FakeCloudServer) -> None:
    offer = await offer_of(pi)
    with pytest.raises(Unsupported):
        await pi.create(offer, spec(pi, user_data="#!/bin/sh\necho hi"))
    with pytest.raises(Unsupported):
        await pi.create(offer, spec(pi, ports=[8080]))
    with pytest.raises(InvalidRequest):
        await pi.create(offer.model_copy(update={"instance_type": "not-a-listing"}), spec(pi))
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
    await pi.create(offer, spec(pi, ssh_public_keys=[PUBLIC_KEY, other]))
    assert type(pi).capabilities.user_keys == "ssh", "gpuprov adds the user's keys over SSH"
    keys = [k["publicKey"] for k in await _account_keys(sim)]
    assert keys == [PUBLIC_KEY], "the user's own key is not made account-wide"


async def _account_keys(sim: FakeCloudServer) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {sim.tokens['primeintellect']}"}
    async with httpx.AsyncClient(base_url=f"{sim.url}/primeintellect/api/v1", headers=headers) as c:
        data: list[dict[str, Any]] = (await c.get("/ssh_keys/")).json()["data"]
        return data


async def test_list_owned_reads_every_page_and_only_ours(sim: FakeCloudServer) -> None:
    async with adapter(sim, SmallPages) as ours, adapter(sim) as theirs:
        offer = await offer_of(ours)
        refs = [await ours.create(offer, spec(ours)) for _ in range(3)]
        their = await theirs.create(offer, spec(theirs))
        owned = await ours.list_owned()
        assert sorted((r.instance_id, r.key) for r in owned) == sorted((r.instance_id, r.key) for r in refs)
        assert [r.instance_id for r in await theirs.list_owned()] == [their.instance_id]
        long_key = "gp-" + "x" * 60
        made = await ours.create(await offer_of(ours, zone="CA-MTL-1"), spec(ours, key=long_key))
        assert len(pod_name(ours.installation_id, long_key)) == 64
        assert (await ours.find(long_key)) == made.model_copy(update={"region": None})


async def test_a_listing_that_never_ends_is_transient() -> None:
    item = {"cloudId": "c", "gpuType": "A100_80GB", "socket": "PCIe", "provider": "tensordock", "gpuCount": 1,
            "region": "united_states", "stockStatus": "High", "prices": {"onDemand": 1.0}}
    async with answering(200, {"items": [item], "totalCount": 10**9}) as p:
        with pytest.raises(Transient, match="did not end"):
            await p.offers(OfferQuery())


@pytest.mark.parametrize("slashless", [False, True], ids=["spec-slash-paths", "slashless-paths"])
async def test_the_collections_work_under_either_reading_of_the_trailing_slash(
        sim: FakeCloudServer, pi: PrimeIntellectProvider, slashless: bool) -> None:
    """The spec's `/pods/` and `/ssh_keys/` served (the default), or 307'd to their slashless forms: the
    adapter registers its key, creates, lists and terminates a pod either way (it used to send the
    slashless forms and not follow the 307 of a server serving the spec's paths)."""
    sim.engine.facade_state["primeintellect"]["slashless"] = slashless
    ref = await pi.create(await offer_of(pi), spec(pi))
    keys = sim.engine.facade_state["primeintellect"]["ssh_keys"].values()
    assert [k["publicKey"] for k in keys] == [PUBLIC_KEY]
    assert [r.instance_id for r in await pi.list_owned()] == [ref.instance_id]
    await pi.terminate(ref)
    await eventually(lambda: _gone(pi, ref), within=WITHIN, what="the pod to go")


async def test_only_a_same_origin_slash_redirect_is_followed_and_it_keeps_method_and_body() -> None:
    seen: list[tuple[str, str, bytes]] = []
    hops = {"/api/v1/ssh_keys/": "/api/v1/ssh_keys",  # the slash twin: followed
            "/api/v1/pods/": "https://elsewhere.example.invalid/api/v1/pods"}  # another origin: not

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, str(request.url), request.content))
        assert request.headers["Authorization"] == "Bearer secret-key"
        if request.url.path in hops:
            return httpx.Response(307, headers={"Location": hops[request.url.path]})
        if request.method == "GET":
            return httpx.Response(200, json={"data": []})
        return httpx.Response(200, json={"id": "k1"})

    p = mocked(handler)
    async with p:
        await p._ensure_ssh_key(PUBLIC_KEY)
        with pytest.raises(InvalidRequest, match="redirect"):
            await p.list_owned()
    base = "https://api.primeintellect.ai/api/v1"
    posts = [(url, json.loads(body)) for method, url, body in seen if method == "POST"]
    assert [url for url, _ in posts] == [f"{base}/ssh_keys/", f"{base}/ssh_keys"]
    assert posts[0][1] == posts[1][1] and posts[1][1]["publicKey"] == " ".join(PUBLIC_KEY.split()[:2])
    assert not any("elsewhere" in url for _, url, _ in seen), "the key never goes to another origin"

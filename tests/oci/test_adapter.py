"""The OCI adapter against its simulation, through the unchanged `oci` SDK: a lifecycle pins the remote
calls the adapter makes (an SDK upgrade that changes them fails here), a lost launch answer retried is
one instance (the adapter's own `opc-retry-token`), spot launches preemptible capacity, the SSH key and
k3s reach the VM through instance metadata, and the per-machine NSG opens SSH and --port and goes with
the machine."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator

import asyncssh
import pytest

from fakeclouds import oci_api
from fakeclouds.server import FakeCloudServer
from providers.base import (
    AuthError,
    CapacityError,
    ConnectionOptions,
    InstanceRef,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    OfferQuery,
    Ownership,
    Transient,
)
from providers.oci import OciProvider

KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


@pytest.fixture(scope="module")
def server() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(facades=[oci_api.FACADE], boot_delay=0.2, terminate_delay=0.02, time_scale=0) as srv:
        yield srv


def build(server: FakeCloudServer, token: str | None = None) -> OciProvider:
    creds = OciProvider.parse_credentials(oci_api.FACADE.credentials(token or server.tokens["oci"]))
    return OciProvider(
        creds,
        installation_id="abcd1234",
        options=ConnectionOptions(endpoint=server.url + oci_api.FACADE.prefix),
    )


@pytest.fixture
async def provider(server: FakeCloudServer) -> AsyncIterator[OciProvider]:
    server.admin.reset()
    async with build(server) as p:
        yield p


def spec(key: str, **extra: object) -> LaunchSpec:
    return LaunchSpec(
        key=key,
        owner=Ownership(installation_id="abcd1234", allocation_id=key),
        ssh_public_keys=[KEY],
        **extra,
    )  # type: ignore[arg-type]


async def running(p: OciProvider, ref: InstanceRef) -> InstanceStatus:
    for _ in range(200):
        st = await p.get(ref)
        if st is not None and st.state == "running" and st.host:
            return st
        await asyncio.sleep(0.05)
    raise AssertionError("never running")


async def gone(p: OciProvider, ref: InstanceRef) -> None:
    for _ in range(200):
        if await p.get(ref) is None:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("never gone")


async def test_lifecycle_leaves_nothing(server: FakeCloudServer, provider: OciProvider) -> None:
    assert "simulated-tenancy" in await provider.verify()
    offer = (await provider.offers(OfferQuery(gpu="A10", spot=False)))[0]
    assert offer.zone == "Uocm:US-ASHBURN-1-AD-1" and offer.region == "us-ashburn-1"
    ref = await provider.create(offer, spec("pin-1", k3s=True, ports=[8443]))
    st = await running(provider, ref)
    assert st.ssh_user == "ubuntu" and st.host and st.host.startswith("127.")
    assert [r.instance_id for r in await provider.list_owned()] == [ref.instance_id]
    await provider.terminate(ref)
    await gone(provider, ref)
    await provider.terminate(ref)
    await provider.release(ref.key)
    assert server.admin.side_resources() == [] or not any(
        r["kind"] == "network-security-group" for r in server.admin.side_resources()
    )


async def test_lost_launch_answer_is_one_instance(server: FakeCloudServer, provider: OciProvider) -> None:
    offer = (await provider.offers(OfferQuery(gpu="A10", spot=False)))[0]
    server.admin.add_fault("oci", "create", "lose_response")
    with pytest.raises(Exception):  # noqa: B017 — a Transient, in doubt
        await provider.create(offer, spec("lost-1"))
    ref = await provider.create(offer, spec("lost-1"))
    assert [r.instance_id for r in await provider.find_all("lost-1")] == [ref.instance_id]
    assert len([m for m in server.engine.live("oci")]) == 1
    await provider.terminate(ref)


async def test_spot_is_preemptible_and_metadata_carries_key_and_k3s(
    server: FakeCloudServer, provider: OciProvider
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="A10", spot=True)))[0]
    on_demand = (await provider.offers(OfferQuery(gpu="A10", spot=False)))[0]
    assert offer.price_per_hour == pytest.approx(on_demand.price_per_hour / 2)
    ref = await provider.create(offer, spec("spot-1", k3s=True))
    m = server.engine.machines[ref.instance_id]
    assert m.spot and KEY in m.public_keys
    assert m.user_data and "k3s" in m.user_data
    assert base64.b64decode(m.extra["metadata"]["user_data"]).decode() == m.user_data
    await provider.terminate(ref)


async def test_nsg_opens_ssh_and_ports_and_is_refused_while_in_use(
    server: FakeCloudServer, provider: OciProvider
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="A10", spot=False)))[0]
    ref = await provider.create(offer, spec("nsg-1", ports=[8443, 6443]))
    [nsg] = server.engine.facade_state["oci"]["nsgs"].values()
    ports = sorted(r["tcpOptions"]["destinationPortRange"]["min"] for r in nsg["rules"])
    assert ports == [22, 6443, 8443] and nsg["displayName"] == "gpuprov-abcd1234-nsg-1"
    assert server.engine.machines[ref.instance_id].extra["nsgs"] == [nsg["id"]]
    with pytest.raises(Transient, match="still in use"):  # 409 Conflict: the instance's VNIC uses it
        await provider.release("nsg-1")
    assert nsg["id"] in server.engine.facade_state["oci"]["nsgs"]
    await provider.terminate(ref)
    await gone(provider, ref)
    await provider.terminate(ref)
    assert server.engine.facade_state["oci"]["nsgs"] == {}


async def test_a_retry_finds_the_nsg_and_adds_the_rules_a_cut_short_create_left_out(
    server: FakeCloudServer, provider: OciProvider
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="A10", spot=False)))[0]
    server.admin.add_fault("oci", "create", "server_error", status=503)
    with pytest.raises(Transient):
        await provider.create(offer, spec("cut-1", ports=[8443]))
    [nsg] = server.engine.facade_state["oci"]["nsgs"].values()
    nsg["rules"].clear()  # as if the worker died between making the NSG and adding its rules
    ref = await provider.create(offer, spec("cut-1", ports=[8443]))
    [again] = server.engine.facade_state["oci"]["nsgs"].values()
    assert again["id"] == nsg["id"]
    assert sorted(r["tcpOptions"]["destinationPortRange"]["min"] for r in again["rules"]) == [22, 8443]
    await provider.terminate(ref)


async def test_a_create_that_raced_past_the_lookups_gets_the_keys_instance(
    server: FakeCloudServer, provider: OciProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two creates of one key that both found nothing each make an NSG: the second launch carries the
    key's token with another NSG, OCI answers 409 Conflict, and the second create returns the first's
    instance. Terminate and release remove both NSGs."""
    offer = (await provider.offers(OfferQuery(gpu="A10", spot=False)))[0]
    first = await provider.create(offer, spec("race-1"))
    real_instances, real_nsgs = provider._instances, provider._nsgs
    blind = {"instances": 1, "nsgs": 1}  # the second create's lookups see nothing, as in the race

    async def instances(region: str, name: str | None = None) -> list[object]:
        if blind["instances"]:
            blind["instances"] -= 1
            return []
        return await real_instances(region, name)

    async def nsgs(region: str, name: str | None = None) -> list[object]:
        if blind["nsgs"]:
            blind["nsgs"] -= 1
            return []
        return await real_nsgs(region, name)

    monkeypatch.setattr(provider, "_instances", instances)
    monkeypatch.setattr(provider, "_nsgs", nsgs)
    second = await provider.create(offer, spec("race-1"))
    assert second.instance_id == first.instance_id and len(server.engine.live("oci")) == 1
    assert len(server.engine.facade_state["oci"]["nsgs"]) == 2
    monkeypatch.undo()
    await provider.terminate(first)
    await gone(provider, first)
    await provider.release("race-1")
    assert server.engine.facade_state["oci"]["nsgs"] == {}


async def test_capacity_names_the_availability_domain(server: FakeCloudServer, provider: OciProvider) -> None:
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    server.engine.set_stock(offer.instance_type, offer.region, 0, facade="oci")
    with pytest.raises(CapacityError) as exc:
        await provider.create(offer, spec("cap-1"))
    assert "Out of host capacity" in exc.value.message
    assert (exc.value.scope.region, exc.value.scope.zone, exc.value.scope.instance_type) == (
        offer.region,
        offer.zone,
        offer.instance_type,
    )
    assert server.engine.facade_state["oci"]["nsgs"] == {}  # a refused launch leaves no NSG


async def test_regions_are_the_subscriptions_default_home(provider: OciProvider) -> None:
    home = await provider.offers(OfferQuery())
    assert {o.region for o in home} == {"us-ashburn-1"}
    fra = await provider.offers(OfferQuery(region="eu-frankfurt-1"))
    assert fra and {o.region for o in fra} == {"eu-frankfurt-1"}
    assert await provider.offers(OfferQuery(region="ap-tokyo-1")) == []  # not subscribed


async def test_image_must_be_an_ocid(provider: OciProvider) -> None:
    offer = (await provider.offers(OfferQuery(gpu="A10")))[0]
    with pytest.raises(InvalidRequest, match="image OCID"):
        await provider.create(offer, spec("img-1", image="ubuntu:22.04"))


async def test_wrong_key_is_refused_with_the_clouds_reason(server: FakeCloudServer) -> None:
    async with build(server, token="wrong-token") as bad:
        with pytest.raises(AuthError, match="NotAuthenticated"):
            await bad.verify()


async def test_six_minutes_of_clock_skew_is_refused_with_the_clouds_reason(
    server: FakeCloudServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import email.utils
    import time

    import oci

    real = email.utils.formatdate
    monkeypatch.setattr(
        oci.signer.email.utils, "formatdate", lambda *a, **k: real(time.time() - 360, usegmt=True)
    )
    async with build(server) as p:
        with pytest.raises(AuthError, match="NotAuthenticated.*5 minutes"):
            await p.verify()
        with pytest.raises(AuthError):
            await p.offers(OfferQuery())
    assert server.engine.live("oci") == []


async def test_a_key_that_is_not_pem_is_an_auth_error_naming_no_secret(server: FakeCloudServer) -> None:
    raw = {**oci_api.FACADE.credentials(server.tokens["oci"]), "private_key": "as-not-a-key-secret"}
    async with OciProvider(
        OciProvider.parse_credentials(raw),
        installation_id="abcd1234",
        options=ConnectionOptions(endpoint=server.url + "/oci"),
    ) as p:
        with pytest.raises(AuthError) as exc:
            await p.verify()
    assert "as-not-a-key-secret" not in str(exc.value)


def test_the_registry_and_the_adapter_module_import_no_sdk() -> None:
    """`oci` (~250 MB, seconds to import) is imported by the first call a connection makes, never by
    the registry, the adapter's module, its capabilities or credentials, nor the simulation."""
    import subprocess
    import sys

    code = (
        "import sys, providers.registry as r, providers.oci, fakeclouds.oci_api; r.capabilities('oci'); "
        "r.adapter_class('oci').parse_credentials(fakeclouds.oci_api.FACADE.credentials('t')); "
        "print(sorted(m for m in sys.modules if m == 'oci' or m.startswith('oci.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""The Kubernetes API port on OCI: the per-machine NSG opens 6443 only from `LaunchSpec.k8s_api_from`
(SSH and --port stay open to anywhere), nothing opens it without; what the simulated firewall admits
(`FACADE.ingress`: the subnet's security lists plus the VNIC's NSGs) says so; a retried create adds no
rule twice, and the NSG still goes with the machine."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator, Iterator
from types import SimpleNamespace

import asyncssh
import pytest

from fakeclouds import oci_api
from fakeclouds.engine import Machine
from fakeclouds.facade import IngressRule
from fakeclouds.server import FakeCloudServer
from providers.base import (
    K8S_API_PORT,
    ConnectionOptions,
    InstanceRef,
    LaunchSpec,
    OfferQuery,
    Ownership,
    Transient,
)
from providers.oci import OciProvider

KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
INSTALLATION = "k8s0oci1"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(facades=[oci_api.FACADE], boot_delay=0.2, terminate_delay=0.02, time_scale=0) as srv:
        yield srv


@pytest.fixture
async def provider(server: FakeCloudServer) -> AsyncIterator[OciProvider]:
    server.admin.reset()
    creds = OciProvider.parse_credentials(oci_api.FACADE.credentials(server.tokens["oci"]))
    options = ConnectionOptions(endpoint=server.url + oci_api.FACADE.prefix)
    p = OciProvider(creds, installation_id=INSTALLATION, options=options)
    async with p:
        yield p


def spec(key: str, **extra: object) -> LaunchSpec:
    owner = Ownership(installation_id=INSTALLATION, allocation_id=key)
    return LaunchSpec(key=key, owner=owner, ssh_public_keys=[KEY], **extra)  # type: ignore[arg-type]


def admits(rules: list[IngressRule], port: int, peer: str) -> bool:
    net = ipaddress.ip_network(peer)
    for lo, hi, cidr in rules:
        src = ipaddress.ip_network(cidr)
        if lo <= port <= hi and net.version == src.version and net.subnet_of(src):  # type: ignore[arg-type]
            return True
    return False


def ingress(server: FakeCloudServer, ref: InstanceRef) -> list[IngressRule]:
    assert oci_api.FACADE.ingress is not None
    return oci_api.FACADE.ingress(server.engine, server.engine.machines[ref.instance_id])


def nsg_rules(server: FakeCloudServer) -> list[tuple[int, str]]:
    [nsg] = server.engine.facade_state["oci"]["nsgs"].values()
    return sorted((r["tcpOptions"]["destinationPortRange"]["min"], r["source"]) for r in nsg["rules"])


async def gone(p: OciProvider, ref: InstanceRef) -> None:
    for _ in range(200):
        if await p.get(ref) is None:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("never gone")


async def test_k8s_api_opens_only_to_the_asked_network(
    server: FakeCloudServer, provider: OciProvider
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="A10", spot=False)))[0]
    ref = await provider.create(offer, spec("k8s-1", ports=[8080], k8s_api_from=["127.0.0.1/32"]))
    rules = ingress(server, ref)
    assert admits(rules, K8S_API_PORT, "127.0.0.1/32")
    assert not admits(rules, K8S_API_PORT, "0.0.0.0/0") and not admits(rules, K8S_API_PORT, "127.0.0.2/32")
    assert admits(rules, 22, "0.0.0.0/0") and admits(rules, 8080, "0.0.0.0/0")
    assert nsg_rules(server) == [(22, "0.0.0.0/0"), (K8S_API_PORT, "127.0.0.1/32"), (8080, "0.0.0.0/0")]
    await provider.terminate(ref)
    await gone(provider, ref)
    await provider.terminate(ref)
    assert server.engine.facade_state["oci"]["nsgs"] == {}


async def test_without_k8s_api_from_nothing_opens_6443(
    server: FakeCloudServer, provider: OciProvider
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="A10", spot=False)))[0]
    ref = await provider.create(offer, spec("k8s-2", ports=[8080]))
    rules = ingress(server, ref)
    assert not any(lo <= K8S_API_PORT <= hi for lo, hi, _ in rules)
    assert admits(rules, 22, "0.0.0.0/0") and admits(rules, 8080, "0.0.0.0/0")
    await provider.terminate(ref)


def test_the_default_security_list_alone_admits_ssh() -> None:
    """What the subnet's default security list lets in, with no NSG on the VNIC."""
    subnet = {"id": "ocid1.subnet.oc1.x.a", "vcnId": "ocid1.vcn.oc1.x.a", "compartmentId": "t"}
    engine = SimpleNamespace(facade_state={"oci": {"subnets": {subnet["id"]: subnet}}})
    m = Machine(id="m", facade="oci", name=None, instance_type="VM.GPU.A10.1", region="x", spot=False,
                ssh_user="ubuntu", public_keys=[], price_per_hour=1.0, created_at=0.0, boot_at=0.0,
                extra={"subnet": subnet["id"], "nsgs": []})
    assert oci_api.FACADE.ingress is not None
    assert oci_api.FACADE.ingress(engine, m) == [(22, 22, "0.0.0.0/0")]  # type: ignore[arg-type]


async def test_a_retried_create_adds_no_rule_twice_and_only_the_missing_one(
    server: FakeCloudServer, provider: OciProvider
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="A10", spot=False)))[0]
    s = spec("k8s-3", ports=[8080], k8s_api_from=["127.0.0.1/32", "203.0.113.0/24"])
    want = [
        (22, "0.0.0.0/0"),
        (K8S_API_PORT, "127.0.0.1/32"),
        (K8S_API_PORT, "203.0.113.0/24"),
        (8080, "0.0.0.0/0"),
    ]
    server.admin.add_fault("oci", "create", "server_error", status=503)
    with pytest.raises(Transient):  # the NSG and its rules were made, the launch failed
        await provider.create(offer, s)
    assert nsg_rules(server) == want
    server.admin.add_fault("oci", "create", "server_error", status=503)
    with pytest.raises(Transient):  # a retry finds every rule there: adds none
        await provider.create(offer, s)
    assert nsg_rules(server) == want
    [nsg] = server.engine.facade_state["oci"]["nsgs"].values()
    nsg["rules"] = [r for r in nsg["rules"] if r["source"] != "203.0.113.0/24"]  # cut short halfway
    ref = await provider.create(offer, s)
    again = await provider.create(offer, s)  # the instance found: nothing added either
    assert again.instance_id == ref.instance_id
    assert nsg_rules(server) == want
    rules = ingress(server, ref)
    assert admits(rules, K8S_API_PORT, "203.0.113.7/32")
    assert not admits(rules, K8S_API_PORT, "198.51.100.1/32")
    assert [r.kind for r in await provider.list_owned()] == ["machine"]
    await provider.terminate(ref)
    await gone(provider, ref)
    await provider.terminate(ref)
    assert server.engine.facade_state["oci"]["nsgs"] == {}


async def test_release_removes_the_nsg_a_failed_create_left(
    server: FakeCloudServer, provider: OciProvider
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="A10", spot=False)))[0]
    server.admin.add_fault("oci", "create", "server_error", status=503)
    with pytest.raises(Transient):
        await provider.create(offer, spec("k8s-4", k8s_api_from=["127.0.0.1/32"]))
    assert [(r.kind, r.key) for r in await provider.list_owned()] == [("network-security-group", "k8s-4")]
    await provider.release("k8s-4")
    assert server.engine.facade_state["oci"]["nsgs"] == {}

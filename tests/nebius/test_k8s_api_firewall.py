"""The Kubernetes API port on Nebius, as it really is: the instance's NIC names no security group, so
the network's default group applies and lets every port in from anywhere. `k8s_api_from` is not applied
(providers/nebius.py says why), and the simulation's `ingress` answers what the default group admits,
not what the caller asked for. No side resource is made for it; a retried create is still one instance."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator

import asyncssh
import pytest

from fakeclouds import nebius_api
from fakeclouds.errors import Invalid
from fakeclouds.facade import IngressRule
from fakeclouds.server import FakeCloudServer
from providers.base import K8S_API_PORT, InstanceRef, LaunchSpec, OfferQuery, Ownership, Transient
from providers.nebius import NebiusProvider
from tests.nebius.test_adapter import new_provider

KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


@pytest.fixture
async def provider(server: FakeCloudServer) -> AsyncIterator[NebiusProvider]:
    server.admin.reset()
    p = new_provider(server, "k8s12345")
    async with p:
        yield p


def spec(key: str, **extra: object) -> LaunchSpec:
    return LaunchSpec(key=key, owner=Ownership(installation_id="k8s12345", allocation_id=key),
                      ssh_public_keys=[KEY], **extra)  # type: ignore[arg-type]


def admits(rules: list[IngressRule], port: int, source: str) -> bool:
    ip = ipaddress.ip_address(source)
    return any(first <= port <= last and ip in ipaddress.ip_network(cidr) for first, last, cidr in rules)


def ingress(server: FakeCloudServer, ref: InstanceRef) -> list[IngressRule]:
    assert nebius_api.FACADE.ingress is not None
    return nebius_api.FACADE.ingress(server.engine, server.engine.machines[ref.instance_id])


async def test_the_default_security_group_admits_6443_from_anywhere(server: FakeCloudServer,
                                                                     provider: NebiusProvider) -> None:
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    for key, extra in (("k8s-from", {"k8s_api_from": ["127.0.0.1/32"]}), ("k8s-none", {})):
        ref = await provider.create(offer, spec(key, ports=[8080], **extra))
        rules = ingress(server, ref)
        assert rules == [(1, 65535, "0.0.0.0/0")]  # what Nebius's default group lets in
        for port in (22, 8080, K8S_API_PORT):  # 6443 is NOT restricted to k8s_api_from: reported, not hidden
            assert admits(rules, port, "127.0.0.1") and admits(rules, port, "203.0.113.9")
        await provider.terminate(ref)
    assert server.admin.side_resources() == []  # nothing made for 6443


async def test_a_retried_create_is_one_instance(server: FakeCloudServer, provider: NebiusProvider) -> None:
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    s = spec("k8s-retry", k8s_api_from=["127.0.0.1/32"])
    server.admin.add_fault("nebius", "create", "lose_response")
    with pytest.raises(Transient):
        await provider.create(offer, s)
    ref = await provider.create(offer, s)
    assert await provider.create(offer, s) == ref
    assert [r.instance_id for r in await provider.find_all(s.key)] == [ref.instance_id]
    assert [r.instance_id for r in await provider.list_owned()] == [ref.instance_id]  # no side resource
    await provider.terminate(ref)


def test_named_security_groups_are_refused_not_ignored() -> None:
    """The simulation has only the default group: a NIC naming another would be silently unfiltered."""
    from nebius.api.nebius.common import v1 as common
    from nebius.api.nebius.compute import v1 as compute

    from fakeclouds import nebius_catalog as cat

    project = cat.PROJECTS[0]
    nic = compute.NetworkInterfaceSpec(name="eth0", subnet_id=project.subnet_id,
                                       ip_address=compute.IPAddress(),
                                       public_ip_address=compute.PublicIPAddress(),
                                       security_groups=[compute.SecurityGroup(id="vpcsecuritygroup-x")])
    platform = next(p for p in cat.PLATFORMS if project.region in p.regions)
    disk = compute.AttachedDiskSpec(managed_disk=compute.ManagedDisk(name="boot", spec=compute.DiskSpec(
        size_gibibytes=100, source_image_id=next(iter(cat.IMAGE_FAMILIES.values())))))
    request = compute.CreateInstanceRequest(
        metadata=common.ResourceMetadata(parent_id=project.id, name="sg"),
        spec=compute.InstanceSpec(resources=compute.ResourcesSpec(platform=platform.name,
                                                                  preset=cat.preset_name(*platform.presets[0])),
                                  boot_disk=disk, network_interfaces=[nic]))
    with pytest.raises(Invalid, match="security groups"):
        nebius_api._create_args(request)

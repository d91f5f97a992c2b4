"""The Kubernetes API port on Azure: the machine's NSG opens 6443 only from `LaunchSpec.k8s_api_from`
(SSH and --port stay open to anywhere), nothing opens it without; what the simulated firewall admits
(`FACADE.ingress`: the inbound rules of the NSG on the VM's NIC, by priority) says so; a retried create
puts the same rules again (never twice), and the NSG still goes with the machine or the key."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest

from fakeclouds import azure_api
from fakeclouds.azure_arm_network import nsg_inbound
from fakeclouds.facade import IngressRule
from fakeclouds.server import FakeCloudServer
from providers.azure import AzureProvider
from providers.base import K8S_API_PORT, InstanceRef, Transient
from tests.azure.conftest import CLOUD, Sdk, cheapest, names, ours, spec


def admits(rules: list[IngressRule], port: int, peer: str) -> bool:
    net = ipaddress.ip_network(peer)
    for lo, hi, cidr in rules:
        src = ipaddress.ip_network(cidr)
        if lo <= port <= hi and net.version == src.version and net.subnet_of(src):  # type: ignore[arg-type]
            return True
    return False


def ingress(sim: FakeCloudServer, ref: InstanceRef) -> list[IngressRule]:
    assert azure_api.FACADE.ingress is not None
    return azure_api.FACADE.ingress(sim.engine, sim.engine.machines[ref.instance_id])


def nsg_rules(sdk: Sdk, group: str, name: str) -> list[dict[str, object]]:
    got = sdk.network.network_security_groups.get(group, f"{name}-nsg").as_dict()
    return sorted(
        ({"name": r["name"], **r["properties"]} for r in got["properties"]["securityRules"]),
        key=lambda r: str(r["name"]),
    )


async def test_k8s_api_opens_only_to_the_asked_network(
    provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk
) -> None:
    offer = await cheapest(provider)
    s = spec(provider.installation_id, ports=[8080], k8s_api_from=["127.0.0.1/32"])
    ref = await provider.create(offer, s)
    rules = ingress(sim, ref)
    assert admits(rules, K8S_API_PORT, "127.0.0.1/32")
    assert not admits(rules, K8S_API_PORT, "0.0.0.0/0") and not admits(rules, K8S_API_PORT, "127.0.0.2/32")
    assert admits(rules, 22, "0.0.0.0/0") and admits(rules, 8080, "0.0.0.0/0")
    group, name = names(provider.installation_id, s.key, offer.region)
    [k8s] = [r for r in nsg_rules(sdk, group, name) if r["destinationPortRange"] == str(K8S_API_PORT)]
    assert k8s["sourceAddressPrefixes"] == ["127.0.0.1/32"] and k8s["access"] == "Allow"

    await provider.terminate(ref)
    assert await provider.get(ref) is None
    assert ours(sdk.network.network_security_groups.list_all(), provider.installation_id) == []
    assert await provider.list_owned() == []


async def test_without_k8s_api_from_nothing_opens_6443(
    provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk
) -> None:
    offer = await cheapest(provider)
    s = spec(provider.installation_id, ports=[8080])
    ref = await provider.create(offer, s)
    rules = ingress(sim, ref)
    assert not any(lo <= K8S_API_PORT <= hi for lo, hi, _ in rules)
    assert admits(rules, 22, "0.0.0.0/0") and admits(rules, 8080, "0.0.0.0/0")
    group, name = names(provider.installation_id, s.key, offer.region)
    assert [r["name"] for r in nsg_rules(sdk, group, name)] == ["port-8080", "ssh"]
    await provider.terminate(ref)


async def test_a_retried_create_puts_each_rule_once(
    provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk
) -> None:
    offer = await cheapest(provider)
    s = spec(provider.installation_id, ports=[8080], k8s_api_from=["127.0.0.1/32", "203.0.113.0/24"])
    group, name = names(provider.installation_id, s.key, offer.region)
    sim.admin.add_fault(CLOUD, "create", "server_error", status=503)
    with pytest.raises(Transient):  # the network was made, the VM's PUT failed
        await provider.create(offer, s)
    first = nsg_rules(sdk, group, name)
    assert [r["name"] for r in first] == ["k8s-api", "port-8080", "ssh"]
    ref = await provider.create(offer, s)  # PUTs the NSG again: the same rules, none added
    again = await provider.create(offer, s)  # finds the VM
    assert again.instance_id == ref.instance_id
    assert nsg_rules(sdk, group, name) == first
    rules = ingress(sim, ref)
    assert admits(rules, K8S_API_PORT, "203.0.113.7/32") and admits(rules, K8S_API_PORT, "127.0.0.1/32")
    assert not admits(rules, K8S_API_PORT, "198.51.100.1/32")
    await provider.terminate(ref)
    assert ours(sdk.network.network_security_groups.list_all(), provider.installation_id) == []


async def test_release_removes_the_network_a_failed_create_left(
    provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk
) -> None:
    offer = await cheapest(provider)
    s = spec(provider.installation_id, k8s_api_from=["127.0.0.1/32"])
    sim.admin.add_fault(CLOUD, "create", "server_error", status=503)
    with pytest.raises(Transient):
        await provider.create(offer, s)
    owned = await provider.list_owned()
    assert sorted(r.kind for r in owned) == ["nic", "nsg", "public-ip"] and {r.key for r in owned} == {s.key}
    await provider.release(s.key)
    assert await provider.list_owned() == []
    assert ours(sdk.network.network_security_groups.list_all(), provider.installation_id) == []


def _rule(name: str, priority: int, port: str, source: str | list[str], **props: str) -> dict[str, Any]:
    src = {"sourceAddressPrefixes": source} if isinstance(source, list) else {"sourceAddressPrefix": source}
    return {"name": name, "properties": {
        "protocol": "Tcp", "sourcePortRange": "*", "destinationPortRange": port, **src,
        "destinationAddressPrefix": "*", "access": "Allow", "priority": priority, "direction": "Inbound",
        **props}}


def test_a_deny_of_higher_priority_shadows_the_allows_after_it() -> None:
    rules = [
        _rule("open", 1000, "6000-7000", "*"),
        _rule("shut", 900, "6443", "127.0.0.0/8", access="Deny"),
        _rule("late", 1100, "6443", ["127.0.0.1"]),  # after the deny: admits nothing the deny covers
        _rule("udp", 1200, "53", "*", protocol="Udp"),
        _rule("out", 1300, "9000", "*", direction="Outbound"),
        _rule("elsewhere", 1400, "9100", "*", destinationAddressPrefix="10.99.0.0/16"),
    ]
    got = nsg_inbound(rules, {"10.64.0.4"})
    assert admits(got, 6443, "8.8.8.8/32") and admits(got, 6442, "127.0.0.1/32")
    assert admits(got, 6444, "127.0.0.1/32") and admits(got, 7000, "0.0.0.0/0")
    assert not admits(got, 6443, "127.0.0.1/32") and not admits(got, 6443, "127.1.2.3/32")
    assert not admits(got, 53, "0.0.0.0/0") and not admits(got, 9000, "0.0.0.0/0")
    assert not admits(got, 9100, "0.0.0.0/0")

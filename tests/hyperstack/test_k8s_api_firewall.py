"""The Kubernetes API port on Hyperstack: the create's `security_rules` open 6443 only to the networks in
`k8s_api_from`, beside SSH and `ports` from anywhere, and the simulation's `ingress` (the VM's security
rules) says so; without `k8s_api_from` no rule admits 6443. A retried create adds no rule (it finds the
VM by name); the rules go with the VM, so there is no side resource to remove."""

from __future__ import annotations

import ipaddress

import httpx
import pytest

from fakeclouds import hyperstack_api
from fakeclouds.facade import IngressRule
from fakeclouds.server import FakeCloudServer
from providers.base import K8S_API_PORT, InstanceRef, Transient
from providers.hyperstack import HyperstackProvider
from tests.hyperstack.conftest import offer, spec


def admits(rules: list[IngressRule], port: int, source: str) -> bool:
    """Whether some rule lets `source` (an address) in on TCP `port`."""
    ip = ipaddress.ip_address(source)
    return any(first <= port <= last and ip.version == ipaddress.ip_network(cidr).version
               and ip in ipaddress.ip_network(cidr) for first, last, cidr in rules)


def ingress(sim: FakeCloudServer, ref: InstanceRef) -> list[IngressRule]:
    assert hyperstack_api.FACADE.ingress is not None
    return hyperstack_api.FACADE.ingress(sim.engine, sim.engine.machines[ref.instance_id])


async def test_6443_is_open_to_the_given_networks_only(hs: HyperstackProvider, sim: FakeCloudServer) -> None:
    s = spec(hs, ports=[8080], k8s_api_from=["127.0.0.1/32"])
    ref = await hs.create(await offer(hs), s)
    rules = ingress(sim, ref)
    assert admits(rules, K8S_API_PORT, "127.0.0.1")
    assert not admits(rules, K8S_API_PORT, "127.0.0.2") and not admits(rules, K8S_API_PORT, "203.0.113.9")
    assert sorted(rules) == [(22, 22, "0.0.0.0/0"), (K8S_API_PORT, K8S_API_PORT, "127.0.0.1/32"),
                             (8080, 8080, "0.0.0.0/0")]
    sent = sim.admin.machine(ref.instance_id)["extra"]["security_rules"]
    assert [(r["port_range_min"], r["remote_ip_prefix"], r["ethertype"]) for r in sent] == [
        (22, "0.0.0.0/0", "IPv4"), (8080, "0.0.0.0/0", "IPv4"), (K8S_API_PORT, "127.0.0.1/32", "IPv4")]
    await hs.terminate(ref)


async def test_without_k8s_api_from_6443_stays_closed(hs: HyperstackProvider, sim: FakeCloudServer) -> None:
    ref = await hs.create(await offer(hs), spec(hs, ports=[8080]))
    rules = ingress(sim, ref)
    assert not any(first <= K8S_API_PORT <= last for first, last, _ in rules)
    assert admits(rules, 22, "203.0.113.9") and admits(rules, 8080, "203.0.113.9")
    await hs.terminate(ref)


async def test_a_retried_create_adds_no_rule(hs: HyperstackProvider, sim: FakeCloudServer) -> None:
    s = spec(hs, ports=[8080], k8s_api_from=["127.0.0.1/32", "203.0.113.0/24"])
    sim.admin.add_fault("hyperstack", "create", "lose_response")
    with pytest.raises(Transient):
        await hs.create(await offer(hs), s)  # made, but the answer was lost
    ref = await hs.create(await offer(hs), s)  # found by name: nothing sent again
    assert await hs.create(await offer(hs), s) == ref
    assert [r.instance_id for r in await hs.find_all(s.key)] == [ref.instance_id]
    rules = ingress(sim, ref)
    assert len(rules) == len(set(rules)) == 4
    assert admits(rules, K8S_API_PORT, "203.0.113.77") and not admits(rules, K8S_API_PORT, "198.51.100.1")
    await hs.terminate(ref)


async def test_per_vm_rules_count_and_a_portless_rule_opens_every_port(
        hs: HyperstackProvider, sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    ref = await hs.create(await offer(hs), spec(hs))
    for direction, protocol, cidr in (("ingress", "any", "10.0.0.0/8"), ("ingress", "udp", "0.0.0.0/0"),
                                      ("egress", "tcp", "0.0.0.0/0")):
        rule = {"direction": direction, "ethertype": "IPv4", "protocol": protocol, "remote_ip_prefix": cidr}
        r = await api.post(f"/core/virtual-machines/{ref.instance_id}/sg-rules", json=rule)
        assert r.status_code == 200, r.text
    rules = ingress(sim, ref)
    assert sorted(rules) == [(1, 65535, "10.0.0.0/8"), (22, 22, "0.0.0.0/0")]  # TCP ingress only
    assert admits(rules, K8S_API_PORT, "10.1.2.3") and not admits(rules, K8S_API_PORT, "203.0.113.9")
    await hs.terminate(ref)

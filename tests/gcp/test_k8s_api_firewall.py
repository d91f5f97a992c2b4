"""The Kubernetes API port (6443) on GCP: at create, a firewall rule of its own (`<name>-k8s-api`,
tcp/6443 from `LaunchSpec.k8s_api_from` only: a rule's sourceRanges apply to all its ports), beside
the machine's rule (22 and the requested ports from anywhere), as the simulated Compute Engine then
enforces them (`FACADE.ingress`: the rules whose target tags match the instance's); a retried
create adds nothing twice; terminate and release remove both rules, list_owned reports both."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from google.cloud import compute_v1

from fakeclouds import gcp_state
from fakeclouds.facade import IngressRule
from fakeclouds.gcp_api import FACADE
from fakeclouds.gcp_auth import PROJECT
from fakeclouds.server import FakeCloudServer
from providers.base import K8S_API_PORT, InstanceRef
from providers.gcp import GcpProvider
from providers.gcp_names import NAME_MAX, instance_name, k8s_rule_name
from tests.gcp.test_adapter import spec, t4_offer, wait_state


def ingress(sim: FakeCloudServer, ref: InstanceRef) -> list[IngressRule]:
    assert FACADE.ingress is not None
    return FACADE.ingress(sim.engine, sim.engine.machines[ref.instance_id])


def admits(rules: list[IngressRule], port: int, peer: str) -> bool:
    ip = ipaddress.ip_address(peer)
    return any(lo <= port <= hi and ip in ipaddress.ip_network(cidr) for lo, hi, cidr in rules)


def firewalls(sdk: Callable[[str], Any]) -> dict[str, Any]:
    listed = sdk("FirewallsClient").list(request=compute_v1.ListFirewallsRequest(project=PROJECT))
    return {f.name: f for f in listed}


async def test_6443_only_from_the_given_networks_in_a_rule_of_its_own(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider], sdk: Callable[[str], Any]
) -> None:
    p = provider()
    async with p:
        s = spec("gcp-k8s-1", ports=[8080], k8s_api_from=["127.0.0.1/32"])
        ref = await p.create(await t4_offer(p), s)
        rules = ingress(sim_clean, ref)
        assert admits(rules, K8S_API_PORT, "127.0.0.1")
        assert not admits(rules, K8S_API_PORT, "127.0.0.2") and not admits(rules, K8S_API_PORT, "203.0.113.9")
        assert admits(rules, 22, "203.0.113.9") and admits(rules, 8080, "203.0.113.9")
        name = instance_name("gcptest1", s.key)
        found = firewalls(sdk)
        assert set(found) == {name, f"{name}-k8s-api"}
        api = found[f"{name}-k8s-api"]
        assert list(api.source_ranges) == ["127.0.0.1/32"] and list(api.target_tags) == [name]
        assert [(a.I_p_protocol, list(a.ports)) for a in api.allowed] == [("tcp", ["6443"])]
        assert list(found[name].allowed[0].ports) == ["22", "8080"]
        # A live machine's rules are no leftovers.
        assert [r.kind for r in await p.list_owned()] == ["machine"]
        await p.terminate(ref)
        assert await wait_state(p, ref, lambda st: st is None) is None
        assert firewalls(sdk) == {} and await p.list_owned() == []


async def test_without_k8s_api_from_no_rule_admits_6443_and_none_is_made_for_it(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider], sdk: Callable[[str], Any]
) -> None:
    p = provider()
    async with p:
        s = spec("gcp-k8s-2", ports=[8080])
        ref = await p.create(await t4_offer(p), s)
        rules = ingress(sim_clean, ref)
        assert not any(lo <= K8S_API_PORT <= hi for lo, hi, _ in rules)
        assert admits(rules, 22, "198.51.100.1") and admits(rules, 8080, "198.51.100.1")
        assert set(firewalls(sdk)) == {instance_name("gcptest1", s.key)}
        await p.terminate(ref)
        assert await wait_state(p, ref, lambda st: st is None) is None
        assert firewalls(sdk) == {}


async def test_a_retried_create_adds_nothing_twice_and_release_removes_both_rules(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider], sdk: Callable[[str], Any]
) -> None:
    p = provider()
    async with p:
        s = spec("gcp-k8s-3", ports=[8080], k8s_api_from=["127.0.0.1/32", "203.0.113.0/24"])
        offer = await t4_offer(p)
        ref = await p.create(offer, s)
        first, rules = firewalls(sdk), sorted(ingress(sim_clean, ref))
        assert await p.create(offer, s) == ref
        again = firewalls(sdk)
        assert {n: f.id for n, f in again.items()} == {n: f.id for n, f in first.items()}  # the same two
        assert sorted(ingress(sim_clean, ref)) == rules
        assert admits(rules, K8S_API_PORT, "203.0.113.77") and not admits(rules, K8S_API_PORT, "198.51.100.1")
        # The instance goes behind gpuprov's back: both rules are leftovers for the sweep, gone with release.
        name = instance_name("gcptest1", s.key)
        sdk("InstancesClient").delete(project=PROJECT, zone=offer.zone, instance=name)
        await wait_state(p, ref, lambda st: st is None)
        leftovers = await p.list_owned()
        assert sorted((r.kind, r.instance_id, r.key) for r in leftovers) == [
            ("firewall-rule", name, s.key),
            ("firewall-rule", f"{name}-k8s-api", s.key),
        ]
        await p.release(s.key)
        assert firewalls(sdk) == {} and await p.list_owned() == []


def test_the_api_rule_name_stays_a_compute_engine_name() -> None:
    short = instance_name("gcptest1", "gcp-k8s-4")
    assert k8s_rule_name(short) == f"{short}-k8s-api"
    long = instance_name("gcptest1", "k" * 60)
    assert len(long) == NAME_MAX
    rule = k8s_rule_name(long)
    assert len(rule) <= NAME_MAX and rule.endswith("-k8s-api") and rule != k8s_rule_name(long[:-1] + "x")


def test_ingress_follows_target_tags_priority_and_deny_rules() -> None:
    def fw(**kw: Any) -> dict[str, Any]:
        return {"direction": "INGRESS", "priority": 1000, "targetTags": [], "sourceRanges": [], **kw}

    rules = [
        fw(targetTags=["a"], allowed=[{"IPProtocol": "tcp", "ports": ["22", "6000-6500"]}],
           sourceRanges=["10.0.0.0/8"]),
        fw(targetTags=["other"], allowed=[{"IPProtocol": "tcp", "ports": ["9000"]}]),
        fw(allowed=[{"IPProtocol": "udp", "ports": ["53"]}, {"IPProtocol": "all"}],
           sourceRanges=["192.0.2.0/24"]),
        fw(targetTags=["a"], denied=[{"IPProtocol": "tcp", "ports": ["6443"]}], sourceRanges=["10.1.0.0/16"],
           priority=900),
        fw(targetTags=["a"], allowed=[{"IPProtocol": "tcp", "ports": ["8080"]}], disabled=True),
        fw(targetTags=["a"], allowed=[{"IPProtocol": "tcp"}], direction="EGRESS"),
        fw(targetTags=["a"], allowed=[{"IPProtocol": "tcp", "ports": ["7000"]}]),  # no source: anywhere
    ]
    got = gcp_state.ingress(rules, ["a"])
    assert admits(got, 22, "10.1.2.3") and admits(got, 6443, "10.2.0.1")
    assert not admits(got, 6443, "10.1.2.3")  # denied at a higher priority
    assert admits(got, 6442, "10.1.2.3") and admits(got, 6444, "10.1.2.3")
    assert admits(got, 6443, "192.0.2.9")  # "all" protocols
    assert not admits(got, 9000, "10.0.0.1") and not admits(got, 8080, "10.0.0.1")
    assert admits(got, 7000, "203.0.113.1")
    assert gcp_state.ingress(rules, ["b"]) == [(1, 65535, "192.0.2.0/24")]

"""The Kubernetes API port (6443) on AWS: opened at create only from `LaunchSpec.k8s_api_from`, in the
machine's own security group, as the simulated EC2 then enforces it (`FACADE.ingress`: what the
groups on the instance let in); a retried create adds nothing twice; terminate leaves nothing."""

from __future__ import annotations

import ipaddress
from typing import Any

from fakeclouds import aws_api
from fakeclouds.facade import IngressRule
from fakeclouds.server import FakeCloudServer
from providers.aws import AwsProvider
from providers.base import K8S_API_PORT, InstanceRef
from tests.aws.conftest import offer, spec
from tests.aws.test_adapter import ours
from tests.conformance.checks import WAIT_GONE, wait_for


def ingress(sim: FakeCloudServer, ref: InstanceRef) -> list[IngressRule]:
    assert aws_api.FACADE.ingress is not None
    return aws_api.FACADE.ingress(sim.engine, sim.engine.machines[ref.instance_id])


def admits(rules: list[IngressRule], port: int, peer: str) -> bool:
    return any(lo <= port <= hi and ipaddress.ip_address(peer) in ipaddress.ip_network(cidr)
               for lo, hi, cidr in rules)


def k8s_ranges(group: dict[str, Any]) -> list[str]:
    return [r["CidrIp"] for p in group["IpPermissions"] if p.get("FromPort") == K8S_API_PORT
            for r in p.get("IpRanges") or []]


async def test_6443_only_from_the_given_networks_ssh_and_ports_from_anywhere(
        sim: FakeCloudServer, aws: AwsProvider, ec2: Any) -> None:
    s = spec(aws, ports=[8080], k8s_api_from=["127.0.0.1/32"])
    ref = await aws.create(await offer(aws), s)
    rules = ingress(sim, ref)
    assert admits(rules, K8S_API_PORT, "127.0.0.1")
    assert not admits(rules, K8S_API_PORT, "127.0.0.2") and not admits(rules, K8S_API_PORT, "203.0.113.9")
    assert (K8S_API_PORT, K8S_API_PORT, "0.0.0.0/0") not in rules
    assert {(22, 22, "0.0.0.0/0"), (8080, 8080, "0.0.0.0/0")} <= set(rules)
    [group] = ours(ec2, aws.installation_id)[1]
    assert k8s_ranges(group) == ["127.0.0.1/32"]
    await aws.terminate(ref)
    await wait_for(aws, ref, lambda st: st is None or st.state == "terminated", WAIT_GONE)
    assert ours(ec2, aws.installation_id) == ([], []) and await aws.list_owned() == []


async def test_without_k8s_api_from_nothing_admits_6443(sim: FakeCloudServer, aws: AwsProvider,
                                                         ec2: Any) -> None:
    ref = await aws.create(await offer(aws), spec(aws, ports=[8080]))
    rules = ingress(sim, ref)
    assert not any(lo <= K8S_API_PORT <= hi for lo, hi, _ in rules)
    assert {(22, 22, "0.0.0.0/0"), (8080, 8080, "0.0.0.0/0")} <= set(rules)
    [group] = ours(ec2, aws.installation_id)[1]
    assert k8s_ranges(group) == []
    await aws.terminate(ref)


async def test_a_retried_create_adds_no_rule_twice_and_restores_a_missing_one(
        sim: FakeCloudServer, aws: AwsProvider, ec2: Any) -> None:
    s = spec(aws, ports=[8080], k8s_api_from=["127.0.0.1/32", "203.0.113.0/24"])
    where = await offer(aws)
    ref = await aws.create(where, s)
    first = sorted(ingress(sim, ref))
    assert await aws.create(where, s) == ref
    assert sorted(ingress(sim, ref)) == first  # nothing added twice
    [group] = ours(ec2, aws.installation_id)[1]
    assert sorted(k8s_ranges(group)) == ["127.0.0.1/32", "203.0.113.0/24"]
    # One source of the API rule gone behind gpuprov's back: the retry adds only that one again.
    ec2.revoke_security_group_ingress(GroupId=group["GroupId"], IpPermissions=[
        {"IpProtocol": "tcp", "FromPort": K8S_API_PORT, "ToPort": K8S_API_PORT,
         "IpRanges": [{"CidrIp": "203.0.113.0/24"}]}])
    assert not admits(ingress(sim, ref), K8S_API_PORT, "203.0.113.7")
    assert await aws.create(where, s) == ref
    assert sorted(ingress(sim, ref)) == first
    [group] = ours(ec2, aws.installation_id)[1]
    assert sorted(k8s_ranges(group)) == ["127.0.0.1/32", "203.0.113.0/24"]
    assert [r.kind for r in await aws.list_owned()] == ["machine"]
    await aws.terminate(ref)
    await wait_for(aws, ref, lambda st: st is None or st.state == "terminated", WAIT_GONE)
    assert ours(ec2, aws.installation_id) == ([], [])
    await aws.release(s.key)  # nothing left: a no-op
    assert await aws.list_owned() == []


async def test_ingress_reads_all_traffic_and_ignores_group_sources(sim: FakeCloudServer, aws: AwsProvider,
                                                                    ec2: Any) -> None:
    ref = await aws.create(await offer(aws), spec(aws))
    [group] = ours(ec2, aws.installation_id)[1]
    ec2.authorize_security_group_ingress(GroupId=group["GroupId"], IpPermissions=[
        {"IpProtocol": "-1", "IpRanges": [{"CidrIp": "198.51.100.0/24"}]},
        {"IpProtocol": "tcp", "FromPort": 7000, "ToPort": 7100,
         "UserIdGroupPairs": [{"GroupId": group["GroupId"]}]}])
    rules = ingress(sim, ref)
    assert (1, 65535, "198.51.100.0/24") in rules and admits(rules, K8S_API_PORT, "198.51.100.4")
    assert not any(lo == 7000 for lo, _, _ in rules)
    await aws.terminate(ref)

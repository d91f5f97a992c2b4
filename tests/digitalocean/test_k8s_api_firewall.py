"""The Kubernetes API port on DigitalOcean: the create's cloud firewall opens 6443 only to the networks in
`k8s_api_from`, beside SSH and `ports` from anywhere, and the simulation's `ingress` (what the firewalls
covering the droplet let in) says so; without `k8s_api_from` no rule admits 6443. Retries add nothing
twice; terminate and release still remove the firewall and tag."""

from __future__ import annotations

import ipaddress

import pytest

from fakeclouds import digitalocean_api
from fakeclouds.facade import IngressRule
from fakeclouds.server import FakeCloudServer
from providers.base import K8S_API_PORT, InstanceRef, Offer, OfferQuery, Transient
from providers.digitalocean import DigitalOceanProvider
from tests.digitalocean.conftest import USER_KEY, client, public, spec


def admits(rules: list[IngressRule], port: int, source: str) -> bool:
    """Whether some rule lets `source` (an address) in on TCP `port`."""
    ip = ipaddress.ip_address(source)
    return any(first <= port <= last and ip.version == ipaddress.ip_network(cidr).version
               and ip in ipaddress.ip_network(cidr) for first, last, cidr in rules)


def ingress(sim: FakeCloudServer, ref: InstanceRef) -> list[IngressRule]:
    assert digitalocean_api.FACADE.ingress is not None
    return digitalocean_api.FACADE.ingress(sim.engine, sim.engine.machines[ref.instance_id])


async def _offer(p: DigitalOceanProvider) -> Offer:
    offers = await p.offers(OfferQuery(region="tor1"))
    [offer] = [o for o in offers if o.instance_type == "gpu-4000adax1-20gb"]
    return offer


async def _firewalls(sim: FakeCloudServer, name: str) -> list[dict[str, object]]:
    async with client(sim) as api:
        return [f for f in (await api.get("/firewalls", params={"per_page": 200})).json()["firewalls"]
                if f["name"] == name]


def _side(sim: FakeCloudServer, key: str) -> list[tuple[str, str]]:
    return sorted((r["kind"], r["name"]) for r in sim.admin.side_resources() if key in r["name"])


async def test_6443_is_open_to_the_given_networks_only(sim: FakeCloudServer,
                                                       do: DigitalOceanProvider) -> None:
    s = spec(do, ports=[8080], k8s_api_from=["127.0.0.1/32"])
    ref = await do.create(await _offer(do), s)
    rules = ingress(sim, ref)
    assert admits(rules, K8S_API_PORT, "127.0.0.1")
    assert not admits(rules, K8S_API_PORT, "127.0.0.2") and not admits(rules, K8S_API_PORT, "203.0.113.9")
    assert (K8S_API_PORT, K8S_API_PORT, "0.0.0.0/0") not in rules
    for port in (22, 8080):
        assert admits(rules, port, "203.0.113.9") and (port, port, "0.0.0.0/0") in rules
    assert not admits(rules, 9090, "127.0.0.1")  # nothing else
    [fw] = await _firewalls(sim, f"gpuprov-{do.installation_id}-{s.key}")
    inbound = fw["inbound_rules"]
    assert isinstance(inbound, list)
    assert [(r["ports"], r["sources"]["addresses"]) for r in inbound] == [
        ("22", ["0.0.0.0/0", "::/0"]), ("8080", ["0.0.0.0/0", "::/0"]), (str(K8S_API_PORT), ["127.0.0.1/32"])]
    await do.terminate(ref)
    assert _side(sim, s.key) == []


async def test_without_k8s_api_from_6443_stays_closed(sim: FakeCloudServer, do: DigitalOceanProvider) -> None:
    s = spec(do, ports=[8080])
    ref = await do.create(await _offer(do), s)
    rules = ingress(sim, ref)
    assert not any(first <= K8S_API_PORT <= last for first, last, _ in rules)
    assert admits(rules, 22, "203.0.113.9") and admits(rules, 8080, "203.0.113.9")
    await do.terminate(ref)
    assert _side(sim, s.key) == []


async def test_a_droplet_without_a_firewall_is_open(sim: FakeCloudServer) -> None:
    """DigitalOcean filters nothing a cloud firewall does not cover."""
    async with client(sim) as api:
        r = await api.post("/account/keys", json={"name": "k", "public_key": public(USER_KEY)})
        fp = r.json()["ssh_key"]["fingerprint"]
        r = await api.post("/droplets", json={"name": "bare", "region": "tor1", "size": "gpu-4000adax1-20gb",
                                              "image": "gpu-h100x1-base", "ssh_keys": [fp]})
        droplet = r.json()["droplet"]
        rules = digitalocean_api.ingress(sim.engine, sim.engine.machines[str(droplet["id"])])
        assert admits(rules, K8S_API_PORT, "203.0.113.9")
        await api.delete(f"/droplets/{droplet['id']}")


async def test_retries_add_no_rule_twice_and_terminate_removes_all(sim: FakeCloudServer,
                                                                   do: DigitalOceanProvider) -> None:
    s = spec(do, ports=[8080], k8s_api_from=["127.0.0.1/32", "203.0.113.0/24"])
    name = f"gpuprov-{do.installation_id}-{s.key}"
    sim.admin.add_fault("digitalocean", "create", "server_error", status=500)
    with pytest.raises(Transient):
        await do.create(await _offer(do), s)  # the firewall and tag were made, the droplet not
    [fw] = await _firewalls(sim, name)
    ref = await do.create(await _offer(do), s)
    again = await do.create(await _offer(do), s)  # the droplet exists: found by its name
    assert again.instance_id == ref.instance_id
    assert await _firewalls(sim, name) == [fw]  # the same firewall, its rules unchanged
    rules = ingress(sim, ref)
    assert len(rules) == len(set(rules))
    assert sorted(r for r in rules if r[0] == K8S_API_PORT) == [
        (K8S_API_PORT, K8S_API_PORT, "127.0.0.1/32"), (K8S_API_PORT, K8S_API_PORT, "203.0.113.0/24")]
    assert admits(rules, K8S_API_PORT, "203.0.113.77") and not admits(rules, K8S_API_PORT, "198.51.100.1")
    assert [r.instance_id for r in await do.list_owned()] == [ref.instance_id]
    await do.terminate(ref)
    assert _side(sim, s.key) == [] and await do.list_owned() == []


async def test_release_removes_a_firewall_left_by_a_refused_create(sim: FakeCloudServer,
                                                                   do: DigitalOceanProvider) -> None:
    s = spec(do, k8s_api_from=["127.0.0.1/32"])
    sim.admin.add_fault("digitalocean", "create", "server_error", status=503)
    with pytest.raises(Transient):
        await do.create(await _offer(do), s)
    assert sorted(r.kind for r in await do.list_owned() if r.key == s.key) == ["firewall", "tag"]
    await do.release(s.key)
    assert _side(sim, s.key) == [] and await do.list_owned() == []


async def test_a_firewall_on_a_tag_filters_once_the_droplet_carries_it(sim: FakeCloudServer) -> None:
    """`ingress` follows the droplet's tags and ids: a firewall made on an id applies too."""
    async with client(sim) as api:
        r = await api.post("/account/keys", json={"name": "k", "public_key": public(USER_KEY)})
        fp = r.json()["ssh_key"]["fingerprint"]
        r = await api.post("/droplets", json={"name": "by-id", "region": "tor1", "size": "gpu-4000adax1-20gb",
                                              "image": "gpu-h100x1-base", "ssh_keys": [fp]})
        did = r.json()["droplet"]["id"]
        r = await api.post("/firewalls", json={
            "name": "by-id", "droplet_ids": [did],
            "inbound_rules": [
                {"protocol": "tcp", "ports": "6000-7000", "sources": {"addresses": ["10.1.2.3"]}},
                {"protocol": "udp", "ports": "0", "sources": {"addresses": ["0.0.0.0/0"]}}]})
        assert r.status_code == 202, r.text
        rules = digitalocean_api.ingress(sim.engine, sim.engine.machines[str(did)])
        assert rules == [(6000, 7000, "10.1.2.3/32")]  # tcp only; a bare address is one host
        await api.delete(f"/firewalls/{r.json()['firewall']['id']}")
        await api.delete(f"/droplets/{did}")

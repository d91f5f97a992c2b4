"""DigitalOcean's official OpenAPI (tests/specs/digitalocean: the operations the adapter calls, bundled
from the multi-file spec) as the oracle: every request the adapter sends and every answer the
simulation gives, through a lifecycle (tag, firewall, key, droplet) and every mapped refusal, is what
the spec documents; and the oracle is shown to catch a request or an answer that departs from it."""

from __future__ import annotations

import json

import httpx

from fakeclouds.server import FakeCloudServer
from providers.base import CloudProvider, ConnectionOptions, Offer, OfferQuery
from providers.digitalocean import DigitalOceanProvider
from tests import simclouds
from tests.digitalocean.conftest import adapter, spec
from tests.specs import drive
from tests.specs.oracle import Exchange, SpecOracle

ORACLE = SpecOracle("digitalocean", prefix="/v2")  # the adapter's endpoint ends in /v2
# The spec's region_slug enum (used for an image's regions) predates Atlanta: the same spec lists atl1
# as a region in resources/databases/responses/options.yml, and GPU droplets run there. The
# simulation's catalog is right; the enum is stale.
ORACLE.amend_enum("/x-files/shared.attributes.region_slug.yml", ["atl1"],
                  "atl1 is a region in the same spec's databases options; GPU droplets run there")


def cloud_of(sim: FakeCloudServer) -> drive.Cloud:
    def make(token: str | None) -> CloudProvider:
        if token is None:
            return adapter(sim)
        creds = DigitalOceanProvider.parse_credentials(simclouds.credentials(sim, "digitalocean", token))
        endpoint = simclouds.endpoint(sim, "digitalocean")
        return DigitalOceanProvider(creds, installation_id="badtoken",
                                    options=ConnectionOptions(endpoint=endpoint))

    async def an_offer(p: CloudProvider) -> Offer:
        return (await p.offers(OfferQuery()))[0]

    return drive.Cloud("digitalocean", sim, make, an_offer, spec)


async def test_lifecycle_conforms(sim: FakeCloudServer) -> None:
    rec = await drive.lifecycle(cloud_of(sim))
    assert {"POST /droplets", "POST /firewalls", "POST /tags", "GET /droplets/{droplet_id}",
            "DELETE /firewalls/{firewall_id}"} <= ORACLE.templates(rec)
    assert ORACLE.check(rec) == []


async def test_refusals_conform(sim: FakeCloudServer) -> None:
    rec = await drive.refusals(cloud_of(sim))
    assert {e.status for e in rec.seen} >= {401, 422, 429, 500, 503}
    assert ORACLE.check(rec) == []


async def test_an_icmp_rule_without_ports_is_caught(sim: FakeCloudServer) -> None:
    firewall = (await drive.one_create(cloud_of(sim))).find("POST", "/firewalls", 202)
    assert ORACLE.problems(firewall) == []
    body = firewall.json()
    [icmp] = [r for r in body["outbound_rules"] if r["protocol"] == "icmp"]
    del icmp["ports"]  # what the adapter sent before: firewall_rule_base requires ports on every rule
    firewall.body = json.dumps(body).encode()
    assert any("'ports' is a required property" in p for p in ORACLE.request_problems(firewall))


async def test_the_simulation_refuses_an_icmp_rule_without_ports(sim: FakeCloudServer) -> None:
    """What the spec refuses the simulation refuses, the way firewalls_create documents (400 bad_request)."""
    rule = {"protocol": "icmp", "destinations": {"addresses": ["0.0.0.0/0"]}}
    async with httpx.AsyncClient(base_url=simclouds.endpoint(sim, "digitalocean"),
                                 headers={"Authorization": f"Bearer {sim.tokens['digitalocean']}"}) as api:
        r = await api.post("/firewalls", json={"name": "fw-FAKE", "outbound_rules": [rule]})
        assert ORACLE.answer_problems(Exchange.of(r, base=api.base_url.path)) == []
    assert r.status_code == 400 and r.json()["id"] == "bad_request", r.text


async def test_an_error_body_of_the_wrong_shape_is_caught(sim: FakeCloudServer) -> None:
    refused = (await drive.one_create(cloud_of(sim), "capacity")).find("POST", "/droplets", 422)
    assert ORACLE.problems(refused) == []
    refused.answer = json.dumps({"detail": [{"loc": ["body"], "msg": "no capacity"}]}).encode()
    assert any("'id' is a required property" in p for p in ORACLE.answer_problems(refused))


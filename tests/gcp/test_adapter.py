"""The GCP adapter against the simulated Compute Engine: idempotent create and its edges, capacity
scoped to a zone, the firewall rule as a side resource (checked through the official SDK), spot,
user data at boot, and auth failures in the cloud's words."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncssh
import pytest
from google.cloud import compute_v1

from fakeclouds.gcp_auth import PROJECT
from fakeclouds.server import FakeCloudServer
from providers.base import (
    AuthError,
    CapacityError,
    InstanceRef,
    InstanceState,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    Ownership,
    Transient,
)
from providers.gcp import GcpProvider, instance_name
from tests.conformance import checks
from tests.conformance.conftest import make_harness
from tests.eventually import eventually, text_of
from tests.gcp.test_simulation import insert, instance, wait

KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
REGION = "us-central1"


def spec(key: str, installation: str = "gcptest1", **extra: Any) -> LaunchSpec:
    return LaunchSpec(
        key=key,
        owner=Ownership(installation_id=installation, allocation_id=key),
        ssh_public_keys=[KEY],
        **extra,
    )


async def t4_offer(p: GcpProvider, zone: str = "us-central1-a", spot: bool = False) -> Offer:
    offers = await p.offers(OfferQuery(gpu="t4", gpu_count=1, region=REGION, spot=spot))
    return next(o for o in offers if o.zone == zone and o.instance_type.startswith("n1-standard-4+"))


def machines_named(sim: FakeCloudServer, name: str) -> list[dict[str, Any]]:
    return [m for m in sim.admin.machines() if m["name"] == name]


async def wait_state(p: GcpProvider, ref: InstanceRef, done: Callable[[Any], bool]) -> Any:
    return await eventually(lambda: p.get(ref), until=done, within=20, what=f"{ref.instance_id}'s state")


async def test_offers_are_per_zone_with_gpu_shapes_and_spot_below_on_demand(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider]
) -> None:
    async with provider() as p:
        offers = await p.offers(OfferQuery(region=REGION))
        assert {o.zone for o in offers} == {
            "us-central1-a",
            "us-central1-b",
            "us-central1-c",
            "us-central1-f",
        }
        shapes = {o.instance_type for o in offers}
        # A2/G2 come with their GPUs; N1 hosts get attached ones (one shape per GPU count)
        assert {
            "a2-highgpu-1g",
            "g2-standard-4",
            "n1-standard-4+nvidia-tesla-t4:1",
            "n1-standard-16+nvidia-tesla-t4:4",
        } <= shapes
        l4 = next(o for o in offers if o.instance_type == "g2-standard-4" and not o.spot)
        assert l4.gpu is not None and (l4.gpu.name, l4.gpu.count, l4.gpu.memory_gib, l4.vcpus) == (
            "L4",
            1,
            24,
            4,
        )
        on_demand = {(o.zone, o.instance_type): o.price_per_hour for o in offers if not o.spot}
        for o in offers:
            if o.spot:
                assert o.price_per_hour < on_demand[(o.zone, o.instance_type)]
        assert [o.price_per_hour for o in offers] == sorted(o.price_per_hour for o in offers)


async def test_a_lost_create_answer_retried_makes_one_machine(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider]
) -> None:
    async with provider() as p:
        offer = await t4_offer(p)
        s = spec("gcp-lost-1")
        sim_clean.admin.add_fault("gcp", "create", "lose_response")
        with pytest.raises(Transient) as lost:
            await p.create(offer, s)
        assert lost.value.in_doubt
        ref = await p.create(offer, s)  # same requestId: the first insert's operation answers
        again = await p.create(offer, s)
        assert ref.instance_id == again.instance_id
        made = machines_named(sim_clean, instance_name("gcptest1", s.key))
        assert [m["id"] for m in made] == [ref.instance_id]
        await p.terminate(ref)


async def test_a_name_taken_by_something_else_is_refused(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider], sdk: Callable[[str], Any]
) -> None:
    async with provider() as p:
        offer = await t4_offer(p)
        mine = await p.create(offer, spec("gcp-edge-1"))
        # Same key, another shape in the same zone: the name is taken by a machine of another type.
        bigger = next(
            o
            for o in await p.offers(OfferQuery(gpu="t4", gpu_count=2, region=REGION))
            if o.zone == offer.zone
        )
        with pytest.raises(InvalidRequest, match="exists in us-central1-a as n1-standard-4"):
            await p.create(bigger, spec("gcp-edge-1"))
        # Someone made an instance under the name our next key maps to, without our labels: the
        # insert answers 409 alreadyExists, and the adapter refuses to take it for ours.
        taken = instance_name("gcptest1", "gcp-edge-2")
        wait(sdk, insert(sdk, instance(taken)))
        with pytest.raises(InvalidRequest, match="not ours"):
            await p.create(offer, spec("gcp-edge-2"))
        assert len(machines_named(sim_clean, instance_name("gcptest1", "gcp-edge-1"))) == 1
        assert len(machines_named(sim_clean, taken)) == 1
        await p.terminate(mine)
        await p.release("gcp-edge-2")


async def test_capacity_names_the_zone_and_the_request_id_keeps_answering_it(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider]
) -> None:
    async with provider() as p:
        offer = await t4_offer(p)
        sim_clean.admin.set_stock(offer.instance_type, "us-central1-a", 0)
        with pytest.raises(CapacityError) as exc:
            await p.create(offer, spec("gcp-full-1"))
        scope = exc.value.scope
        assert (scope.region, scope.zone, scope.instance_type) == (
            REGION,
            "us-central1-a",
            offer.instance_type,
        )
        assert "ZONE_RESOURCE_POOL_EXHAUSTED" in exc.value.message
        next_zone = await t4_offer(p, zone="us-central1-b")
        assert scope.covers(offer) and not scope.covers(next_zone)  # failover tries the next zone
        # As on Compute Engine, the requestId answers its failed operation again, even with stock back;
        # gpuprov moves to the next offer under a new key, so this never blocks an allocation.
        sim_clean.admin.set_stock(offer.instance_type, "us-central1-a", 3)
        with pytest.raises(CapacityError):
            await p.create(offer, spec("gcp-full-1"))
        ref = await p.create(next_zone, spec("gcp-full-2"))
        await p.terminate(ref)
        # A refused create made nothing that stays: its firewall rule went with the refusal.
        assert [r for r in await p.list_owned() if r.key == "gcp-full-1"] == []
        assert await p.list_owned() == []


async def test_the_firewall_rule_goes_after_the_machine_as_the_sdk_shows(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider], sdk: Callable[[str], Any]
) -> None:
    async with provider() as p:
        s = spec("gcp-side-1", ports=[8080, 9000])
        ref = await p.create(await t4_offer(p), s)
        name = instance_name("gcptest1", s.key)
        rule = sdk("FirewallsClient").get(project=PROJECT, firewall=name)
        assert list(rule.target_tags) == [name] and list(rule.allowed[0].ports) == ["22", "8080", "9000"]
        inst = sdk("InstancesClient").get(project=PROJECT, zone="us-central1-a", instance=name)
        assert list(inst.tags.items) == [name] and inst.labels["gpuprov-key"] == s.key
        await p.terminate(ref)
        assert await wait_state(p, ref, lambda st: st is None) is None
        request = compute_v1.AggregatedListInstancesRequest(
            project=PROJECT, filter='labels.gpuprov-key = "gcp-side-1"'
        )
        assert [
            i
            for _, scoped in sdk("InstancesClient").aggregated_list(request=request)
            for i in scoped.instances
        ] == []
        firewalls = sdk("FirewallsClient").list(request=compute_v1.ListFirewallsRequest(project=PROJECT))
        assert [f.name for f in firewalls if f.name == name] == []
        assert await p.list_owned() == []


async def test_spot_launches_as_spot_and_user_data_runs_at_boot(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider], sdk: Callable[[str], Any]
) -> None:
    async with provider() as p:
        offer = await t4_offer(p, spot=True)
        s = spec("gcp-spot-1", user_data='#!/bin/sh\necho booted-by-cloud-init > "$HOME/boot-mark"\n')
        ref = await p.create(offer, s)
        inst = sdk("InstancesClient").get(
            project=PROJECT, zone="us-central1-a", instance=instance_name("gcptest1", s.key)
        )
        assert (
            inst.scheduling.provisioning_model == "SPOT"
            and inst.scheduling.instance_termination_action == "DELETE"
        )
        running = await wait_state(p, ref, lambda st: st is not None and st.state == InstanceState.RUNNING)
        assert running.host.startswith("127.") and running.ssh_port == 22 and running.ssh_user == "ubuntu"
        [machine] = [m for m in sim_clean.admin.machines() if m["id"] == ref.instance_id]
        assert machine["spot"] is True
        mark = Path(machine["home"]) / "boot-mark"
        await eventually(lambda: text_of(mark), until=lambda text: text.strip() == "booted-by-cloud-init",
                         within=20, what="the user-data's boot mark")
        await p.terminate(ref)


async def test_a_machine_compute_engine_stopped_reads_as_broken(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider]
) -> None:
    async with provider() as p:
        ref = await p.create(await t4_offer(p), spec("gcp-dead-1"))
        await wait_state(p, ref, lambda st: st is not None and st.state == InstanceState.RUNNING)
        sim_clean.admin.kill(ref.instance_id)
        st = await p.get(ref)
        assert st is not None and st.state == InstanceState.ERROR and st.detail.startswith("TERMINATED")
        await p.terminate(ref)
        assert await wait_state(p, ref, lambda s: s is None) is None


async def test_bad_credentials_fail_verify_in_the_clouds_words(
    sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider]
) -> None:
    async with provider(project_id="someone-elses-1") as p:
        with pytest.raises(AuthError, match="Required 'compute.projects.get' permission"):
            await p.verify()
    async with provider() as p:
        assert PROJECT in await p.verify()


class RandomNameFakeGcpProvider(GcpProvider):
    """Broken on purpose: neither the name nor the requestId follows from the key."""

    def _name(self, key: str) -> str:
        return instance_name(self.installation_id, f"{key}-{uuid.uuid4().hex[:6]}")

    def _request_id(self, key: str, zone: str, after: str = "") -> str:
        return str(uuid.uuid4())


class NoRequestIdFakeGcpProvider(GcpProvider):
    """Broken on purpose: a fresh requestId every try; only the name is left to guard."""

    def _request_id(self, key: str, zone: str, after: str = "") -> str:
        return str(uuid.uuid4())


async def test_the_conformance_check_catches_an_adapter_without_its_keys(sim_clean: FakeCloudServer) -> None:
    broken = make_harness("gcp", sim_clean, provider_cls=RandomNameFakeGcpProvider)
    with pytest.raises(AssertionError, match="same key twice made 2 machines"):
        await checks.check_create_idempotent(broken)
    sim_clean.admin.reset()
    # The name alone still guards a lost answer: the retry's insert is 409 and the machine is adopted.
    await checks.check_create_idempotent(
        make_harness("gcp", sim_clean, provider_cls=NoRequestIdFakeGcpProvider)
    )

"""The Azure adapter's own behaviours against the simulation, checked through Azure's SDK."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakeclouds.server import FakeCloudServer
from providers import registry
from providers.azure import AzureProvider
from providers.azure_catalog import offers_of
from providers.azure_vm import vm_name
from providers.base import (
    AuthError,
    CapacityError,
    ConnectionOptions,
    InstanceState,
    InvalidRequest,
    OfferQuery,
    QuotaError,
    RateLimited,
    Transient,
)
from tests import simclouds
from tests.azure.conftest import CLOUD, Sdk, cheapest, names, ours, spec
from tests.eventually import eventually, text_of


def machines_named(sim: FakeCloudServer, group: str, name: str) -> list[dict[str, object]]:
    return [m for m in sim.admin.machines() if m["name"] == f"{group}/{name}"]


async def running(p: AzureProvider, ref: object, within: float = 20) -> None:
    await eventually(lambda: p.get(ref),  # type: ignore[arg-type]
                     until=lambda st: st and st.state == InstanceState.RUNNING, within=within,
                     what=f"{ref} running")


async def test_a_lost_create_answer_retried_makes_one_machine(
    provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk
) -> None:
    offer = await cheapest(provider)
    s = spec(provider.installation_id)
    sim.admin.add_fault(CLOUD, "create", "lose_response")
    with pytest.raises(Transient) as lost:
        await provider.create(offer, s)
    assert lost.value.in_doubt
    ref = await provider.create(offer, s)
    again = await provider.create(offer, s)
    group, name = names(provider.installation_id, s.key, offer.region)
    made = machines_named(sim, group, name)
    assert len(made) == 1 and ref.instance_id == again.instance_id == made[0]["id"]
    assert [v.name for v in sdk.compute.virtual_machines.list(group)] == [name]


async def test_allocation_failed_deletes_the_failed_vm_and_blocks_only_that_zone(
    provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk
) -> None:
    offers = [
        o
        for o in await provider.offers(OfferQuery(spot=False, region="eastus"))
        if o.instance_type == "Standard_NC4as_T4_v3"
    ]
    zone1, zone2 = offers[0], offers[1]
    assert (zone1.zone, zone2.zone) == ("1", "2")
    sim.admin.set_stock(zone1.instance_type, "eastus-1", 0)
    s = spec(provider.installation_id)
    with pytest.raises(CapacityError) as cap:
        await provider.create(zone1, s)
    assert "ZonalAllocationFailed" in cap.value.message
    scope = cap.value.scope
    assert (scope.region, scope.zone, scope.instance_type) == ("eastus", "1", zone1.instance_type)
    assert scope.covers(zone1) and not scope.covers(zone2)
    group, name = names(provider.installation_id, s.key, "eastus")
    assert [v.name for v in sdk.compute.virtual_machines.list(group)] == []  # the Failed VM was deleted
    # ... and the attempt's network with it: the workflow moves on without a terminate for this key
    assert ours(sdk.network.network_interfaces.list_all(), provider.installation_id) == []
    assert ours(sdk.network.network_security_groups.list_all(), provider.installation_id) == []
    ref = await provider.create(zone2, spec(provider.installation_id))
    assert ref.region == "eastus"


async def test_a_failed_vm_left_by_an_earlier_create_is_deleted_by_the_retry(
    provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk
) -> None:
    """A worker died after Azure accepted the create, and the allocation then failed: the retried
    create finds the Failed VM, deletes it and reports the capacity failure."""
    offer = await cheapest(provider)
    s = spec(provider.installation_id)
    sim.admin.set_stock(offer.instance_type, f"{offer.region}-{offer.zone}", 0)
    sim.admin.add_fault(CLOUD, "create", "lose_response")
    with pytest.raises(Transient):
        await provider.create(offer, s)
    group, name = names(provider.installation_id, s.key, offer.region)
    assert (
        sdk.compute.virtual_machines.get(group, name).as_dict()["properties"]["provisioningState"] == "Failed"
    )
    with pytest.raises(CapacityError, match="ZonalAllocationFailed"):
        await provider.create(offer, s)
    assert [v.name for v in sdk.compute.virtual_machines.list(group)] == []


async def test_refusals_map_to_the_taxonomy(provider: AzureProvider, sim: FakeCloudServer) -> None:
    a100 = [o for o in await provider.offers(OfferQuery(gpu="a100", region="eastus"))]
    assert a100 and {o.zone for o in a100} == {"1", "2"}  # zone 3 is restricted: not offered
    restricted = a100[0].model_copy(update={"zone": "3"})
    with pytest.raises(CapacityError, match="SkuNotAvailable") as sku:
        await provider.create(restricted, spec(provider.installation_id))
    assert (sku.value.scope.region, sku.value.scope.zone) == ("eastus", "3")

    offer = await cheapest(provider)
    sim.admin.configure(quota={CLOUD: 0})
    with pytest.raises(QuotaError, match="quota") as quota:
        await provider.create(offer, spec(provider.installation_id))
    assert (quota.value.scope.region, quota.value.scope.zone, quota.value.scope.instance_type) == (
        offer.region,
        None,
        None,
    )  # a family's cores in the region: every size and zone there

    sim.admin.add_fault(CLOUD, "create", "rate_limit", retry_after=7)
    with pytest.raises(RateLimited) as slow:
        await provider.create(offer, spec(provider.installation_id))
    assert slow.value.retry_after == 7


async def test_terminate_leaves_no_vm_and_no_side_resource(
    provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk
) -> None:
    offer = await cheapest(provider)
    s = spec(provider.installation_id, ports=[8080, 22])
    ref = await provider.create(offer, s)
    group, name = names(provider.installation_id, s.key, offer.region)
    rules = sdk.network.network_security_groups.get(group, f"{name}-nsg").as_dict()["properties"][
        "securityRules"
    ]
    assert sorted(r["properties"]["destinationPortRange"] for r in rules) == ["22", "8080"]
    nic = sdk.network.network_interfaces.get(group, f"{name}-nic").as_dict()
    assert nic["tags"]["gpuprov-key"] == s.key and nic["properties"]["virtualMachine"]["id"].endswith(name)
    await running(provider, ref)

    await provider.terminate(ref)
    assert await provider.get(ref) is None
    inst = provider.installation_id
    assert ours(sdk.compute.virtual_machines.list_all(), inst) == []
    assert ours(sdk.network.network_interfaces.list_all(), inst) == []
    assert ours(sdk.network.public_ip_addresses.list_all(), inst) == []
    assert ours(sdk.network.network_security_groups.list_all(), inst) == []
    assert [v["name"] for v in ours(sdk.network.virtual_networks.list_all(), inst)] == [
        "gpuprov-vnet"
    ]  # shared
    assert await provider.list_owned() == []
    assert all(m["status"] == "terminated" for m in machines_named(sim, group, name))


async def test_spot_is_cheaper_and_launches_as_spot(
    provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk
) -> None:
    spot = (await provider.offers(OfferQuery(spot=True, gpu="t4", region="eastus")))[0]
    same = [
        o
        for o in await provider.offers(OfferQuery(spot=False, region="eastus"))
        if (o.instance_type, o.zone) == (spot.instance_type, spot.zone)
    ]
    assert spot.spot and spot.price_per_hour < same[0].price_per_hour
    assert not [
        o
        for o in await provider.offers(OfferQuery(spot=True))
        if o.instance_type == "Standard_ND96isr_H100_v5"
    ]
    s = spec(provider.installation_id)
    await provider.create(spot, s)
    group, name = names(provider.installation_id, s.key, spot.region)
    vm = sdk.compute.virtual_machines.get(group, name).as_dict()["properties"]
    assert (vm["priority"], vm["evictionPolicy"], vm["billingProfile"]["maxPrice"]) == (
        "Spot", "Deallocate", -1)  # Deallocate: an eviction stays visible (providers/azure_vm.py)
    assert machines_named(sim, group, name)[0]["spot"] is True


async def test_the_machine_runs_the_user_data_after_the_k3s_part(
    provider: AzureProvider, sim: FakeCloudServer
) -> None:
    offer = await cheapest(provider)
    s = spec(provider.installation_id, user_data='#!/bin/sh\necho from-user-data > "$HOME/hello"\n', k3s=True)
    ref = await provider.create(offer, s)
    await running(provider, ref)
    home = Path(str(sim.admin.machine(ref.instance_id)["home"]))
    await eventually(lambda: text_of(home / "hello"), until=lambda text: text.strip() == "from-user-data",
                     within=20, what="the user data's hello",
                     detail=lambda: (home / "cloud-init-output.log").read_text())
    scripts = sorted(p.read_text() for p in home.glob(".user-data-*"))  # noqa: ASYNC240
    assert any("get.k3s.io" in t for t in scripts)  # k3s at boot: skipped here, the image has it


async def test_an_image_urn_is_required_for_a_custom_image(provider: AzureProvider) -> None:
    with pytest.raises(InvalidRequest, match="publisher:offer:sku:version"):
        await provider.create(await cheapest(provider), spec(provider.installation_id, image="ubuntu-22.04"))


def test_credentials_errors_name_the_field_never_the_value() -> None:
    with pytest.raises(InvalidRequest) as bad:
        registry.build(
            CLOUD,
            {
                "tenant_id": "t.example.com",
                "subscription_id": "secret-looking-value",
                "client_id": "3a8d6f2c-1b9e-4d7a-8c5f-0e2b4a6d8f13",
                "client_secret": "s",
            },
            installation_id="abcd1234",
        )
    assert "subscription_id" in bad.value.message and "secret-looking-value" not in bad.value.message


async def test_a_subscription_the_principal_cannot_use_is_an_auth_error(sim: FakeCloudServer) -> None:
    creds = {**simclouds.credentials(sim, CLOUD), "subscription_id": "00000000-0000-4000-8000-000000000000"}
    async with registry.build(
        CLOUD,
        creds,
        options=simclouds.options(sim, CLOUD),
        installation_id="abcd1234",
        allowed_endpoints=simclouds.endpoints(sim),
    ) as p:
        with pytest.raises(AuthError, match="AuthorizationFailed"):
            await p.verify()


def test_the_endpoint_names_arm_and_the_authority_follows() -> None:
    def make(endpoint: str | None) -> AzureProvider:
        creds = AzureProvider.parse_credentials(
            {
                "tenant_id": "contoso.onmicrosoft.com",
                "subscription_id": "5f1c0a2e-7d4b-4c1e-9a3f-2b6d8e0c4a71",
                "client_id": "3a8d6f2c-1b9e-4d7a-8c5f-0e2b4a6d8f13",
                "client_secret": "s",
            }
        )
        return AzureProvider(creds, options=ConnectionOptions(endpoint=endpoint), installation_id="abcd1234")

    assert (make(None)._arm_base(), make(None)._authority()) == (
        "https://management.azure.com",
        {"authority": "login.microsoftonline.com"},
    )
    gov = make("https://management.usgovcloudapi.net")
    assert (gov._arm_base(), gov._authority()) == (
        "https://management.usgovcloudapi.net",
        {"authority": "login.microsoftonline.us"},
    )
    sim = make("https://127.0.0.1:8766/azure")
    assert (sim._arm_base(), sim._authority()) == (
        "https://127.0.0.1:8766/azure/arm",
        {"authority": "https://127.0.0.1:8766/azure/login", "disable_instance_discovery": True},
    )


async def test_an_unreachable_token_endpoint_is_transient_not_an_auth_failure() -> None:
    """azure-identity reports a refused connection as ClientAuthenticationError: still retryable."""
    creds = AzureProvider.parse_credentials(
        {
            "tenant_id": "9c3e7b1a-2f4d-4e8a-b6c0-1d5f3a7e9b20",
            "subscription_id": "5f1c0a2e-7d4b-4c1e-9a3f-2b6d8e0c4a71",
            "client_id": "3a8d6f2c-1b9e-4d7a-8c5f-0e2b4a6d8f13",
            "client_secret": "s",
        }
    )
    async with AzureProvider(
        creds, options=ConnectionOptions(endpoint="https://127.0.0.1:9/azure"), installation_id="abcd1234"
    ) as p:
        with pytest.raises(Transient):
            await p.verify()


def test_vm_names_fit_azure_and_stay_stable() -> None:
    long_key = "k" * 60 + "-"
    name = vm_name("abcd1234", long_key)
    assert len(name) <= 64 and name == vm_name("abcd1234", long_key) and not name.endswith("-")
    assert vm_name("abcd1234", "short-key") == "gpuprov-abcd1234-short-key"


def test_offers_skip_sizes_without_a_price_and_cpu_sizes() -> None:
    cpu = {
        "resourceType": "virtualMachines",
        "name": "Standard_D2s_v5",
        "locationInfo": [{"location": "eastus"}],
        "capabilities": [{"name": "vCPUs", "value": "2"}],
    }
    unpriced = {**cpu, "name": "Standard_NX99_v9", "capabilities": [{"name": "GPUs", "value": "1"}]}
    assert offers_of(AzureProvider.id, cpu) == [] and offers_of(AzureProvider.id, unpriced) == []


async def test_no_k3s_part_unless_asked(provider: AzureProvider, sim: FakeCloudServer) -> None:
    """`--no-k3s` (LaunchSpec.k3s false): the machine's user data holds only the caller's part."""
    s = spec(provider.installation_id, user_data='#!/bin/sh\necho from-user-data > "$HOME/hello"\n')
    ref = await provider.create(await cheapest(provider), s)
    await running(provider, ref)
    home = Path(str(sim.admin.machine(ref.instance_id)["home"]))
    await eventually((home / "hello").exists, within=20, what="the user data's hello",
                     detail=lambda: (home / "cloud-init-output.log").read_text())
    scripts = sorted(p.read_text() for p in home.glob(".user-data-*"))  # noqa: ASYNC240
    assert scripts and not any("get.k3s.io" in t for t in scripts)

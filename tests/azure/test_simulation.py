"""The simulated Azure through Azure's own SDK: it holds state and refuses what ARM refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError

from fakeclouds.server import FakeCloudServer
from providers.azure import AzureProvider
from providers.base import Offer
from tests.azure.conftest import Sdk, cheapest, names, sdk_for, spec

T4 = "Standard_NC4as_T4_v3"


def error_code(exc: HttpResponseError) -> str:
    return str(getattr(exc.error, "code", ""))


async def vm_body(p: AzureProvider, offer: Offer, key: str) -> tuple[str, str, dict[str, Any]]:
    """The network a create makes for `key`, and the VM body the adapter would PUT (not sent)."""
    s = spec(p.installation_id, key)
    await p.prepare(offer.region)
    group, name = names(p.installation_id, key, offer.region)
    nic = await p._ensure_network(await p._c(), group, name, offer.region, s)
    from providers.azure_vm import DEFAULT_IMAGE, custom_data, parse_image

    return group, name, p._vm_body(offer, s, parse_image(DEFAULT_IMAGE), custom_data(None, k3s=True), nic)


def test_the_sdk_refuses_a_bearer_token_over_plain_http(sim: FakeCloudServer, ca_file: Path) -> None:
    """Why the simulation is served over TLS: the SDK's check stays on."""
    plain = sdk_for(sim, ca_file, base_url=f"{sim.url}/azure/arm")
    try:
        with pytest.raises(
            ServiceRequestError, match="Bearer token authentication is not permitted for non-TLS"
        ):
            list(plain.compute.resource_skus.list())
    finally:
        plain.close()


def test_a_wrong_client_secret_is_refused_with_entra_words(sim: FakeCloudServer, ca_file: Path) -> None:
    bad = sdk_for(sim, ca_file, secret="not-the-secret")
    try:
        with pytest.raises(ClientAuthenticationError, match="AADSTS7000215"):
            list(bad.compute.resource_skus.list())
    finally:
        bad.close()


def test_resource_skus_carry_gpus_and_restrictions(sdk: Sdk) -> None:
    skus = [s.as_dict() for s in sdk.compute.resource_skus.list(filter="location eq 'eastus'")]
    assert {s["locations"][0] for s in skus} == {"eastus"}
    a100 = next(s for s in skus if s["name"] == "Standard_NC24ads_A100_v4")
    assert {"name": "GPUs", "value": "1"} in a100["capabilities"]
    assert a100["restrictions"][0]["type"] == "Zone" and a100["restrictions"][0]["restrictionInfo"][
        "zones"
    ] == ["3"]
    nd = [
        s.as_dict()
        for s in sdk.compute.resource_skus.list(filter="location eq 'westeurope'")
        if s.name == "Standard_ND96isr_H100_v5"
    ]
    assert nd[0]["restrictions"][0]["type"] == "Location"


async def test_a_put_under_a_taken_name_converges_or_is_refused(
    sdk: Sdk, provider: AzureProvider, sim: FakeCloudServer
) -> None:
    offer = await cheapest(provider)
    group, name, body = await vm_body(provider, offer, "az-taken")
    first = sdk.compute.virtual_machines.begin_create_or_update(group, name, body).result().as_dict()
    again = sdk.compute.virtual_machines.begin_create_or_update(group, name, body).result().as_dict()
    assert again["properties"]["vmId"] == first["properties"]["vmId"]
    assert len([m for m in sim.admin.machines() if m["name"] == f"{group}/{name}"]) == 1

    bigger = {
        **body,
        "properties": {**body["properties"], "hardwareProfile": {"vmSize": "Standard_NC8as_T4_v3"}},
    }
    with pytest.raises(HttpResponseError) as refused:
        sdk.compute.virtual_machines.begin_create_or_update(group, name, bigger)
    assert refused.value.status_code == 409 and error_code(refused.value) == "PropertyChangeNotAllowed"
    elsewhere = {**body, "zones": ["2"]}
    with pytest.raises(HttpResponseError) as moved:
        sdk.compute.virtual_machines.begin_create_or_update(group, name, elsewhere)
    assert error_code(moved.value) == "PropertyChangeNotAllowed" and "zones" in str(moved.value.message)

    # Marked for deletion: a PUT is refused meanwhile. The deletion is held for the check (the
    # module's 0.05 s could be over before the PUT on a busy box: a fresh-clone run saw it so).
    sim.admin.configure(terminate_delay=3600)
    try:
        sdk.compute.virtual_machines.begin_delete(group, name)
        with pytest.raises(HttpResponseError) as deleting:
            sdk.compute.virtual_machines.begin_create_or_update(group, name, body)
    finally:
        sim.admin.configure(terminate_delay=0.05)  # the module's; `reset` ends the held deletion
    assert error_code(deleting.value) == "OperationNotAllowed" and "marked for deletion" in str(
        deleting.value
    )


async def test_allocation_failure_arrives_in_the_operation_and_leaves_a_failed_vm(
    sdk: Sdk, provider: AzureProvider, sim: FakeCloudServer
) -> None:
    offer = await cheapest(provider)
    sim.admin.set_stock(offer.instance_type, f"{offer.region}-{offer.zone}", 0)
    group, name, body = await vm_body(provider, offer, "az-nocap")
    poller = sdk.compute.virtual_machines.begin_create_or_update(group, name, body)  # accepted: 201
    with pytest.raises(HttpResponseError) as failed:
        poller.result()
    assert error_code(failed.value) == "ZonalAllocationFailed"
    vm = sdk.compute.virtual_machines.get(group, name, expand="instanceView").as_dict()
    assert vm["properties"]["provisioningState"] == "Failed"
    codes = [s["code"] for s in vm["properties"]["instanceView"]["statuses"]]
    assert codes == ["ProvisioningState/failed/ZonalAllocationFailed"]
    sdk.compute.virtual_machines.begin_delete(group, name).result()
    assert [v for v in sdk.compute.virtual_machines.list(group) if v.name == name] == []


async def test_refusals_that_come_at_once(sdk: Sdk, provider: AzureProvider, sim: FakeCloudServer) -> None:
    offer = await cheapest(provider)
    group, name, body = await vm_body(provider, offer, "az-sync")

    def put(**changes: Any) -> HttpResponseError:
        props = {**body["properties"], **changes.pop("properties", {})}
        with pytest.raises(HttpResponseError) as exc:
            sdk.compute.virtual_machines.begin_create_or_update(
                group, name, {**body, **changes, "properties": props}
            )
        return exc.value

    restricted = put(zones=["3"], properties={"hardwareProfile": {"vmSize": "Standard_NC24ads_A100_v4"}})
    assert (restricted.status_code, error_code(restricted)) == (409, "SkuNotAvailable")
    image = put(
        properties={
            "storageProfile": {
                "imageReference": {
                    "publisher": "Canonical",
                    "offer": "no-such-offer",
                    "sku": "x",
                    "version": "latest",
                }
            }
        }
    )
    assert (image.status_code, error_code(image)) == (404, "PlatformImageNotFound")
    ssh = body["properties"]["osProfile"]
    wrong_path = {
        **ssh,
        "linuxConfiguration": {
            "ssh": {
                "publicKeys": [
                    {
                        "path": "/root/.ssh/authorized_keys",
                        "keyData": ssh["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"],
                    }
                ]
            }
        },
    }
    assert error_code(put(properties={"osProfile": wrong_path})) == "InvalidParameter"
    assert error_code(put(properties={"osProfile": {**ssh, "adminUsername": "admin"}})) == "InvalidParameter"
    sim.admin.configure(quota={"azure": 0})
    quota = put()
    assert (quota.status_code, error_code(quota)) == (409, "OperationNotAllowed") and "quota" in str(
        quota.message
    )
    assert [v for v in sdk.compute.virtual_machines.list(group) if v.name == name] == []  # nothing made
    assert not [m for m in sim.admin.machines() if m["name"] == f"{group}/{name}"]


async def test_deletes_are_refused_out_of_dependency_order(sdk: Sdk, provider: AzureProvider) -> None:
    offer = await cheapest(provider)
    group, name, body = await vm_body(provider, offer, "az-order")
    sdk.compute.virtual_machines.begin_create_or_update(group, name, body).result()
    for ops, suffix, code in (
        (sdk.network.network_security_groups, "nsg", "InUseNetworkSecurityGroupCannotBeDeleted"),
        (sdk.network.public_ip_addresses, "ip", "PublicIPAddressCannotBeDeleted"),
        (sdk.network.network_interfaces, "nic", "NicInUse"),
    ):
        with pytest.raises(HttpResponseError) as exc:
            ops.begin_delete(group, f"{name}-{suffix}").result()
        assert (exc.value.status_code, error_code(exc.value)) == (400, code)
    sdk.compute.virtual_machines.begin_delete(group, name).result()  # the operation ends once it is gone
    for ops, suffix in (
        (sdk.network.network_interfaces, "nic"),
        (sdk.network.public_ip_addresses, "ip"),
        (sdk.network.network_security_groups, "nsg"),
    ):
        ops.begin_delete(group, f"{name}-{suffix}").result()
        ops.begin_delete(group, f"{name}-{suffix}").result()  # already gone: 204, no error
    nics = [n.name for n in sdk.network.network_interfaces.list(group)]
    assert f"{name}-nic" not in nics

"""A Spot VM eviction on the simulated Azure, through the official SDK and the adapter: gpuprov's Spot
VMs carry evictionPolicy Deallocate, so an eviction leaves the VM `PowerState/deallocated` — which
gpuprov never asks for — and the adapter reports it stopped and `preempted`; its compute stopped
billing. The terminate of the lost allocation deletes it. A Regular VM never reads preempted."""

from __future__ import annotations

import asyncio

import asyncssh

from fakeclouds.server import FakeCloudServer
from providers.azure import AzureProvider
from providers.base import InstanceState, OfferQuery
from tests.azure.conftest import Sdk, cheapest, names, spec
from tests.azure.test_adapter import running
from tests.eventually import eventually


async def test_an_evicted_spot_vm_reads_deallocated_and_preempted(
        provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk) -> None:
    offer = (await provider.offers(OfferQuery(spot=True, gpu="t4", region="eastus")))[0]
    s = spec(provider.installation_id)
    ref = await provider.create(offer, s)
    await running(provider, ref)
    st = await provider.get(ref)
    assert st is not None and not st.preempted and not st.notice

    sim.admin.preempt(ref.instance_id)  # Azure evicts it (its 30 s Scheduled Event is inside the VM only)

    group, name = names(provider.installation_id, s.key, offer.region)
    view = sdk.compute.virtual_machines.instance_view(group, name).as_dict()
    assert [x["code"] for x in view["statuses"]] == ["ProvisioningState/succeeded", "PowerState/deallocated"]
    st = await provider.get(ref)
    assert st is not None and (st.state, st.preempted, st.host) == (InstanceState.STOPPED, True, None)
    assert st.detail is not None and st.detail.startswith("evicted")
    listed = {x.ref.instance_id: x for x in await provider.list_machines()}
    assert listed[ref.instance_id].preempted and listed[ref.instance_id].state == InstanceState.STOPPED
    machine = sim.admin.machine(ref.instance_id)
    billed = machine["billing_seconds"]
    await asyncio.sleep(0.3)
    assert sim.admin.machine(ref.instance_id)["billing_seconds"] == billed  # deallocated: no compute bill

    await provider.terminate(ref)  # the lost allocation's terminate: the VM and its side resources go
    assert await provider.get(ref) is None
    assert not [r for r in sim.admin.side_resources() if name in str(r.get("name"))]


async def test_a_regular_vm_taken_back_is_not_preempted(provider: AzureProvider,
                                                        sim: FakeCloudServer) -> None:
    ref = await provider.create(await cheapest(provider), spec(provider.installation_id))
    await running(provider, ref)
    sim.admin.preempt(ref.instance_id)  # not a Spot VM: Azure would not evict it; gone, not preempted
    st = await provider.get(ref)
    assert st is None or not st.preempted
    await provider.terminate(ref)


async def test_a_vm_shut_down_from_inside_reads_stopped_and_still_bills(
        provider: AzureProvider, sim: FakeCloudServer, sdk: Sdk) -> None:
    """Azure's own words for a guest shutdown: provisioning succeeded, `PowerState/stopped` — still
    allocated and billed (only a deallocate ends the compute bill), which is why Azure's self-end
    is "none". The adapter reads it stopped, not preempted."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    offer = await cheapest(provider)
    s = spec(provider.installation_id)
    s = s.model_copy(update={"ssh_public_keys": [key.export_public_key().decode().strip()]})
    ref = await provider.create(offer, s)
    await running(provider, ref)
    st = await provider.get(ref)
    assert st is not None and st.host and st.ssh_user
    async with asyncssh.connect(st.host, st.ssh_port, username=st.ssh_user, client_keys=[key],
                                known_hosts=None, agent_path=None) as conn:
        await conn.run("sudo shutdown -h now")
    st = await eventually(lambda: provider.get(ref), until=lambda x: x and x.state == InstanceState.STOPPED,
                          within=20, what="the VM stopped from inside")
    assert st is not None and (st.detail, st.preempted) == ("Succeeded, stopped", False)
    group, name = names(provider.installation_id, s.key, offer.region)
    view = sdk.compute.virtual_machines.instance_view(group, name).as_dict()
    assert [x["code"] for x in view["statuses"]] == ["ProvisioningState/succeeded", "PowerState/stopped"]
    billed = sim.admin.machine(ref.instance_id)["billing_seconds"]
    await eventually(lambda: sim.admin.machine(ref.instance_id)["billing_seconds"] > billed, within=20,
                     what="the stopped VM still billing")
    await provider.terminate(ref)

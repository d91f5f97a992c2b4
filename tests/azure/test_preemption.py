"""A Spot VM eviction on the simulated Azure, through the official SDK and the adapter: gpuprov's Spot
VMs carry evictionPolicy Deallocate, so an eviction leaves the VM `PowerState/deallocated` — which
gpuprov never asks for — and the adapter reports it stopped and `preempted`; its compute stopped
billing. The terminate of the lost allocation deletes it. A Regular VM never reads preempted."""

from __future__ import annotations

import asyncio

from fakeclouds.server import FakeCloudServer
from providers.azure import AzureProvider
from providers.base import InstanceState, OfferQuery
from tests.azure.conftest import Sdk, cheapest, names, spec
from tests.azure.test_adapter import running


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

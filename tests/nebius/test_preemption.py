"""A preemptible VM Nebius preempts, on the simulated Nebius through the official SDK and the adapter:
`on_preemption: STOP` leaves it STOPPED (with its preemptible spec) until deleted — the adapter reads
that as stopped and `preempted`; its compute stopped billing; the lost allocation's terminate deletes
it. A regular VM Nebius takes back is not preempted."""

from __future__ import annotations

import asyncio

from fakeclouds.server import FakeCloudServer
from providers.base import InstanceState, OfferQuery
from providers.nebius import NebiusProvider
from tests.nebius.test_adapter import provider, running, spec  # noqa: F401 — the fixture


async def test_a_preempted_vm_reads_stopped_and_preempted(server: FakeCloudServer,  # noqa: F811
                                                          provider: NebiusProvider) -> None:  # noqa: F811
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=True)))[0]
    ref = await provider.create(offer, spec("preempt-1"))
    await running(provider, ref)
    st = await provider.get(ref)
    assert st is not None and not st.preempted

    server.admin.preempt(ref.instance_id)

    st = await provider.get(ref)
    assert st is not None and (st.state, st.preempted, st.host) == (InstanceState.STOPPED, True, None)
    assert st.detail == "STOPPED (preempted)"
    listed = {x.ref.instance_id: x for x in await provider.list_machines()}
    assert listed[ref.instance_id].preempted
    billed = server.admin.machine(ref.instance_id)["billing_seconds"]
    await asyncio.sleep(0.3)
    assert server.admin.machine(ref.instance_id)["billing_seconds"] == billed

    await provider.terminate(ref)  # deleting the stopped VM is all that is left
    assert await provider.get(ref) is None
    assert ref.instance_id not in {x.ref.instance_id for x in await provider.list_machines()}


async def test_a_regular_vm_taken_back_is_not_preempted(server: FakeCloudServer,  # noqa: F811
                                                        provider: NebiusProvider) -> None:  # noqa: F811
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    ref = await provider.create(offer, spec("preempt-2"))
    await running(provider, ref)
    server.admin.preempt(ref.instance_id)
    st = await provider.get(ref)
    assert st is not None and st.state == InstanceState.STOPPED and not st.preempted
    await provider.terminate(ref)

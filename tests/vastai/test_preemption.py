"""An interruptible (bid) instance outbid on the simulated Vast.ai, through its API and the adapter:
the host stops it — `actual_status` stopped while the user's `intended_status` is still running,
`is_bid` — and the adapter reads stopped and `preempted`; it no longer bills its GPUs; destroying it
is what is left. A bid too low at create is no preemption, and an on-demand instance is never one."""

from __future__ import annotations

import asyncio

import httpx

from fakeclouds.server import FakeCloudServer
from providers.base import InstanceState, InstanceStatus
from providers.vastai import VastAIProvider, outbid
from tests.vastai.conftest import offer, spec
from tests.vastai.test_adapter import running


async def test_an_outbid_instance_reads_stopped_and_preempted_until_destroyed(
        sim: FakeCloudServer, vast: VastAIProvider, api: httpx.AsyncClient) -> None:
    ref = await vast.create(await offer(vast, spot=True), spec(vast))
    st = await running(vast, ref)
    assert not st.preempted

    sim.admin.preempt(ref.instance_id)  # a higher bid takes the host's GPUs

    answer = await api.get(f"/api/v0/instances/{ref.instance_id}/", params={"owner": "me"})
    inst = answer.json()["instances"]
    assert (inst["is_bid"], inst["actual_status"], inst["intended_status"]) == (True, "stopped", "running")
    st = await vast.get(ref)
    assert isinstance(st, InstanceStatus)
    assert (st.state, st.preempted, st.notice, st.host) == (InstanceState.STOPPED, True, False, None)
    listed = {x.ref.instance_id: x for x in await vast.list_machines()}
    assert listed[ref.instance_id].preempted
    billed = sim.admin.machine(ref.instance_id)["billing_seconds"]
    await asyncio.sleep(0.3)
    assert sim.admin.machine(ref.instance_id)["billing_seconds"] == billed

    await vast.terminate(ref)  # the lost allocation's terminate destroys it
    assert await vast.get(ref) is None
    assert ref.instance_id not in {x.ref.instance_id for x in await vast.list_machines()}


def test_what_reads_outbid() -> None:
    stopped = {"is_bid": True, "actual_status": "stopped", "intended_status": "running"}
    assert outbid(stopped)
    assert outbid({**stopped, "intended_status": "stopped", "status_msg": "Outbid by another renter"})
    # a bid below the host's minimum at create: made stopped, never ran — not a preemption
    assert not outbid({**stopped, "intended_status": "stopped", "status_msg": "bid below the host's minimum"})
    assert not outbid({**stopped, "is_bid": False})
    assert not outbid({**stopped, "actual_status": "running"})


async def test_an_on_demand_instance_taken_back_is_not_preempted(
        sim: FakeCloudServer, vast: VastAIProvider) -> None:
    ref = await vast.create(await offer(vast), spec(vast))
    await running(vast, ref)
    sim.admin.kill(ref.instance_id)  # its host went offline
    st = await vast.get(ref)
    assert st is not None and st.state == InstanceState.ERROR and not st.preempted
    await vast.terminate(ref)

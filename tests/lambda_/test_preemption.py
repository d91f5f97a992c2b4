"""Lambda's `preempted` (the OpenAPI's InstanceStatus enum), from the simulation through the adapter:
`get` and the listing report the instance gone *and* preempted, not merely lost; it stopped billing
when Lambda took it back; a notice (which Lambda documents none of) shows nothing until then."""

from __future__ import annotations

import asyncio

from fakeclouds.server import FakeCloudServer
from providers.base import InstanceRef, InstanceState, InstanceStatus
from providers.lambda_ import LambdaProvider
from tests.eventually import eventually
from tests.lambda_.conftest import offer, spec

WITHIN = 20.0


async def running(p: LambdaProvider, ref: InstanceRef) -> InstanceStatus:
    st: InstanceStatus = await eventually(lambda: p.get(ref), within=WITHIN, what="the instance active",
                                          until=lambda s: s is not None and s.state == InstanceState.RUNNING)
    return st


async def test_a_preempted_instance_reads_gone_and_preempted_in_get_and_in_the_listing(
        sim: FakeCloudServer, p: LambdaProvider) -> None:
    ref = await p.create(await offer(p), spec(p))
    st = await running(p, ref)
    assert not st.preempted and not st.notice

    sim.admin.preempt(ref.instance_id)

    st = await p.get(ref)
    assert st is not None
    assert (st.state, st.preempted, st.notice, st.host, st.detail) == (
        InstanceState.TERMINATED, True, False, None, "preempted")
    listed = {s.ref.instance_id: s for s in await p.list_machines()}
    assert listed[ref.instance_id].preempted and listed[ref.instance_id].state == InstanceState.TERMINATED
    machine = sim.admin.machine(ref.instance_id)
    assert (machine["status"], machine["detail"]) == ("terminated", "preempted")  # not billing
    billed = machine["billing_seconds"]
    await asyncio.sleep(0.3)
    assert sim.admin.machine(ref.instance_id)["billing_seconds"] == billed

    await p.terminate(ref)  # what the allocation does with a lost machine: it leaves Lambda's lists
    assert await p.get(ref) is None
    assert ref.instance_id not in {s.ref.instance_id for s in await p.list_machines()}


async def test_a_notice_shows_nothing_on_lambda_until_the_instance_is_preempted(
        sim: FakeCloudServer, p: LambdaProvider) -> None:
    ref = await p.create(await offer(p), spec(p))
    await running(p, ref)

    sim.admin.preempt(ref.instance_id, notice_s=120)  # ended below by the test

    st = await p.get(ref)  # Lambda's API has no notice: the instance is simply active
    assert st is not None and (st.state, st.notice, st.preempted) == (InstanceState.RUNNING, False, False)
    sim.admin.preempt(ref.instance_id)  # the notice's end
    st = await eventually(lambda: p.get(ref), within=WITHIN, what="the instance preempted",
                          until=lambda s: s is not None and s.preempted)
    assert st is not None and st.state == InstanceState.TERMINATED
    await p.terminate(ref)

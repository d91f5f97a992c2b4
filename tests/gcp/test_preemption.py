"""A Spot VM's preemption on the simulated Compute Engine, through the official SDK and the adapter:
the 30 s notice (STOPPING, a `compute.instances.preempted` operation running: `notice`), then the VM
deleted (gpuprov's instanceTerminationAction DELETE) or stopped (STOP) — `preempted` either way, and
no longer billing. An on-demand VM, or a Spot VM we delete ourselves, costs no operations listing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import compute_v1

from fakeclouds.gcp_auth import PROJECT
from fakeclouds.server import FakeCloudServer
from providers.base import InstanceState, InstanceStatus
from providers.gcp import GcpProvider, instance_name
from tests.eventually import eventually
from tests.gcp.test_adapter import spec, t4_offer, wait_state

ZONE = "us-central1-a"
OPERATIONS = "GET /compute/v1/projects/{project}/aggregated/operations"


def preempted_ops(sdk: Callable[[str], Any], instance_id: str) -> list[Any]:
    ops = sdk("ZoneOperationsClient").list(request=compute_v1.ListZoneOperationsRequest(
        project=PROJECT, zone=ZONE, filter='operationType = "compute.instances.preempted"'))
    return [op for op in ops if str(op.target_id) == instance_id]


async def test_a_preempted_spot_vm_shows_its_notice_then_reads_preempted_and_gone(
        sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider], sdk: Callable[[str], Any]) -> None:
    async with provider() as p:
        s = spec("gcp-preempt-1")
        ref = await p.create(await t4_offer(p, spot=True), s)
        st = await wait_state(p, ref, lambda st: st is not None and st.state == InstanceState.RUNNING)
        assert (st.notice, st.preempted) == (False, False)

        # Compute Engine's 30 s, held until the test ends it below: a busy host's reads fit in it.
        sim_clean.admin.preempt(ref.instance_id, notice_s=600)

        st = await p.get(ref)
        assert st is not None and (st.state, st.notice, st.preempted) == (InstanceState.STOPPING, True, False)
        [op] = preempted_ops(sdk, ref.instance_id)
        assert op.status == compute_v1.Operation.Status.RUNNING and op.user == "system"
        assert op.status_message == "Instance was preempted."
        listed = {x.ref.instance_id: x for x in await p.list_machines()}
        assert listed[ref.instance_id].notice
        assert sim_clean.admin.machine(ref.instance_id)["status"] == "running"  # the guest still runs
        sim_clean.admin.preempt(ref.instance_id)  # the notice's end

        # Preempted first reads STOPPING for the simulation's stop delay, then TERMINATED: wait for the end.
        def stopped(x: InstanceStatus | None) -> bool:
            return x is not None and x.preempted and x.state == InstanceState.TERMINATED

        st = await eventually(lambda: p.get(ref), within=20, what="the VM stopped", until=stopped)
        assert isinstance(st, InstanceStatus) and (st.state, st.notice) == (InstanceState.TERMINATED, False)
        [op] = preempted_ops(sdk, ref.instance_id)
        assert op.status == compute_v1.Operation.Status.DONE
        with pytest.raises(api_exceptions.NotFound):  # instanceTerminationAction DELETE: it is gone
            sdk("InstancesClient").get(project=PROJECT, zone=ZONE, instance=instance_name("gcptest1", s.key))
        assert ref.instance_id not in {x.ref.instance_id for x in await p.list_machines()}
        machine = sim_clean.admin.machine(ref.instance_id)
        billed = machine["billing_seconds"]
        await asyncio.sleep(0.3)
        assert (machine["detail"], sim_clean.admin.machine(ref.instance_id)["billing_seconds"]) == (
            "preempted", billed)

        await p.terminate(ref)  # the lost allocation's terminate: its firewall rule goes
        assert sim_clean.admin.side_resources() == []

    async with provider() as fresh:  # a worker started since never saw it as a Spot VM: just gone
        sim_clean.admin.clear_calls()
        assert await fresh.get(ref) is None
        assert OPERATIONS not in sim_clean.admin.call_counts().get("gcp", {})


async def test_a_spot_vm_stopped_by_its_preemption_reads_stopped_and_preempted(
        sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider], sdk: Callable[[str], Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    made = GcpProvider._instance

    def stop_on_preemption(self: GcpProvider, *args: Any) -> Any:
        """FAKE: the adapter asks for DELETE; here the VM keeps Compute Engine's default, STOP."""
        inst = made(self, *args)
        inst.scheduling.instance_termination_action = "STOP"
        return inst

    monkeypatch.setattr(GcpProvider, "_instance", stop_on_preemption)
    async with provider() as p:
        s = spec("gcp-preempt-2")
        ref = await p.create(await t4_offer(p, spot=True), s)
        await wait_state(p, ref, lambda st: st is not None and st.state == InstanceState.RUNNING)

        sim_clean.admin.preempt(ref.instance_id)  # no notice left: stopped at once

        st = await p.get(ref)
        assert st is not None and (st.state, st.preempted, st.notice) == (InstanceState.STOPPED, True, False)
        name = instance_name("gcptest1", s.key)
        inst = sdk("InstancesClient").get(project=PROJECT, zone=ZONE, instance=name)
        assert (inst.status, inst.status_message) == ("TERMINATED", "Instance was preempted.")
        listed = {x.ref.instance_id: x for x in await p.list_machines()}
        assert listed[ref.instance_id].preempted and listed[ref.instance_id].state == InstanceState.STOPPED

        await p.terminate(ref)  # deleting the stopped VM is all that is left
        assert await wait_state(p, ref, lambda x: x is None) is None


async def test_no_operations_listing_for_on_demand_or_our_own_delete(
        sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider]) -> None:
    async with provider() as p:
        on_demand = await p.create(await t4_offer(p), spec("gcp-preempt-3"))
        spot = await p.create(await t4_offer(p, spot=True), spec("gcp-preempt-4"))
        for ref in (on_demand, spot):
            await wait_state(p, ref, lambda st: st is not None and st.state == InstanceState.RUNNING)
        sim_clean.admin.clear_calls()
        assert not any(x.notice or x.preempted for x in await p.list_machines())
        sim_clean.admin.kill(on_demand.instance_id)  # Compute Engine stopped it: broken, not preempted
        st = await p.get(on_demand)
        assert st is not None and st.state == InstanceState.ERROR and not st.preempted
        await p.terminate(spot)
        assert await wait_state(p, spot, lambda x: x is None) is None
        assert OPERATIONS not in sim_clean.admin.call_counts().get("gcp", {})
        await p.terminate(on_demand)

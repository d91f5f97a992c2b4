"""The lease's timer at boot on the simulated Compute Engine: the adapter puts it in the `user-data`
metadata cloud-init reads; the VM, never logged into, runs it under (FAKE) systemd and stops itself
when the lease runs out — TERMINATED in GCP's words, its VM charges ended (tests/deadman/ has AWS,
the create activity and a reboot)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from activities import lease
from fakeclouds.server import FakeCloudServer
from providers.base import InstanceState
from providers.cloudinit import LEASE_UNIT
from providers.gcp import GcpProvider
from tests.gcp.test_adapter import spec, t4_offer, wait_state


async def test_a_vm_nobody_logs_into_stops_itself_when_its_boot_lease_runs_out(
        sim_clean: FakeCloudServer, provider: Callable[..., GcpProvider],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lease.HOUR_S_ENV, "1")  # a lease hour lasts a second: this lease, 2 s
    monkeypatch.setenv(lease.POLL_S_ENV, "0.1")
    async with provider() as p:
        ref = await p.create(await t4_offer(p), spec("gcp-bootlease-1", lease=lease.at_boot("gcp", 2.0)))
        # Compute Engine's TERMINATED (stopped): the adapter reads a VM stopped from inside as an error.
        st = await wait_state(p, ref, lambda st: st is not None and st.state == InstanceState.ERROR)
        assert st.detail == "TERMINATED: stopped by a guest shutdown" and not st.preempted
        home = sim_clean.engine.machine_home(sim_clean.engine.machines[ref.instance_id])
        assert "the lease ran out" in (home / ".gpuprov" / "lease.log").read_text()
        assert (home.parent / "root/etc/systemd/system/multi-user.target.wants" / LEASE_UNIT).exists()
        assert sim_clean.engine.calls.logins_json().get(ref.instance_id, 0) == 0
        await p.terminate(ref)

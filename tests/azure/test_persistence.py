"""A simulation restarted on its state dir (as `make run` restarts it): the same CA (connections keep
trusting it), and the subscription's VMs and network come back with their machines."""

from __future__ import annotations

from pathlib import Path

from fakeclouds.server import FakeCloudServer
from providers.base import InstanceState
from tests import simclouds
from tests.azure.conftest import CLOUD, cheapest, spec
from tests.eventually import eventually


async def test_a_restart_keeps_the_ca_the_vms_and_their_network(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with FakeCloudServer(state_dir=state, boot_delay=0.1, terminate_delay=0.05) as first:
        ca = first.ca_pem
        async with simclouds.provider(first, CLOUD, installation_id="persist1") as p:
            s = spec("persist1")
            ref = await p.create(await cheapest(p), s)
            st = await eventually(lambda: p.get(ref), within=20, what=f"{ref.instance_id} running",
                                  until=lambda st: st and st.state == InstanceState.RUNNING)
            assert st is not None
            host = st.host
    async with FakeCloudServer(state_dir=state, boot_delay=0.1, terminate_delay=0.05) as second:
        assert second.ca_pem == ca
        async with simclouds.provider(second, CLOUD, installation_id="persist1") as p:
            back = await p.get(ref)
            assert back is not None and (back.state, back.host) == (InstanceState.RUNNING, host)
            assert [(r.instance_id, r.kind) for r in await p.list_owned()] == [(ref.instance_id, "machine")]
            await p.terminate(ref)
            assert await p.get(ref) is None and await p.list_owned() == []

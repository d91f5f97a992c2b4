"""(a) Orchestration overhead: one allocation through AllocationWorkflow on a simulated cloud
(Lambda, AWS, GCP) with a fixed latency on every API call, divided by the same work done directly
in sequence with the same adapter (offers -> create -> poll get until running -> SSH -> nvidia-smi)."""

from __future__ import annotations

import asyncio
import statistics
import time

import asyncssh

from bench.harness import INSTALLATION, Bench, region_for
from fakeclouds import clouds
from fakeclouds.connect import endpoint, options
from messages.allocation import Timing
from providers import registry
from providers.base import CloudProvider, InstanceState, LaunchSpec, OfferQuery, Ownership

POLL_S = 0.1
TIMING = Timing(heartbeat_timeout_s=5, poll_interval_s=POLL_S, max_retry_interval_s=1)


async def direct_once(b: Bench, p: CloudProvider, cloud: str, n: int) -> float:
    """The provider calls and SSH steps an allocation makes, with no Temporal in between, on one
    adapter kept across rounds (as a worker keeps one per connection: clients, tokens warm)."""
    t0 = time.perf_counter()
    offer = (await p.offers(OfferQuery(region=region_for(cloud))))[0]
    await p.prepare(offer.region)  # as the workflow's create does: shared side resources first
    owner = Ownership(installation_id=INSTALLATION, allocation_id=f"d{cloud}{n}")
    spec = LaunchSpec(key=f"direct-{cloud}-{n}", owner=owner,
                      ssh_public_keys=[b.deps.public_key(), b.user_key])
    ref = await p.create(offer, spec)
    while True:
        st = await p.get(ref)
        if st is not None and st.state == InstanceState.RUNNING:
            break
        await asyncio.sleep(POLL_S)
    async with asyncssh.connect(st.host, st.ssh_port, username=st.ssh_user, known_hosts=None,
                                client_keys=[b.deps.private_key()]) as conn:
        await conn.run("true", check=True)
    async with asyncssh.connect(st.host, st.ssh_port, username=st.ssh_user, known_hosts=None,
                                client_keys=[b.deps.private_key()]) as conn:
        await conn.run("nvidia-smi --query-gpu=index,name,memory.total,uuid,driver_version "
                       "--format=csv,noheader,nounits", check=True)
    took = time.perf_counter() - t0
    # Not timed: the machine goes, giving its stock back for the rounds that follow.
    await p.terminate(ref)
    while (gone := await p.get(ref)) is not None and gone.state != InstanceState.TERMINATED:
        await p.terminate(ref)  # clouds whose side resources go after the machine converge on repeats
        await asyncio.sleep(POLL_S)
    return took


async def run(b: Bench, *, cloud: str = "lambda", latency_s: float, rounds: int) -> dict[str, float]:
    sim = clouds.facade(cloud)
    adapter = registry.build(cloud, sim.credentials(b.cloud.tokens[cloud]), options=options(b.cloud, cloud),
                             installation_id=INSTALLATION, allowed_endpoints=[endpoint(b.cloud, cloud)])
    b.cloud.admin.add_fault(cloud, "*", "latency", times=-1, seconds=latency_s)
    try:
        wf, direct = [], []
        for i in range(rounds):  # interleaved so drift on a noisy machine hits both sides
            direct.append(await direct_once(b, adapter, cloud, i))
            wf.append(await b.allocate(f"ovh{cloud}{i}", TIMING, cloud=cloud))
            await b.release(f"ovh{cloud}{i}")
    finally:
        b.cloud.admin.clear_faults()
        await adapter.aclose()
    return {"latency_s": latency_s, "workflow_s": statistics.median(wf),
            "direct_s": statistics.median(direct),
            "ratio": statistics.median(wf) / statistics.median(direct)}

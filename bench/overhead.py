"""(a) Orchestration overhead: one allocation through AllocationWorkflow on a simulated cloud
(Lambda, AWS, GCP) with a fixed latency on every API call, divided by the same work done directly
in sequence with the same adapter (offers -> create -> poll get until running -> SSH -> nvidia-smi).

Both sides see the boot end by polling, one `get` per POLL_S plus the call's latency, so each is late
to it by up to one poll: which poll sees it is set by the fixed time before the first (the
workflow's task and dispatch), not by what the rest costs. With one boot length for every round that
lateness was the same each round, and the ratio swung with it (lambda 0.98x at a 0.55 s boot, 1.18x
at 0.50 s and 0.60 s, same code). So the rounds' boots are spread evenly over one poll period
(`boot_lengths`), each round's the same for both sides, and each side's time is the mean over the
rounds: what a machine whose boot length is not known to the poller costs on average."""

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
    # The query the workflow's plan sends for the bench's request (on-demand: spot only when asked
    # for). Asked with spot=None, AWS's cheapest offer was spot: a spot launch, whose every `get`
    # also reads its spot request, timed against an on-demand one through the workflow.
    offer = (await p.offers(OfferQuery(region=region_for(cloud), spot=False)))[0]
    await p.prepare(offer.region)  # as the workflow's create does: shared side resources first
    owner = Ownership(installation_id=INSTALLATION, allocation_id=f"d{cloud}{n}")
    # A fresh key, nothing ever sent under it: what the workflow's create knows from its ledger
    # (LaunchSpec.unsent), so both sides make the same calls.
    spec = LaunchSpec(key=f"direct-{cloud}-{n}", owner=owner,
                      ssh_public_keys=[b.deps.public_key(), b.user_key], unsent=True)
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


def boot_lengths(boot_s: float, latency_s: float, rounds: int) -> list[float]:
    """Each round's boot: `boot_s` plus an even share of one poll period (a get and the pause)."""
    period = POLL_S + latency_s
    return [boot_s + period * i / rounds for i in range(rounds)]


async def run(b: Bench, *, cloud: str = "lambda", latency_s: float, rounds: int) -> dict[str, float]:
    sim = clouds.facade(cloud)
    adapter = registry.build(cloud, sim.credentials(b.cloud.tokens[cloud]), options=options(b.cloud, cloud),
                             installation_id=INSTALLATION, allowed_endpoints=[endpoint(b.cloud, cloud)])
    b.cloud.admin.add_fault(cloud, "*", "latency", times=-1, seconds=latency_s)
    boots = boot_lengths(b.boot_delay, latency_s, rounds)
    try:
        wf, direct = [], []
        # A first round of each side, not counted: the cloud's first client (boto3's takes seconds
        # to build) and the worker's first run of each path are one-off costs, which a mean would
        # spread over every round (the median this replaced dropped them).
        for i, boot in [(-1, b.boot_delay), *enumerate(boots)]:  # interleaved: drift hits both sides
            b.cloud.admin.configure(boot_delay=boot)
            took = await direct_once(b, adapter, cloud, i)
            took_wf = await b.allocate(f"ovh{cloud}{i}", TIMING, cloud=cloud)
            await b.release(f"ovh{cloud}{i}")
            if i >= 0:
                direct.append(took)
                wf.append(took_wf)
    finally:
        b.cloud.admin.configure(boot_delay=b.boot_delay)
        b.cloud.admin.clear_faults()
        await adapter.aclose()
    return {"latency_s": latency_s, "boot_min_s": boots[0], "boot_max_s": boots[-1],
            "workflow_s": statistics.fmean(wf), "direct_s": statistics.fmean(direct),
            "ratio": statistics.fmean(wf) / statistics.fmean(direct)}

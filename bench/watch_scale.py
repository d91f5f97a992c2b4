"""The watch at scale: one connection holding N ready machines (simulated DigitalOcean, whose
listing is paged, 200 droplets a page), one watch round. Counted at the simulation: the cloud calls
the round makes (the listing's pages, plus a `get` for any machine it does not show) against what
one `get` per machine cost before, and the SSH logins per machine (the idle sample's). Measured
here: this process's CPU for the round's activity, run in it as the worker would run it.

The machines are made through the adapter directly (not allocations: that is (b) and the scale
figure) and given READY rows, as the watch finds allocations."""

from __future__ import annotations

import asyncio
import math
import os
import time
from typing import Any

from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from activities.watch import WatchActivities, statuses
from bench.harness import Bench
from bench.procs import cpu_seconds
from fakeclouds import clouds
from fakeclouds.connect import ca_bundle, endpoint, endpoints
from messages.allocation import CloudTarget
from messages.enums import AllocationStatus
from messages.watch import WatchInput
from providers.base import CloudProvider, InstanceState, LaunchSpec, OfferQuery, Ownership
from providers.digitalocean import PAGE_SIZE
from store import connections as connection_store
from store.models import Instance, utcnow

CLOUD = "digitalocean"
# DigitalOcean's documented limits, per token (provider-facts.md: 5,000 requests an hour, 250 a minute).
RATE_PER_HOUR = 5000
CREATE_CONCURRENCY = 32


async def run(b: Bench, *, machines: int, interval_s: float = 60.0) -> dict[str, Any]:
    with Session(b.engine) as s:
        sim = clouds.facade(CLOUD)
        connection_id = connection_store.add_connection(
            s, b.deps.box, provider=CLOUD, name="bench-watch", endpoint=endpoint(b.cloud, CLOUD),
            ca_bundle=ca_bundle(b.cloud, CLOUD), credentials=sim.credentials(b.cloud.tokens[CLOUD])).id
    b.deps.allowed_endpoints.extend(e for e in endpoints(b.cloud) if e not in b.deps.allowed_endpoints)
    target = CloudTarget(connection_id=connection_id, cloud=CLOUD)
    p: CloudProvider = await ActivityEnvironment().run(b.deps.provider, target)
    offer = (await p.offers(OfferQuery(spot=False)))[0]
    assert offer.region is not None
    b.cloud.admin.set_stock(offer.instance_type, offer.region, machines + 10)
    b.cloud.admin.configure(quota={CLOUD: machines + 10})
    public_key = await b.deps.blocking(b.deps.public_key)
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def make(i: int) -> str:
        key = f"bw-{i}"
        async with gate:
            ref = await p.create(offer, LaunchSpec(
                key=key, owner=Ownership(installation_id=b.deps.installation_id, allocation_id=key),
                ssh_public_keys=[public_key]))
        return ref.instance_id

    ids = await asyncio.gather(*(make(i) for i in range(machines)))
    try:
        up = await _all_running(p, set(ids))
        with Session(b.engine) as s:
            for st in up:
                s.add(Instance(id=st.ref.key, provider=CLOUD, connection_id=connection_id,
                               workflow_id=st.ref.key, status=AllocationStatus.READY, phase="ready",
                               cloud_instance_id=st.ref.instance_id, key=st.ref.key,
                               offer_region=st.ref.region, ssh_host=st.host, ssh_port=st.ssh_port,
                               ssh_user=st.ssh_user, ready_at=utcnow()))
            s.commit()
        rows = WatchActivities(b.deps)._ready_on(connection_id)[1]
        listed = await _status_round(b, p, rows)
        per_machine = await _status_round(b, _NoListing(p), rows)  # as before: one get per machine
        full = []
        for _ in range(2):  # the first round pins each machine's host key: the second is the steady one
            b.cloud.admin.clear_calls()
            cpu0, t0 = cpu_seconds(os.getpid()), time.perf_counter()
            report = await ActivityEnvironment().run(WatchActivities(b.deps).watch_connection,
                                                     WatchInput(connection_id=connection_id))
            cpu, wall = cpu_seconds(os.getpid()) - cpu0, time.perf_counter() - t0
            logins = b.cloud.admin.ssh_logins()
            full.append({"cpu_s": cpu, "wall_s": wall, "lost": len(report.lost),
                         "sampled": len(logins), "max_logins": max(logins.values(), default=0),
                         "calls": sum(b.cloud.admin.call_counts().get(CLOUD, {}).values())})
    finally:
        await _terminate_all(p, ids)
    pages = math.ceil(machines / PAGE_SIZE)
    return {"machines": machines, "pages": pages, "listed": listed, "per_machine": per_machine,
            "round": full[-1], "interval_s": interval_s,
            "calls_per_hour": listed["calls"] * 3600 / interval_s, "rate_per_hour": RATE_PER_HOUR}


class _NoListing:
    """The adapter as the watch saw it before it listed: no state-bearing listing, so `get` per
    machine. Everything else is the real adapter's."""

    def __init__(self, p: CloudProvider) -> None:
        self._p = p

    async def list_machines(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._p, name)


async def _status_round(b: Bench, p: Any, rows: list[Instance]) -> dict[str, float]:
    """The round's cloud part alone (`statuses`): calls at the simulation, CPU here."""
    b.cloud.admin.clear_calls()
    cpu0 = cpu_seconds(os.getpid())
    answers = (await statuses(p, rows)).answers
    cpu = cpu_seconds(os.getpid()) - cpu0
    alive = sum(1 for a in answers if not isinstance(a, BaseException) and a is not None
                and a.state == InstanceState.RUNNING)
    return {"calls": sum(b.cloud.admin.call_counts().get(CLOUD, {}).values()), "cpu_s": cpu, "alive": alive}


async def _all_running(p: CloudProvider, ids: set[str], timeout_s: float = 600) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        listed = await p.list_machines() or []
        up = [s for s in listed if s.ref.instance_id in ids and s.state == InstanceState.RUNNING and s.host]
        if len(up) == len(ids):
            return sorted(up, key=lambda s: s.ref.key)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(ids) - len(up)} of {len(ids)} machines not running")
        await asyncio.sleep(1)


async def _terminate_all(p: CloudProvider, ids: list[str]) -> None:
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)
    owned = {r.instance_id: r for r in await p.list_owned() if r.is_machine}

    async def end(instance_id: str) -> None:
        if instance_id in owned:
            async with gate:
                await p.terminate(owned[instance_id])

    await asyncio.gather(*(end(i) for i in ids))


def report(w: dict[str, Any]) -> list[str]:
    listed, before, r = w["listed"], w["per_machine"], w["round"]
    within = "within" if w["calls_per_hour"] <= w["rate_per_hour"] else "OVER"
    return [
        f"(watch) one round over {w['machines']} ready machines on one {CLOUD} connection: "
        f"{listed['calls']:.0f} cloud calls ({w['pages']} pages; target <= pages + 1 = {w['pages'] + 1}) "
        f"vs {before['calls']:.0f} with a get per machine; worker CPU for the listing "
        f"{listed['cpu_s']:.2f}s vs {before['cpu_s']:.2f}s",
        f"    at the default {w['interval_s']:g}s interval: {w['calls_per_hour']:.0f} calls/hour, {within} "
        f"{CLOUD}'s documented {w['rate_per_hour']:,}/hour",
        f"    whole round (listing + idle sample): worker CPU {r['cpu_s']:.2f}s, wall {r['wall_s']:.1f}s, "
        f"{r['calls']} cloud calls; SSH logins: {r['sampled']} machines sampled, at most {r['max_logins']} "
        f"per machine (target <= 1), {r['lost']} reported lost",
    ]

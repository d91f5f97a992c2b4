"""(paced) Allocations at once on one Lambda key, whose documented limit is one request a second
(providers/lambda_.py paces every call of a key to it), where each would make a call of its own:

- plans: N plans (PLAN_ALLOCATION) asked together — with the worker's plans sharing each offers
  listing (ActivityDeps.live_offers, providers/market.py LiveOffers) and with each its own call;
- boot polls: N machines' WAIT_RUNNING started together, the machines already running — with polls
  that overlap sharing the instances listing (ActivityDeps.statuses,
  providers/shared_statuses.py) and with a get each;
- teardowns: N machines' TERMINATE_AND_VERIFY started together, each machine terminating for
  TERMINATING_S before it is gone — the same two ways (each teardown's lookups by key and its
  release are the same on both sides).

Activities run directly in this process, sides alternating. Printed per side: the calls the
simulation served and when the median and the last activity answered. The pacing runs at `scale` of
Lambda's real intervals (the bench's cloud has its limits off, the adapter paces itself), so the
figure takes seconds: at 1/20, 50 calls in a row queue for ~2.5 s, ~50 s at the real rate."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.cloud import CloudActivities
from activities.deps import ActivityDeps, ProviderCache
from bench.harness import Bench
from fakeclouds.connect import endpoint
from messages.activities import PlanInput, TerminateInput, WaitRunningInput
from messages.allocation import CloudTarget
from providers.base import CloudProvider, InstanceRef, InstanceState, LaunchSpec, OfferQuery, Ownership
from providers.market import LiveOffers
from providers.pacing import TIME_SCALE_ENV
from providers.shared_statuses import SharedStatuses

REGION, TYPE = "us-east-1", "gpu_1x_a10"
# How long a machine stays terminating, and how often its teardown polls, in the bench's time (at
# 1/20 of Lambda's rate: ~2 min and ~2 s at the real one). The bench's cloud terminates in 0.01 s.
TERMINATING_S, TEARDOWN_POLL_S = 6.0, 0.1


async def _timed(b: Bench, activities: list[Callable[[], Awaitable[object]]]) -> dict[str, float]:
    """Run `activities` at once; the calls the simulation served meanwhile and when they answered."""
    answered: list[float] = []
    b.cloud.admin.clear_calls()
    t0 = time.perf_counter()

    async def one(run: Callable[[], Awaitable[object]]) -> None:
        await run()
        answered.append(time.perf_counter() - t0)

    await asyncio.gather(*(one(run) for run in activities))
    calls = sum(b.cloud.admin.call_counts().get("lambda", {}).values())
    return {"calls": calls, "median_s": statistics.median(answered), "last_s": max(answered)}


async def _plans(b: Bench, deps: ActivityDeps, target: CloudTarget, n: int) -> dict[str, float]:
    inp = PlanInput(targets=[target], query=OfferQuery(gpu="A10", region=REGION))

    async def plan() -> None:
        if not (await ActivityEnvironment().run(CloudActivities(deps).plan_allocation, inp)).offers:
            raise RuntimeError("a plan found no offers")
    return await _timed(b, [plan] * n)


async def _polls(b: Bench, deps: ActivityDeps, target: CloudTarget,
                 refs: list[InstanceRef]) -> dict[str, float]:
    def poll(ref: InstanceRef) -> Callable[[], Awaitable[object]]:
        inp = WaitRunningInput(target=target, ref=ref, poll_interval_s=0.2)
        return lambda: ActivityEnvironment().run(CloudActivities(deps).wait_running, inp)
    return await _timed(b, [poll(r) for r in refs])


async def _teardowns(b: Bench, deps: ActivityDeps, target: CloudTarget,
                     refs: list[InstanceRef]) -> dict[str, float]:
    def teardown(ref: InstanceRef) -> Callable[[], Awaitable[object]]:
        inp = TerminateInput(target=target, key=ref.key, ref=ref, poll_interval_s=TEARDOWN_POLL_S)
        return lambda: ActivityEnvironment().run(CloudActivities(deps).terminate_and_verify, inp)
    b.cloud.admin.configure(terminate_delay=TERMINATING_S)
    try:
        return await _timed(b, [teardown(r) for r in refs])
    finally:
        b.cloud.admin.configure(terminate_delay=0.01)


def _deps(b: Bench, *, shared: bool) -> ActivityDeps:
    """The harness's deps with adapters of their own (the caller closes them) for its Lambda, its
    plans and boot polls sharing the cloud's listings or each making its own calls."""
    return replace(b.deps, providers=ProviderCache(), allowed_endpoints=[endpoint(b.cloud, "lambda")],
                   live_offers=LiveOffers() if shared else None,
                   statuses=SharedStatuses() if shared else None)


async def _machines(p: CloudProvider, b: Bench, n: int) -> list[InstanceRef]:
    """N running machines on the bench's Lambda connection (made unpaced, before the figure)."""
    b.cloud.admin.set_stock(TYPE, REGION, 2 * n)  # stock left over: the plans still find offers
    offer = next(o for o in await p.offers(OfferQuery(region=REGION)) if o.instance_type == TYPE)
    keys = [f"paced-{uuid.uuid4().hex[:8]}" for _ in range(n)]
    refs = [await p.create(offer, LaunchSpec(key=k, ssh_public_keys=[b.user_key], owner=Ownership(
        installation_id=b.deps.installation_id, allocation_id=k))) for k in keys]
    while True:
        listed = await p.list_machines() or []
        running = {s.ref.instance_id for s in listed if s.state == InstanceState.RUNNING}
        if all(r.instance_id in running for r in refs):
            return refs
        await asyncio.sleep(0.1)


def _pacing_at(scale: float) -> None:
    """This process's pacers at `scale` of the clouds' documented rates (rebuilt at the next call)."""
    os.environ[TIME_SCALE_ENV] = str(scale)


async def run(b: Bench, *, n: int = 50, scale: float = 0.05, rounds: int = 2) -> dict[str, Any]:
    target = CloudTarget(connection_id=b.connections["lambda"], cloud="lambda")
    unpaced = _deps(b, shared=True)
    p = await ActivityEnvironment().run(unpaced.provider, target)
    before = os.environ.get(TIME_SCALE_ENV)
    _pacing_at(0)
    refs = await _machines(p, b, n)
    figures: dict[str, dict[str, list[dict[str, float]]]] = {
        what: {"shared": [], "own": []} for what in ("plans", "polls", "teardowns")}
    try:
        for _ in range(rounds):
            for side in ("shared", "own"):
                deps = _deps(b, shared=side == "shared")
                try:
                    await ActivityEnvironment().run(deps.provider, target)  # built before the clock starts
                    doomed = await _machines(p, b, n)  # made unpaced
                    _pacing_at(scale)
                    figures["plans"][side].append(await _plans(b, deps, target, n))
                    figures["polls"][side].append(await _polls(b, deps, target, refs))
                    figures["teardowns"][side].append(await _teardowns(b, deps, target, doomed))
                finally:
                    _pacing_at(0)
                    await deps.providers.aclose()
    finally:
        if before is None:
            del os.environ[TIME_SCALE_ENV]
        else:
            os.environ[TIME_SCALE_ENV] = before
        for ref in refs:
            await p.terminate(ref)
        await unpaced.providers.aclose()
    return {"n": n, "scale": scale, **{
        what: {side: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for side, rs in sides.items()}
        for what, sides in figures.items()}}

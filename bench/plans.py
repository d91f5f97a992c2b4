"""(plans) Allocations planned at once on one Lambda key, whose documented limit is one request a
second (providers/lambda_.py paces every call of a key to it): N plans (PLAN_ALLOCATION, run
directly) asked together, with the worker's plans sharing each listing (ActivityDeps.live_offers,
providers/market.py LiveOffers) and with each plan making its own call, alternating. Printed: the
instance-types listings the simulation served and when the median and the last plan answered.

The pacing runs at `scale` of Lambda's real intervals (the bench's cloud has its limits off, the
adapter paces itself), so the figure takes seconds: at 1/20, 50 plans of their own call queue for
~2.5 s, which is ~50 s at the real rate."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from dataclasses import replace
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.cloud import CloudActivities
from activities.deps import ActivityDeps, ProviderCache
from bench.harness import Bench
from fakeclouds.connect import endpoint
from messages.activities import PlanInput
from messages.allocation import CloudTarget
from providers.base import OfferQuery
from providers.market import LiveOffers
from providers.pacing import TIME_SCALE_ENV

LISTING = "GET /instance-types"


async def _round(b: Bench, deps: ActivityDeps, plans: int) -> dict[str, float]:
    target = CloudTarget(connection_id=b.connections["lambda"], cloud="lambda")
    await ActivityEnvironment().run(deps.provider, target)  # the adapter built before the clock starts
    plan = CloudActivities(deps).plan_allocation
    inp = PlanInput(targets=[target], query=OfferQuery(gpu="A10", region="us-east-1"))
    answered: list[float] = []
    b.cloud.admin.clear_calls()
    t0 = time.perf_counter()

    async def one() -> None:
        result = await ActivityEnvironment().run(plan, inp)
        if not result.offers:
            raise RuntimeError(f"a plan found no offers: {result.failures}")
        answered.append(time.perf_counter() - t0)

    await asyncio.gather(*(one() for _ in range(plans)))
    return {"listings": b.cloud.admin.call_counts().get("lambda", {}).get(LISTING, 0),
            "median_s": statistics.median(answered), "last_s": max(answered)}


async def run(b: Bench, *, plans: int = 50, scale: float = 0.05, rounds: int = 2) -> dict[str, Any]:
    before = os.environ.get(TIME_SCALE_ENV)
    os.environ[TIME_SCALE_ENV] = str(scale)  # this process's pacers, rebuilt at the new scale
    try:
        sides: dict[str, list[dict[str, float]]] = {"shared": [], "own": []}
        for _ in range(rounds):
            for side in sides:
                # The harness's deps with its own adapters (closed after), sharing listings or not.
                deps = replace(b.deps, live_offers=LiveOffers() if side == "shared" else None,
                               providers=ProviderCache(), allowed_endpoints=[endpoint(b.cloud, "lambda")])
                try:
                    sides[side].append(await _round(b, deps, plans))
                finally:
                    await deps.providers.aclose()
    finally:
        if before is None:
            del os.environ[TIME_SCALE_ENV]
        else:
            os.environ[TIME_SCALE_ENV] = before
    return {"plans": plans, "scale": scale,
            **{side: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for side, rs in sides.items()}}

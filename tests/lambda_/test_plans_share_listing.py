"""Allocations planned at once on one worker make one instance-types listing per listing time, not
one per plan (activities/cloud.py plan_allocation with the worker's LiveOffers): counted where
Lambda would count them, at the simulation. Lambda allows one request a second per key."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from activities.cloud import CloudActivities
from activities.deps import ActivityDeps
from fakeclouds.server import FakeCloudServer
from messages.activities import PlanInput
from messages.allocation import CloudTarget
from providers.base import Offer, OfferQuery
from store.secrets import SecretBox
from tests import migrated, simclouds
from tests.market.test_live_offers import until


async def test_concurrent_plan_activities_make_one_listing_call_at_the_simulation(
        sim: FakeCloudServer, tmp_path: Path, secret_box: SecretBox) -> None:
    """The adapter's offers are held until ten plans asked, so the count does not depend on how fast
    this box runs them."""
    deps = ActivityDeps(engine=migrated.sqlite_engine(tmp_path / "app.db"), box=secret_box,
                        installation_id=uuid.uuid4().hex[:8])
    with Session(deps.engine) as s:
        connection_id = simclouds.add_connection(s, secret_box, sim, "lambda")
    target = CloudTarget(connection_id=connection_id, cloud="lambda")
    with simclouds.allowed(deps, sim):
        adapter: Any = await ActivityEnvironment().run(deps.provider, target)  # the one the plans get
        release, listed, held = asyncio.Event(), adapter.offers, [0]

        async def held_offers(query: OfferQuery) -> list[Offer]:
            held[0] += 1
            await release.wait()
            return list(await listed(query))

        adapter.offers = held_offers
        sim.admin.clear_calls()
        plan = CloudActivities(deps).plan_allocation
        inp = PlanInput(targets=[target], query=OfferQuery(gpu="A10", region="us-east-1"))
        plans = [asyncio.ensure_future(ActivityEnvironment().run(plan, inp)) for _ in range(10)]
        # (Without the sharing each plan holds its own call: ten of them, and the count below fails.)
        live = deps.live_offers
        await until(lambda: (live is not None and live.callers() >= 10) or held[0] >= 10)
        release.set()
        results = await asyncio.gather(*plans)
    assert all(r.offers and r.offers[0].connection_id == target.connection_id for r in results)
    # One listing for the first plan, one for the nine that asked while it was held.
    assert sim.admin.call_counts()["lambda"].get("GET /instance-types") == 2
    await deps.providers.aclose()

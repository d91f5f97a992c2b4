"""Allocations at once on one worker share the connection's listings where each would have made a call
of its own: their plans one instance-types listing per listing time (activities/cloud.py
plan_allocation with the worker's LiveOffers), their boot polls the instances listing while they
overlap (wait_running with the worker's SharedStatuses), and so do the polls of machines torn down at
once (terminate_and_verify). Counted where Lambda would count them, at the simulation: Lambda allows
one request a second per key."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from activities.cloud import CloudActivities
from activities.deps import ActivityDeps
from fakeclouds.server import FakeCloudServer
from messages.activities import PlanInput, TerminateInput, WaitRunningInput
from messages.allocation import CloudTarget
from providers.base import InstanceRef, InstanceState, InstanceStatus, Offer, OfferQuery
from store.secrets import SecretBox
from tests import migrated, simclouds
from tests.eventually import eventually, steps_until
from tests.lambda_.conftest import offer, spec


@dataclass
class Worker:
    """A worker's ActivityDeps on one simulated Lambda connection, and the adapter its activities get."""

    deps: ActivityDeps
    target: CloudTarget
    adapter: Any  # LambdaProvider; Any: the tests replace its methods with held ones


@pytest.fixture
async def worker(sim: FakeCloudServer, tmp_path: Path, secret_box: SecretBox) -> AsyncIterator[Worker]:
    deps = ActivityDeps(engine=migrated.sqlite_engine(tmp_path / "app.db"), box=secret_box,
                        installation_id=uuid.uuid4().hex[:8])
    with Session(deps.engine) as s:
        target = CloudTarget(connection_id=simclouds.add_connection(s, secret_box, sim, "lambda"),
                             cloud="lambda")
    with simclouds.allowed(deps, sim):
        yield Worker(deps, target, await ActivityEnvironment().run(deps.provider, target))
    await deps.providers.aclose()


async def test_concurrent_plan_activities_make_one_listing_call_at_the_simulation(
        sim: FakeCloudServer, worker: Worker) -> None:
    """The adapter's offers are held until ten plans asked, so the count does not depend on how fast
    this box runs them."""
    deps, target, adapter = worker.deps, worker.target, worker.adapter
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
    await steps_until(lambda: (live is not None and live.callers() >= 10) or held[0] >= 10)
    release.set()
    results = await asyncio.gather(*plans)
    assert all(r.offers and r.offers[0].connection_id == target.connection_id for r in results)
    # One listing for the first plan and one for the nine that asked while it was held — or one for
    # all ten, when each asked before the first's listing began (each resolves its connection in
    # the database's threads first, so which comes first is the box's).
    assert 1 <= sim.admin.call_counts()["lambda"].get("GET /instance-types", 0) <= 2


async def test_boot_polls_at_once_share_the_instances_listing(sim: FakeCloudServer, worker: Worker) -> None:
    """Five machines' WAIT_RUNNING at once: the first poll is a get, the four that overlap it are
    answered by the listing. The adapter's calls are held until all five polled."""
    deps, target, adapter = worker.deps, worker.target, worker.adapter
    sim.admin.set_stock("gpu_1x_a10", "us-east-1", 5)
    where = await offer(adapter)
    refs = [await adapter.create(where, spec(adapter)) for _ in range(5)]

    async def running() -> list[InstanceStatus]:
        return [st for st in await adapter.list_machines() if st.state == InstanceState.RUNNING]

    await eventually(running, until=lambda up: len(up) == 5, within=30, what="five machines running")
    release, held = asyncio.Event(), [0]
    get, list_machines = adapter.get, adapter.list_machines

    async def held_get(ref: InstanceRef) -> InstanceStatus | None:
        held[0] += 1
        await release.wait()
        return await get(ref)  # type: ignore[no-any-return]

    async def held_listing() -> list[InstanceStatus] | None:
        await release.wait()
        return await list_machines()  # type: ignore[no-any-return]

    adapter.get, adapter.list_machines = held_get, held_listing
    sim.admin.clear_calls()
    wait = CloudActivities(deps).wait_running
    polls = [asyncio.ensure_future(ActivityEnvironment().run(
        wait, WaitRunningInput(target=target, ref=ref, poll_interval_s=0.05))) for ref in refs]
    # (Without the sharing each poll holds a get of its own: five, and the count below fails.)
    shared = deps.statuses
    await steps_until(lambda: (shared is not None and shared.polls() >= 5) or held[0] >= 5)
    release.set()
    statuses = await asyncio.gather(*polls)
    assert [st.ref.instance_id for st in statuses] == [r.instance_id for r in refs]
    assert all(st.state == InstanceState.RUNNING and st.host for st in statuses)
    counts = sim.admin.call_counts()["lambda"]
    assert counts.get("GET /instances/{instance_id}") == 1, counts
    # One listing when the four overlapping polls all asked before it began, two when some asked
    # while the first was under way (each gets a listing that began after it asked).
    assert 1 <= counts.get("GET /instances", 0) <= 2, counts


async def test_teardown_polls_at_once_share_the_instances_listing(sim: FakeCloudServer,
                                                                  worker: Worker) -> None:
    """Five machines' TERMINATE_AND_VERIFY at once, the machines terminating for a minute: a round of
    their gone-polls is one get and a listing, not five gets. The adapter's polls are held until all
    five asked; the next round's are answered "gone" without the cloud, so the activities end."""
    deps, target, adapter = worker.deps, worker.target, worker.adapter
    sim.admin.set_stock("gpu_1x_a10", "us-east-1", 5)
    sim.admin.configure(terminate_delay=60)  # the fixture's reset forgets them afterwards
    where = await offer(adapter)
    refs = [await adapter.create(where, spec(adapter)) for _ in range(5)]
    await eventually(adapter.list_machines, within=30, what="five machines running",
                     until=lambda up: sum(st.state == InstanceState.RUNNING for st in up) == 5)
    first_round, second_round = asyncio.Event(), asyncio.Event()
    calls = {"started": 0, "answered": 0}  # the first round's calls to the cloud
    get, list_machines = adapter.get, adapter.list_machines

    async def held(real: Any, gone: Any) -> Any:
        if first_round.is_set() and calls["answered"] == calls["started"]:
            await second_round.wait()
            return gone
        calls["started"] += 1
        await first_round.wait()
        try:
            return await real()
        finally:
            calls["answered"] += 1

    async def held_get(ref: InstanceRef) -> InstanceStatus | None:
        return await held(lambda: get(ref), None)  # type: ignore[no-any-return]

    async def held_listing() -> list[InstanceStatus] | None:
        return await held(list_machines, [])  # type: ignore[no-any-return]

    adapter.get, adapter.list_machines = held_get, held_listing
    shared = deps.statuses
    assert shared is not None
    teardown = CloudActivities(deps).terminate_and_verify
    runs = [asyncio.ensure_future(ActivityEnvironment().run(teardown, TerminateInput(
        target=target, key=ref.key, ref=ref, poll_interval_s=0.01))) for ref in refs]
    await steps_until(lambda: shared.polls() >= 5)
    sim.admin.clear_calls()  # the terminates and the lookups by key are done: the polls' calls follow
    first_round.set()
    # The first round answered, and all five polls of the next asked (held).
    await steps_until(lambda: calls["answered"] == calls["started"] and shared.polls() >= 5)
    counts = sim.admin.call_counts()["lambda"]
    # (Without the sharing each machine's poll is a get of its own: five, and this fails.)
    assert counts.get("GET /instances/{instance_id}") == 1, counts
    assert 1 <= counts.get("GET /instances", 0) <= 2, counts
    assert sum(st["status"] == "terminating" for st in sim.admin.machines()) == 5
    second_round.set()
    await asyncio.gather(*runs)

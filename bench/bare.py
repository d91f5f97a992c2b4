"""The bare baselines: for (b)/(c) a workflow that only runs N trivial activities in sequence; for
(d) the same, then one activity held open (heartbeating, as an allocation's wait_running is) until
the workflow is cancelled — what any open workflow with one activity in flight costs a worker.

Their own small module because a sandboxed workflow's module is re-imported for every run:
defined next to the bench harness, each run would re-import that (and its imports) too."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow

HELD_HEARTBEAT_S = 10.0  # the production Timing's heartbeat is every 10 s (a third of its 30 s timeout)


@activity.defn(name="bench_trivial")
async def trivial(i: int) -> int:
    return i


@activity.defn(name="bench_held")
async def held() -> None:
    """Open until cancelled, heartbeating as wait_running does between its polls."""
    while True:
        activity.heartbeat()
        await asyncio.sleep(HELD_HEARTBEAT_S)


async def trivial_ones(activities: int) -> None:
    for i in range(activities):
        await workflow.execute_activity(trivial, i, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn(name="BenchBareWorkflow")
class BareWorkflow:
    @workflow.run
    async def run(self, activities: int) -> int:
        await trivial_ones(activities)
        return activities


@workflow.defn(name="BenchBareHeldWorkflow")
class BareHeldWorkflow:
    @workflow.run
    async def run(self, activities: int) -> int:
        await trivial_ones(activities)
        # Cancelled, it closes once the activity has stopped (at its next heartbeat), as an
        # allocation does: the worker is left with no activity of a closed workflow to report.
        await workflow.execute_activity(held, start_to_close_timeout=timedelta(days=1),
                                        heartbeat_timeout=timedelta(seconds=3 * HELD_HEARTBEAT_S),
                                        cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
        return activities

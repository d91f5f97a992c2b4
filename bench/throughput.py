"""(b) Allocations per second with N concurrent allocations on the simulated Lambda, divided by
a bare workflow running the same number of trivial activities, N at once, on the same server."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import WorkflowHistory

from bench.harness import TASK_QUEUE, Bench
from workflows.models import Timing, allocate_workflow_id

TIMING = Timing(heartbeat_timeout_s=10, poll_interval_s=0.2, max_retry_interval_s=2)


@activity.defn(name="bench_trivial")
async def trivial(i: int) -> int:
    return i


@workflow.defn(name="BenchBareWorkflow", sandboxed=False)
class BareWorkflow:
    @workflow.run
    async def run(self, activities: int) -> int:
        for i in range(activities):
            await workflow.execute_activity(trivial, i, start_to_close_timeout=timedelta(seconds=30))
        return activities


def activity_count(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if e.HasField("activity_task_scheduled_event_attributes"))


async def run(b: Bench, *, concurrency: int) -> dict[str, float]:
    b.cloud.admin.set_stock("gpu_1x_a10", "us-east-1", concurrency * 2)
    t0 = time.perf_counter()
    await asyncio.gather(*(b.allocate(f"tp{i}", TIMING, gpu="A10", region="us-east-1")
                           for i in range(concurrency)))
    alloc_s = time.perf_counter() - t0
    hist = await b.client.get_workflow_handle(allocate_workflow_id("tp0")).fetch_history()
    n_act = activity_count(hist)

    from temporalio.worker import Worker

    async with Worker(b.client, task_queue=TASK_QUEUE + "-bare", workflows=[BareWorkflow],
                      activities=[trivial], max_concurrent_activities=400):
        t0 = time.perf_counter()
        await asyncio.gather(*(b.client.execute_workflow(BareWorkflow.run, n_act, id=f"bare-{i}",
                                                         task_queue=TASK_QUEUE + "-bare")
                               for i in range(concurrency)))
        bare_s = time.perf_counter() - t0
    alloc_rate, bare_rate = concurrency / alloc_s, concurrency / bare_s
    return {"concurrency": concurrency, "activities_per_allocation": n_act,
            "allocations_per_s": alloc_rate, "bare_workflows_per_s": bare_rate,
            "ratio": alloc_rate / bare_rate}

"""(b) Allocations per second with N concurrent allocations on the simulated Lambda, divided by
a bare workflow running the same number of trivial activities, N at once, on the same server,
in the same sandboxed workflow runner, in a worker process of its own.
(c) The CPU-seconds each process spent per allocation (and per bare workflow) meanwhile."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from temporalio.client import WorkflowHistory

from bench.bare import BareWorkflow
from bench.harness import TASK_QUEUE, Bench
from bench.procs import cpu_snapshot, cpu_used
from messages.allocation import Timing
from messages.ids import allocation_workflow_id

# Production heartbeat timeout (a loaded 2-core box needs its slack); faster polling.
TIMING = Timing(poll_interval_s=0.2, max_retry_interval_s=2)


def activity_count(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if e.HasField("activity_task_scheduled_event_attributes"))


async def run(b: Bench, *, concurrency: int) -> dict[str, Any]:
    b.cloud.admin.set_stock("gpu_1x_a10", "us-east-1", concurrency * 2)
    pids = {"worker": b.worker_pid, "temporal": b.temporal_pid, "cloud": b.cloud.pid, "client": os.getpid()}
    b.cloud.admin.clear_calls()
    cpu0, t0 = cpu_snapshot(pids), time.perf_counter()
    outcomes = await asyncio.gather(*(b.allocate(f"tp{i}", TIMING, gpu="A10", region="us-east-1")
                                      for i in range(concurrency)), return_exceptions=True)
    alloc_s, alloc_cpu = time.perf_counter() - t0, cpu_used(cpu0, pids)
    failed = sum(isinstance(o, BaseException) for o in outcomes)
    calls: dict[str, int] = b.cloud.admin.call_counts().get("lambda", {})  # counted at the simulation
    histories = [await b.client.get_workflow_handle(allocation_workflow_id(f"tp{i}")).fetch_history()
                 for i in range(concurrency)]
    n_act = activity_count(histories[0])

    queue = TASK_QUEUE + "-bare"
    async with b.worker_process("bare", queue) as bare_pid:
        # One run first, so one-time costs (sandbox set-up, first imports) stay out of the figures,
        # as (a) already paid them for the gpuprov worker.
        await b.client.execute_workflow(BareWorkflow.run, n_act, id="bare-warmup", task_queue=queue)
        pids = {"worker": bare_pid, "temporal": b.temporal_pid, "client": os.getpid()}
        cpu0, t0 = cpu_snapshot(pids), time.perf_counter()
        await asyncio.gather(*(b.client.execute_workflow(BareWorkflow.run, n_act, id=f"bare-{i}",
                                                         task_queue=queue)
                               for i in range(concurrency)))
        bare_s, bare_cpu = time.perf_counter() - t0, cpu_used(cpu0, pids)
    alloc_rate, bare_rate = (concurrency - failed) / alloc_s, concurrency / bare_s
    return {"concurrency": concurrency, "failed": failed, "activities_per_allocation": n_act,
            "allocations_per_s": alloc_rate, "bare_workflows_per_s": bare_rate,
            "ratio": alloc_rate / bare_rate, "timings": activity_latencies(histories),
            "cloud_calls_per_allocation": {k: v / concurrency for k, v in sorted(calls.items())},
            "cpu_per_allocation": {k: v / concurrency for k, v in alloc_cpu.items()},
            "cpu_per_bare_workflow": {k: v / concurrency for k, v in bare_cpu.items()}}


def activity_latencies(histories: list[WorkflowHistory]) -> dict[str, dict[str, float]]:
    """Per activity type: median scheduled -> closed time (queueing included: the server writes
    a retried activity's Started event only when it closes) and retries summed over histories."""
    latency: dict[str, list[float]] = {}
    retries: dict[str, int] = {}
    for h in histories:
        scheduled: dict[int, tuple[str, float]] = {}
        for e in h.events:
            t = e.event_time.ToDatetime().timestamp()
            kind = e.WhichOneof("attributes")
            if kind == "activity_task_scheduled_event_attributes":
                scheduled[e.event_id] = (e.activity_task_scheduled_event_attributes.activity_type.name, t)
            elif kind == "activity_task_started_event_attributes":
                a = e.activity_task_started_event_attributes
                name = scheduled[a.scheduled_event_id][0]
                retries[name] = retries.get(name, 0) + a.attempt - 1
            elif kind in _CLOSED:
                name, t_sched = scheduled[getattr(e, kind).scheduled_event_id]
                latency.setdefault(name, []).append(t - t_sched)
    return {name: {"latency_s": statistics.median(values), "retries": retries.get(name, 0)}
            for name, values in latency.items()}


_CLOSED = ("activity_task_completed_event_attributes", "activity_task_failed_event_attributes",
           "activity_task_timed_out_event_attributes", "activity_task_canceled_event_attributes")

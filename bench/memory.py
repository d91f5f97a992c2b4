"""(d) Worker memory per open allocation: M allocations held in wait_running (the simulated cloud
does not finish booting their machines) on a fresh worker process; its VmRSS growth divided by M.
Then M more, and their growth divided by M: the first M also pay what the worker grows once to
serve that many at once (its database threads and their SQLite connections, each with its own page
cache), the next M only what each further open allocation holds. Also what the first M cost in CPU
while idle (polls, heartbeats), over a fixed window. Then all are cancelled (compensation
terminates their machines), so the run ends clean."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError

from bench.bare import BareHeldWorkflow
from bench.harness import TASK_QUEUE, Bench
from bench.procs import cpu_snapshot, cpu_used, rss_kb
from bench.worker_proc import HEAP_ENV
from messages import workflows as wf
from messages.allocation import AllocationInput, Timing
from messages.ids import allocation_workflow_id

TIMING = Timing()  # production: 2 s poll, 30 s heartbeat timeout
NEVER_BOOTS_S = 24 * 3600.0
PLACEMENT = {"gpu": "A10", "region": "us-east-1"}


async def holding(h: WorkflowHandle[Any, Any], activity_type: str) -> bool:
    """Has a worker picked up this workflow's `activity_type` activity (an allocation's wait_running,
    holding its adapter)?"""
    pending = (await h.describe()).raw_description.pending_activities
    started = PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    return any(a.activity_type.name == activity_type and a.state == started for a in pending)


async def all_holding(handles: list[WorkflowHandle[Any, Any]], activity_type: str, timeout_s: float) -> None:
    """Return once a worker has picked up every workflow's `activity_type` activity."""
    pending, deadline = list(handles), time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} of {len(handles)} workflows never reached {activity_type}")
        started = await asyncio.gather(*(holding(h, activity_type) for h in pending))
        pending = [h for h, ok in zip(pending, started, strict=True) if not ok]
        await asyncio.sleep(1)


async def run(b: Bench, *, open_allocations: int, window_s: float, settle_s: float = 0.0,
              timeout_s: float = 600) -> dict[str, Any]:
    m, queue = open_allocations, TASK_QUEUE + "-rss"
    b.cloud.admin.set_stock("gpu_1x_a10", "us-east-1", 2 * m + 10)

    async def booting(prefix: str) -> list[WorkflowHandle[Any, Any]]:
        """M allocations started and held in wait_running (their machines never finish booting)."""
        # The boot delay is read at create: only machines created from now on stay booting.
        b.cloud.admin.configure(boot_delay=NEVER_BOOTS_S)
        try:
            handles = [await b.client.start_workflow(
                wf.ALLOCATION.name, AllocationInput(request=b.request(f"{prefix}{i}", TIMING, **PLACEMENT)),
                id=allocation_workflow_id(f"{prefix}{i}"), task_queue=queue) for i in range(m)]
            await all_holding(handles, "wait_running", timeout_s)
        finally:
            b.cloud.admin.configure(boot_delay=b.boot_delay)
        return handles

    # A fresh worker: the throughput phase's peak would leave freed heap for these allocations to reuse.
    async with b.worker_process("gpuprov", queue) as pid:
        # One allocation to ready first: imports, sandbox and first-client costs are one-time,
        # not per allocation.
        await b.allocate("rss-warmup", TIMING, task_queue=queue, **PLACEMENT)
        rss0 = rss_kb(pid)
        heap = os.environ.get(HEAP_ENV)
        if heap:
            os.kill(pid, signal.SIGUSR1)
        handles = await booting("rss")
        # Boots of minutes are polled less often as they go on (activities/cloud.py, boot_polls):
        # the window opens once every allocation has been booting `settle_s`.
        await asyncio.sleep(settle_s)
        pids = {"worker": pid, "temporal": b.temporal_pid, "cloud": b.cloud.pid}
        cpu0 = cpu_snapshot(pids)
        await asyncio.sleep(window_s)  # steady state: every allocation polls and heartbeats
        idle, rss1 = cpu_used(cpu0, pids), rss_kb(pid)
        if heap:  # the first M's heap (bench.heap --per M)
            os.kill(pid, signal.SIGUSR1)
            await asyncio.sleep(5)  # written before the next M are started
        handles += await booting("rss-next")
        await asyncio.sleep(settle_s + window_s)  # measured as long after their start as the first M
        rss2 = rss_kb(pid)
        cancelled = await cancel_all(handles)
    return {"open": m, "rss_before_kb": rss0, "rss_open_kb": rss1, "rss_per_open_kb": (rss1 - rss0) / m,
            "rss_next_open_kb": rss2, "rss_per_next_open_kb": (rss2 - rss1) / m,
            "idle_ms_per_s": {k: 1000 * v / window_s / m for k, v in idle.items()}, "cancelled": cancelled}


# Activities an allocation completes before its wait_running (plan_allocation and create_instance, as
# its recorded histories show): the held bare workflow runs as many trivial ones before its hold.
ACTIVITIES_BEFORE_BOOT = 2


async def bare_floor(b: Bench, *, open_workflows: int, timeout_s: float = 600) -> dict[str, Any]:
    """(d)'s floor: the worker RSS per open bare workflow holding one heartbeating activity (bench.bare
    BareHeldWorkflow) in the same sandboxed runner with the same slots, on a fresh worker process,
    measured as `run` measures an open allocation."""
    m, queue = open_workflows, TASK_QUEUE + "-rss-bare"

    async def held(names: list[str]) -> list[WorkflowHandle[Any, Any]]:
        handles = [await b.client.start_workflow(BareHeldWorkflow.run, ACTIVITIES_BEFORE_BOOT, id=name,
                                                 task_queue=queue) for name in names]
        await all_holding(handles, "bench_held", timeout_s)
        return handles

    async with b.worker_process("bare", queue) as pid:
        await cancel_all(await held(["rss-bare-warmup"]))  # one-time costs first, as `run` does
        rss0 = rss_kb(pid)
        handles = await held([f"rss-bare-{i}" for i in range(m)])
        rss1 = rss_kb(pid)
        handles += await held([f"rss-bare-next-{i}" for i in range(m)])
        rss2 = rss_kb(pid)
        await cancel_all(handles)
    return {"open": m, "rss_before_kb": rss0, "rss_open_kb": rss1, "rss_per_open_kb": (rss1 - rss0) / m,
            "rss_next_open_kb": rss2, "rss_per_next_open_kb": (rss2 - rss1) / m}


async def cancel_all(handles: list[WorkflowHandle[Any, Any]], timeout_s: float = 180) -> int:
    """Cancel every allocation and wait until it closes (compensation terminates its machine);
    terminate any still open after the timeout. Returns how many closed as cancelled."""
    await asyncio.gather(*(h.cancel() for h in handles))
    results = {h: asyncio.ensure_future(h.result()) for h in handles}
    done, _ = await asyncio.wait(results.values(), timeout=timeout_s)
    for h, fut in results.items():
        if fut not in done:
            fut.cancel()
            with contextlib.suppress(RPCError):  # it may have closed meanwhile
                await h.terminate("bench cleanup: still open after cancel")
    return sum(isinstance(e := f.exception(), WorkflowFailureError) and isinstance(e.cause, CancelledError)
               for f in done)

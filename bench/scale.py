"""A thousand at once: N concurrent allocations to ready on one fresh worker process (simulated
Lambda, whose fixed-port machines each take a loopback address of the simulation's /20), then
terminated. Printed: how many failed, allocations per second, and the worker's peak RSS (VmHWM)
against its RSS before."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from bench.harness import TASK_QUEUE, Bench
from bench.procs import rss_kb
from bench.throughput import TIMING
from messages import workflows as wf
from messages.allocation import AllocationInput
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from workflows import client_calls

PLACEMENT = {"gpu": "A10", "region": "us-east-1"}
RELEASE_CONCURRENCY = 100
# Clients waiting on the `ready` update at once: the figure measures allocations in flight, watched
# by a few long polls (as some users' `--wait` would), not a thousand clients.
WATCHERS = 50
STALL_S = 180.0  # no allocation reached ready for this long: the run is stalled, not slow


def peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for pid {pid}")


async def run(b: Bench, *, allocations: int) -> dict[str, Any]:
    queue = TASK_QUEUE + "-scale"
    b.cloud.admin.set_stock("gpu_1x_a10", "us-east-1", allocations + 10)
    async with b.worker_process("gpuprov", queue) as pid:
        await b.allocate("scale-warmup", TIMING, task_queue=queue, **PLACEMENT)  # one-time costs first
        rss0 = rss_kb(pid)
        t0 = time.perf_counter()
        started = 0
        try:
            for i in range(allocations):  # every allocation in flight at once...
                request = b.request(f"sc{i}", TIMING, **PLACEMENT)
                async with asyncio.timeout(STALL_S):
                    await client_calls.start(b.client, wf.ALLOCATION, AllocationInput(request=request),
                                             workflow_id=allocation_workflow_id(f"sc{i}"), task_queue=queue)
                started += 1
        except TimeoutError:
            pass  # the server stopped taking starts: what started is watched, the rest count failed
        watchers = asyncio.Semaphore(WATCHERS)

        async def ready(i: int) -> None:  # ...and watched by a bounded number of long polls
            async with watchers:
                state = await client_calls.update(b.client, allocation_workflow_id(f"sc{i}"),
                                                  wf.ALLOCATION.ready)
            if state.phase != Phase.READY:
                raise RuntimeError(f"allocation sc{i} ended {state.phase}: {state.error}")

        watching = [asyncio.create_task(ready(i)) for i in range(started)]
        stalled = await _until_done_or_stalled(watching) or started < allocations
        elapsed = time.perf_counter() - t0
        why = [_failure(w) for w in watching] + [TimeoutError("never started")] * (allocations - started)
        peak = peak_rss_kb(pid)
        failed = [f for f in why if f is not None]
        gate = asyncio.Semaphore(RELEASE_CONCURRENCY)

        async def release(allocation_id: str) -> None:
            async with gate:
                await b.release(allocation_id)

        made = [f"sc{i}" for i, f in enumerate(why) if f is None]
        if not stalled:  # a stalled worker would not answer: the stack's teardown ends them all
            await asyncio.gather(*(release(a) for a in [*made, "scale-warmup"]), return_exceptions=True)
    return {"allocations": allocations, "failed": len(failed), "stalled": stalled,
            "first_failure": repr(failed[0])[:300] if failed else None, "seconds": elapsed,
            "per_s": (allocations - len(failed)) / elapsed, "rss_before_kb": rss0, "rss_peak_kb": peak}


def _failure(watch: asyncio.Task[None]) -> BaseException | None:
    """Why a watched allocation did not reach ready (None: it did)."""
    if not watch.done() or watch.cancelled():
        return TimeoutError("stalled")
    return watch.exception()


async def _until_done_or_stalled(tasks: list[asyncio.Task[None]]) -> bool:
    """Wait for every task; True (the rest cancelled) when none finished for STALL_S."""
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, timeout=STALL_S)
        if not done:
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            return True
    return False


def report(s: dict[str, Any]) -> list[str]:
    lines = [f"(scale) {s['allocations']} concurrent allocations on one worker: {s['failed']} failed "
             f"(target 0), {s['per_s']:.1f} allocations/s ({s['seconds']:.0f}s); worker RSS "
             f"{s['rss_before_kb'] / 1024:.0f} MB before, peak {s['rss_peak_kb'] / 1024:.0f} MB"]
    if s["stalled"]:
        lines.append(f"    STALLED: no allocation reached ready for {STALL_S:.0f}s; the rest counted failed")
    if s["first_failure"]:
        lines.append(f"    first failure: {s['first_failure']}")
    return lines

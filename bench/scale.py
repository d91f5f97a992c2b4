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

PLACEMENT = {"gpu": "A10", "region": "us-east-1"}
RELEASE_CONCURRENCY = 100


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
        outcomes = await asyncio.gather(*(b.allocate(f"sc{i}", TIMING, task_queue=queue, **PLACEMENT)
                                          for i in range(allocations)), return_exceptions=True)
        elapsed = time.perf_counter() - t0
        peak = peak_rss_kb(pid)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        gate = asyncio.Semaphore(RELEASE_CONCURRENCY)

        async def release(allocation_id: str) -> None:
            async with gate:
                await b.release(allocation_id)

        ready = [f"sc{i}" for i, o in enumerate(outcomes) if not isinstance(o, BaseException)]
        await asyncio.gather(*(release(a) for a in [*ready, "scale-warmup"]), return_exceptions=True)
    return {"allocations": allocations, "failed": len(failed),
            "first_failure": repr(failed[0])[:300] if failed else None, "seconds": elapsed,
            "per_s": (allocations - len(failed)) / elapsed, "rss_before_kb": rss0, "rss_peak_kb": peak}


def report(s: dict[str, Any]) -> list[str]:
    lines = [f"(scale) {s['allocations']} concurrent allocations on one worker: {s['failed']} failed "
             f"(target 0), {s['per_s']:.1f} allocations/s ({s['seconds']:.0f}s); worker RSS "
             f"{s['rss_before_kb'] / 1024:.0f} MB before, peak {s['rss_peak_kb'] / 1024:.0f} MB"]
    if s["first_failure"]:
        lines.append(f"    first failure: {s['first_failure']}")
    return lines

"""(capacity) Capacity memory across allocations, on the simulated Lambda: one region sold out — its
offers still list stock, every create there is refused (a `capacity` fault for ever) — and a second
region that works. Equal prices: the planner's order (price, then region name) tries the sold-out
us-east-1 before us-west-1, as a cheaper sold-out region would be. The two other Lambda regions have
no A10 stock, so they are not offered. Every create answers after `latency_s` (a real cloud's refusal
takes its API round trip too).

N allocations one after another, each released once ready (not timed), with the memory on, then with
it off (GPUPROV_CAPACITY_MEMORY for a worker process of each, each side on a connection of its own):
the create attempts each made and its time to ready. From the second allocation on, the memory's
side should make one attempt each (the remembered region tried last, never reached) where the other
makes two, and be faster by a refused create's round trip."""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from bench.harness import Bench
from fakeclouds import clouds
from fakeclouds.connect import ca_bundle, endpoint
from messages import workflows as wf
from messages.allocation import AllocationInput, AllocationState, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from store import connections as connection_store
from store.db import session_scope
from workflows import client_calls

TIMING = Timing(poll_interval_s=0.2, max_retry_interval_s=2)
SOLD_OUT, WORKS, UNOFFERED = "us-east-1", "us-west-1", ("us-south-1", "europe-central-1")
TYPE = "gpu_1x_a10"


def _connection(b: Bench, name: str) -> str:
    sim = clouds.facade("lambda")
    with session_scope(b.engine) as s:
        return connection_store.add_connection(
            s, b.deps.box, provider="lambda", name=name, endpoint=endpoint(b.cloud, "lambda"),
            ca_bundle=ca_bundle(b.cloud, "lambda"), credentials=sim.credentials(b.cloud.tokens["lambda"])).id


async def _one(b: Bench, allocation_id: str, connection_id: str,
               task_queue: str) -> tuple[AllocationState, float]:
    req = b.request(allocation_id, TIMING, gpu="A10", region=None)
    req = req.model_copy(update={"connection_id": connection_id})
    workflow_id = allocation_workflow_id(allocation_id)
    t0 = time.perf_counter()
    await client_calls.start(b.client, wf.ALLOCATION, AllocationInput(request=req), workflow_id=workflow_id,
                             task_queue=task_queue)
    state = await client_calls.update(b.client, workflow_id, wf.ALLOCATION.ready)
    elapsed = time.perf_counter() - t0
    if state.phase != Phase.READY:
        raise RuntimeError(f"allocation {allocation_id} ended {state.phase}: {state.error}")
    return state, elapsed


async def _side(b: Bench, memory: bool, allocations: int) -> dict[str, Any]:
    label = "on" if memory else "off"
    queue = f"gpuprov-bench-capacity-{label}"
    connection = _connection(b, f"bench-capacity-{label}")
    attempts: list[int] = []
    ready_s: list[float] = []
    notes: list[str] = []
    async with b.worker_process("gpuprov", queue, env={"GPUPROV_CAPACITY_MEMORY": "1" if memory else "0"}):
        for i in range(allocations):
            allocation_id = f"cap{label}{i}-{uuid.uuid4().hex[:6]}"
            state, elapsed = await _one(b, allocation_id, connection, queue)
            attempts.append(len(state.attempts))
            ready_s.append(elapsed)
            if i == 1:
                notes = list(state.notes)
            await b.release(allocation_id)
    later = slice(1, None)  # allocations 2..N: the first has nothing remembered yet
    return {"attempts": attempts, "ready_s": ready_s, "notes": notes,
            "mean_attempts_later": statistics.mean(attempts[later]),
            "median_ready_later_s": statistics.median(ready_s[later]),
            "first_attempts": attempts[0], "first_ready_s": ready_s[0]}


async def run(b: Bench, *, allocations: int = 20, latency_s: float = 0.5) -> dict[str, Any]:
    admin = b.cloud.admin
    admin.set_stock(TYPE, WORKS, allocations + 4)
    admin.set_stock(TYPE, SOLD_OUT, allocations + 4)  # listed as available: only the create refuses
    for region in UNOFFERED:
        admin.set_stock(TYPE, region, 0)
    admin.add_fault("lambda", "create", "capacity", times=-1, region=SOLD_OUT)
    if latency_s > 0:
        admin.add_fault("lambda", "create", "latency", times=-1, seconds=latency_s)
    try:
        on = await _side(b, True, allocations)
        off = await _side(b, False, allocations)
    finally:
        admin.clear_faults()
        admin.set_stock(TYPE, SOLD_OUT, 4)  # back to the simulation's default stock of the type
        admin.set_stock(TYPE, WORKS, 4)
        for region in UNOFFERED:
            admin.set_stock(TYPE, region, 4)
    return {"allocations": allocations, "latency_s": latency_s, "on": on, "off": off}


def report(x: dict[str, Any]) -> list[str]:
    on, off, n = x["on"], x["off"], x["allocations"]
    lines = [
        f"(capacity) capacity memory, simulated Lambda, {SOLD_OUT} sold out (offers listed, creates "
        f"refused), {WORKS} works, {x['latency_s'] * 1000:.0f} ms per create; "
        f"{n} allocations one after another:",
        f"    allocations 2-{n}: create attempts per allocation, mean: "
        f"memory on {on['mean_attempts_later']:.2f} | off {off['mean_attempts_later']:.2f} (goal: on = 1)",
        f"    allocations 2-{n}: time to ready, median: memory on {on['median_ready_later_s']:.2f}s"
        f" | off {off['median_ready_later_s']:.2f}s",
        f"    allocation 1: attempts on {on['first_attempts']} | off {off['first_attempts']}; "
        f"time to ready on {on['first_ready_s']:.2f}s | off {off['first_ready_s']:.2f}s",
    ]
    lines += [f"    note (memory on, allocation 2): {note}" for note in on["notes"] if "tried last" in note]
    return lines

"""A bench worker in its own process, so /proc gives its CPU and memory apart from the bench client.

    python -m bench.worker_proc gpuprov --target HOST:PORT --task-queue Q --db PATH --installation ID
    python -m bench.worker_proc bare --target HOST:PORT --task-queue Q

`gpuprov` is worker.build_worker() with the harness's ActivityDeps (same database, same key);
`bare` runs bench.bare's workflows in the same sandboxed runner as gpuprov's workflows.
The database key comes in GPUPROV_BENCH_FERNET_KEY, not argv (command lines are world-readable).
Prints "ready" once the worker runs; SIGTERM/SIGINT shut it down gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
from typing import Any

from temporalio.worker import Worker

import worker as worker_module
from activities.deps import ActivityDeps
from bench.bare import BareHeldWorkflow, BareWorkflow, held, trivial
from providers.endpoints import parse_prefixes
from settings import Settings
from store.db import make_engine
from store.secrets import SecretBox
from workflows.converter import connect_client, exit_after_client

KEY_ENV = "GPUPROV_BENCH_FERNET_KEY"
# Where the worker's memory goes: with this set to a directory, the worker traces Python allocations
# and writes a tracemalloc snapshot there on each SIGUSR1 (bench.memory sends one before and one
# after opening its allocations; `python -m bench.heap DIR` compares them).
HEAP_ENV = "GPUPROV_BENCH_HEAP_DIR"
# Both workers take as many workflow tasks at once as the deployment's (settings.workflow_task_slots;
# the bench's 400 here made 49 of 1,000 allocations at once fail). Activity slots are raised from the
# SDK's 100: an allocation holds one for its whole boot (wait_running), and hundreds boot at once here.
LIMITS: dict[str, Any] = {"max_concurrent_activities": 400}


async def main(args: argparse.Namespace) -> None:
    # A refused create is a figure's expected event (capacity memory's sold-out region), not news:
    # the SDK's per-failure warning with its traceback would bury the figures printed beside it.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)
    key = os.environ[KEY_ENV].encode()
    client = await connect_client(args.target, keys=[key])  # the harness's client encrypts with it too
    if args.kind == "gpuprov":
        deps = ActivityDeps(engine=make_engine(f"sqlite:///{args.db}"), box=SecretBox(key),
                            installation_id=args.installation, client=client,
                            capacity_memory=Settings().capacity_memory)  # GPUPROV_CAPACITY_MEMORY
        w: Worker = worker_module.build_worker(client, deps, task_queue=args.task_queue, **LIMITS)
        # The simulated cloud's endpoints, as the harness passes them (the same list the worker uses).
        deps.allowed_endpoints.extend(parse_prefixes(os.environ.get("GPUPROV_ALLOWED_ENDPOINTS", "")))
    else:
        w = Worker(client, task_queue=args.task_queue, workflows=[BareWorkflow, BareHeldWorkflow],
                   activities=[trivial, held],
                   workflow_runner=worker_module.workflow_runner(client.data_converter),
                   max_concurrent_workflow_tasks=Settings().workflow_task_slots, **LIMITS)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    if os.environ.get(HEAP_ENV):
        _trace_heap(os.environ[HEAP_ENV])
    try:
        async with w:
            worker_module.freeze_start_up()  # as the deployment's worker does (worker.serve)
            print("ready", flush=True)
            await stop.wait()
    finally:
        if args.kind == "gpuprov":  # as worker.py does: its adapters' CA files and SSH logins
            await deps.aclose()


def _trace_heap(directory: str) -> None:
    import tracemalloc

    # One frame by default: deeper tracing slows the worker past its workflow task timeouts at 200
    # open allocations (GPUPROV_BENCH_HEAP_FRAMES=6 with `--open 50` shows whole tracebacks).
    os.makedirs(directory, exist_ok=True)
    tracemalloc.start(int(os.environ.get("GPUPROV_BENCH_HEAP_FRAMES", "1")))
    taken = [0]

    def snapshot() -> None:
        # As the heap stands (what RSS pays for), then after a full collection: the difference is
        # garbage in reference cycles, held until the collector's next walk of its generation.
        taken[0] += 1
        tracemalloc.take_snapshot().dump(os.path.join(directory, f"heap-{taken[0]}.snap"))
        gc.collect()
        tracemalloc.take_snapshot().dump(os.path.join(directory, f"heap-{taken[0]}-collected.snap"))

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, snapshot)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.worker_proc")
    parser.add_argument("kind", choices=["gpuprov", "bare"])
    parser.add_argument("--target", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--db")
    parser.add_argument("--installation")
    asyncio.run(main(parser.parse_args()))
    exit_after_client(0)  # as worker.py: the SDK's threads would sometimes abort the teardown

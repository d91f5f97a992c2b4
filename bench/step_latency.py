"""(step) What one workflow step costs on the embedded dev server: a workflow of `steps` no-op
activities in sequence (bench/bare.py), milliseconds per activity, on a server started with the
project's flags (workflows/dev_server.FLAGS) beside one server per key a step depends on, that key at
Temporal's registered default — the transfer queue's read rate (`history.transferProcessorMaxPollRPS`,
20 per shard) and eager activity dispatch (`system.enableActivityEagerExecution`, false on a stock
server) — all running at once, their rounds interleaved, so load on the box hits each. Each step is an
activity task and a workflow task; every allocation pays it between its activities.

    python -m bench.step_latency [--rounds 10] [--steps 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from bench.bare import BareWorkflow, trivial
from bench.harness import TEMPORAL_BIN
from workflows import dev_server

STEPS = 20
# Each key a step depends on, and its registered default (the server's dynamicconfig constants).
TEMPORAL_DEFAULTS = {"history.transferProcessorMaxPollRPS": "20",
                     "system.enableActivityEagerExecution": "false"}


def flags_with(key: str, value: str) -> list[str]:
    """dev_server.FLAGS with the dynamic-config `key` (which they set) at `value` instead."""
    current = f"{key}={dev_server.dynamic_config()[key]}"
    return [f"{key}={value}" if flag == current else flag for flag in dev_server.FLAGS]


@asynccontextmanager
async def server(flags: list[str], folder: Path) -> AsyncIterator[Client]:
    """A dev server on `flags` with a worker of the bare workflow: its client."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN, dev_server_database_filename=str(folder / "temporal.db"),
        dev_server_extra_args=flags, dev_server_startup_timeout=dev_server.STARTUP_TIMEOUT,
        dev_server_log_level="error")
    async with env, Worker(env.client, task_queue="step", workflows=[BareWorkflow], activities=[trivial]):
        yield env.client


async def ms_per_step(client: Client, steps: int) -> float:
    t0 = time.perf_counter()
    await client.execute_workflow(BareWorkflow.run, steps, id=f"step-{uuid.uuid4().hex[:8]}",
                                  task_queue="step")
    return (time.perf_counter() - t0) * 1000 / steps


async def run(*, rounds: int, steps: int = STEPS) -> dict[str, Any]:
    sides = {"project": list(dev_server.FLAGS)}
    sides |= {key: flags_with(key, value) for key, value in TEMPORAL_DEFAULTS.items()}
    samples: dict[str, list[float]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(prefix="gpuprov-bench-step-") as tmp:
        async with AsyncExitStack() as stack:
            clients = {}
            for name, flags in sides.items():
                (Path(tmp) / name).mkdir()
                clients[name] = await stack.enter_async_context(server(flags, Path(tmp) / name))
            for client in clients.values():  # a first run each: imports, sticky caches
                await ms_per_step(client, steps)
            for _ in range(rounds):
                for name, client in clients.items():
                    samples[name].append(await ms_per_step(client, steps))
    medians = {name: statistics.median(samples[name]) for name in sides}
    return {"steps": steps, "rounds": rounds, "project_ms": medians.pop("project"), "default_ms": medians}


def report(r: dict[str, Any]) -> list[str]:
    against = "; ".join(f"{ms:.1f} ms with {key}={TEMPORAL_DEFAULTS[key]} ({r['project_ms'] / ms:.2f}x)"
                        for key, ms in r["default_ms"].items())
    return [f"(step) one workflow step (an activity, then the next workflow task; {r['steps']} in sequence, "
            f"median of {r['rounds']}): {r['project_ms']:.1f} ms on the project's dev server flags, against "
            f"Temporal's default of one key: {against}"]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.step_latency")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    for line in report(asyncio.run(run(rounds=args.rounds, steps=args.steps))):
        print(line)

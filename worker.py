"""The Temporal worker: every workflow and activity on the gpuprov task queue.

`python worker.py` connects to GPUPROV_TEMPORAL_ADDRESS and runs until SIGTERM/SIGINT,
then finishes in-flight activities (bounded) and exits.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.cloud import CloudActivities
from activities.connections import ConnectionActivities
from activities.deps import ActivityDeps
from activities.records import RecordActivities
from activities.ssh import SshActivities
from activities.watch import WatchActivities, start_all_watches
from workflows.allocation import AllocationWorkflow
from workflows.connect import ConnectWorkflow
from workflows.disconnect import DisconnectWorkflow
from workflows.legacy.allocate import AllocateWorkflow
from workflows.legacy.terminate import TerminateWorkflow
from workflows.watch import WatchWorkflow

# AllocateWorkflow and TerminateWorkflow stay for allocations an earlier version started.
WORKFLOWS: list[type] = [AllocationWorkflow, ConnectWorkflow, DisconnectWorkflow, WatchWorkflow,
                         AllocateWorkflow, TerminateWorkflow]

# Only pure model modules pass through the sandbox (imported once outside it, so pydantic classes
# are shared): the messages, the contract's models, pydantic. Everything with I/O stays out.
PASSTHROUGH_MODULES = ("messages", "providers.base", "providers.credentials", "providers.gpus",
                       "pydantic", "pydantic_core")

log = logging.getLogger("gpuprov.worker")


def activities_for(deps: ActivityDeps) -> list[Callable[..., Any]]:
    cloud, ssh, records = CloudActivities(deps), SshActivities(deps), RecordActivities(deps)
    conns = ConnectionActivities(deps)
    return [
        cloud.validate_allocation, cloud.plan_allocation, cloud.validate_request, cloud.plan_offers,
        cloud.create_instance, cloud.wait_running,
        cloud.terminate_and_verify,
        conns.verify_credentials, conns.save_connection, conns.begin_disconnect, conns.delete_connection,
        conns.terminate_allocation, conns.start_watch, WatchActivities(deps).watch_connection,
        ssh.wait_ssh, ssh.install_k3s, ssh.probe_gpus,
        records.record_allocation, records.record_status, records.load_instance,
        records.await_allocate_closed,
    ]


def workflow_runner() -> SandboxedWorkflowRunner:
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES))


def build_worker(client: Client, deps: ActivityDeps, *, task_queue: str | None = None,
                 workflows: Sequence[type] = WORKFLOWS, **options: Any) -> Worker:
    """The worker; `options` pass through to temporalio's Worker (e.g. concurrency limits)."""
    from settings import get_settings

    if deps.client is None:
        deps.client = client
    # Database activities are plain `def`s run on this pool (see activities/records.py).
    # The SDK flushes heartbeats every 0.8 x heartbeat timeout by default, leaving a loaded
    # worker little slack before the server declares the activity dead; flush more often.
    options.setdefault("max_heartbeat_throttle_interval", timedelta(seconds=3))
    options.setdefault("default_heartbeat_throttle_interval", timedelta(seconds=3))
    options.setdefault("activity_executor",
                       ThreadPoolExecutor(max_workers=options.get("max_concurrent_activities", 100)))
    return Worker(
        client,
        task_queue=task_queue or get_settings().task_queue,
        workflows=list(workflows),
        activities=activities_for(deps),
        workflow_runner=workflow_runner(),
        graceful_shutdown_timeout=timedelta(seconds=10),
        **options,
    )


async def run_worker(client: Client, deps: ActivityDeps, *, task_queue: str | None = None) -> None:
    """Run until cancelled (or until the worker is shut down)."""
    await build_worker(client, deps, task_queue=task_queue).run()


async def main() -> None:
    from settings import get_settings
    from store.migrate import upgrade
    from workflows.converter import connect_client

    s = get_settings()
    upgrade()  # every replica may be the first to start; migrations take turns
    client = await connect_client(s.temporal_address, s.temporal_namespace)
    worker_deps = ActivityDeps.from_settings()
    worker = build_worker(client, worker_deps, task_queue=s.task_queue)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        log.info("worker running on %s, task queue %s", s.temporal_address, s.task_queue)
        watched = await start_all_watches(client, worker_deps, s.task_queue)
        log.info("watching %d connection(s) every %gs", watched, s.watch_interval_s)
        await stop.wait()
        log.info("shutting down")
    # leaving the context manager calls worker.shutdown(): in-flight activities get the grace period


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(main())

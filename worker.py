"""The Temporal worker: every workflow and activity on the gpuprov task queue, and for each cloud
with a documented launch rate (`Capabilities.launches_per_s`: Lambda, Vast.ai) the create activity
on a queue of its own (`<task queue>-launch-<cloud>`) that Temporal dispatches at no more than that
rate across every worker — each adapter also paces its own process (providers/pacing.py).

`python worker.py` connects to GPUPROV_TEMPORAL_ADDRESS and runs until SIGTERM/SIGINT,
then finishes in-flight activities (bounded) and exits.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import hashlib
import logging
import signal
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from temporalio.converter import DataConverter
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

import logsafe
from activities.acceptance import AcceptanceActivities
from activities.cloud import CloudActivities
from activities.connections import ConnectionActivities
from activities.deps import ActivityDeps
from activities.fleet import FleetActivities
from activities.health import HealthActivities
from activities.jobs import JobActivities
from activities.policy import PolicyActivities
from activities.pools import PoolActivities
from activities.records import RecordActivities
from activities.ssh import SshActivities
from activities.sweep import SweepActivities
from activities.watch import WatchActivities, start_all_watches
from messages.health import HealthInput, HealthRecheckInput
from messages.ids import (
    HEALTH_RECHECK_SCHEDULE_ID,
    HEALTH_RECHECK_WORKFLOW_ID,
    HEALTH_SCHEDULE_ID,
    HEALTH_WORKFLOW_ID,
    SWEEP_SCHEDULE_ID,
    SWEEP_WORKFLOW_ID,
)
from messages.sweep import SweepInput
from providers import pacing, registry
from workflows import sandbox_runner, shared_code
from workflows.acceptance import AcceptanceWorkflow
from workflows.allocation import AllocationWorkflow, launch_task_queue
from workflows.connect import ConnectWorkflow
from workflows.disconnect import DisconnectWorkflow
from workflows.fleet_probe import FleetProbeWorkflow
from workflows.health import HealthRecheckWorkflow, HealthWorkflow
from workflows.job import JobWorkflow
from workflows.policy import PolicyWorkflow
from workflows.scale import ScaleWorkflow
from workflows.sweep import SweepWorkflow
from workflows.watch import WatchWorkflow

# The retired AllocateWorkflow and TerminateWorkflow are gone (workflows/README.md, "A rewrite"):
# migration 0023 refuses a database with a live instance still on one.
WORKFLOWS: list[type] = [AllocationWorkflow, ConnectWorkflow, DisconnectWorkflow, WatchWorkflow,
                         SweepWorkflow, HealthWorkflow, FleetProbeWorkflow, PolicyWorkflow, JobWorkflow,
                         ScaleWorkflow, HealthRecheckWorkflow, AcceptanceWorkflow]

# Only pure model modules pass through the sandbox (imported once outside it, so pydantic classes
# are shared): the messages, the contract's models, pydantic. Everything with I/O stays out.
PASSTHROUGH_MODULES = ("messages", "providers.base", "providers.credentials", "providers.gpus",
                       "pydantic", "pydantic_core")

log = logging.getLogger("gpuprov.worker")


def activities_for(deps: ActivityDeps) -> list[Callable[..., Any]]:
    cloud, ssh, records = CloudActivities(deps), SshActivities(deps), RecordActivities(deps)
    conns, sweep, health = ConnectionActivities(deps), SweepActivities(deps), HealthActivities(deps)
    jobs = JobActivities(deps)
    pools = PoolActivities(deps)
    acceptance = AcceptanceActivities(deps)
    return [
        cloud.validate_allocation, cloud.plan_allocation,
        cloud.create_instance, cloud.wait_running,
        cloud.terminate_and_verify,
        conns.verify_credentials, conns.save_connection, conns.begin_disconnect, conns.delete_connection,
        conns.terminate_allocation, conns.start_watch, WatchActivities(deps).watch_connection,
        ssh.wait_ssh, ssh.install_k3s, ssh.probe_gpus, ssh.set_up_machine,
        records.record_allocation,
        sweep.sweep_targets, sweep.list_owned, sweep.judge_machines, sweep.sweep_remove,
        health.health_targets, health.check_connection, health.record_health, health.degraded_connections,
        FleetActivities(deps).fleet_hosts, FleetActivities(deps).probe_fleet_host,
        PolicyActivities(deps).policy_facts, PolicyActivities(deps).policy_act,
        PolicyActivities(deps).record_policy_run,
        jobs.record_job, jobs.await_allocation_ready, jobs.run_job, jobs.admit_job, jobs.claim_pool_machine,
        jobs.await_machine_end, jobs.signal_job,
        pools.observe_pool, pools.start_pool_machine, pools.record_pool, pools.forget_pool,
        acceptance.plan_acceptance, acceptance.check_machine, acceptance.await_allocation_phase,
        acceptance.leftovers, acceptance.record_acceptance,
    ]


ROOT = Path(__file__).resolve().parent


@functools.cache
def build_id(root: Path = ROOT) -> str:
    """The build id the server keeps with this worker's pollers: a digest of the source of the
    workflow code and the messages it replays (workflows/, messages/), which is what decides whether
    a history replays. Temporal's default, a digest of the bytecode of every loaded module (~1,400
    here), made each worker's construction cost 0.31 CPU-s instead of 0.11 (measured side by side);
    the suite and `gpuprov dev` start dozens. (Worker versioning is not used: the id only tells an
    operator which code ran.)"""
    digest = hashlib.sha256()
    for package in ("workflows", "messages"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return f"gpuprov-{digest.hexdigest()[:16]}"


def workflow_runner(converter: DataConverter | None = None) -> SandboxedWorkflowRunner:
    """The sandboxed runner; given the worker's data converter, payload contexts are answered
    outside the sandbox when that converter ignores them (workflows/sandbox_runner.py)."""
    shared_code.install()  # every run's fresh import of a workflow module shares its code objects
    # ... and the sandbox's glue code is compiled once (workflows/sandbox_runner.py)
    return sandbox_runner.runner(SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH_MODULES),
                                 converter)


class GpuprovWorker(Worker):
    """The main Worker, which also runs (and shuts down) the launch-queue Workers beside it: `async
    with`, `run()` and `shutdown()` cover them all, so callers handle one worker."""

    def __init__(self, client: Client, *, launch_workers: Sequence[Worker] = (), **config: Any) -> None:
        super().__init__(client, **config)
        self.launch_workers = list(launch_workers)

    async def run(self) -> None:
        tasks = [asyncio.create_task(super().run()),
                 *(asyncio.create_task(w.run()) for w in self.launch_workers)]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)  # one stopped or failed: all stop
        finally:
            await asyncio.gather(self.shutdown(), return_exceptions=True)
            await asyncio.wait(tasks)
        failed = [e for t in tasks if not t.cancelled() and (e := t.exception()) is not None]
        if failed:
            raise failed[0]  # after every worker has stopped

    async def shutdown(self) -> None:
        await asyncio.gather(super().shutdown(), *(w.shutdown() for w in self.launch_workers))


def launch_rates(time_scale: float | None = None) -> dict[str, float | None]:
    """Cloud -> launches per second its launch queue is dispatched at, for every cloud that documents
    a launch rate, scaled like the simulated clouds' windows (`GPUPROV_CLOUD_TIME_SCALE`). At scale 0
    (pacing off) the queue still has its worker, unlimited (None): the workflow sends creates there."""
    scale = pacing.time_scale() if time_scale is None else time_scale
    rates: dict[str, float | None] = {}
    for cloud in registry.known():
        try:
            rate = registry.capabilities(cloud).launches_per_s
        except Exception:  # noqa: BLE001 — an adapter that cannot load here launches nowhere anyway
            continue
        if rate:
            rates[cloud] = rate / scale if scale > 0 else None
    return rates


def build_worker(client: Client, deps: ActivityDeps, *, task_queue: str | None = None,
                 workflows: Sequence[type] = WORKFLOWS, **options: Any) -> GpuprovWorker:
    """The worker; `options` pass through to temporalio's Worker (e.g. concurrency limits)."""
    from settings import get_settings

    if deps.client is None:
        deps.client = client
    queue = task_queue or get_settings().task_queue
    # Database activities are plain `def`s run on this pool (see activities/records.py).
    # The SDK flushes heartbeats every 0.8 x heartbeat timeout by default, leaving a loaded
    # worker little slack before the server declares the activity dead; flush more often.
    options.setdefault("max_heartbeat_throttle_interval", timedelta(seconds=3))
    options.setdefault("default_heartbeat_throttle_interval", timedelta(seconds=3))
    options.setdefault("max_cached_workflows", get_settings().workflow_cache)
    options.setdefault("max_concurrent_workflow_tasks", get_settings().workflow_task_slots)
    options.setdefault("build_id", build_id())
    options.setdefault("activity_executor",
                       ThreadPoolExecutor(max_workers=options.get("max_concurrent_activities", 100)))
    # The launch workers stop as the main one does: a caller that shuts down at once (a test's dead
    # worker) must not leave a create running for another 10 s on the launch queue.
    options.setdefault("graceful_shutdown_timeout", timedelta(seconds=10))
    # Temporal's task-queue rate limit is the server's, shared by every worker polling the queue.
    launch_workers = [
        Worker(client, task_queue=launch_task_queue(queue, cloud),
               activities=[CloudActivities(deps).create_instance], max_task_queue_activities_per_second=rate,
               graceful_shutdown_timeout=options["graceful_shutdown_timeout"], build_id=options["build_id"],
               max_heartbeat_throttle_interval=options["max_heartbeat_throttle_interval"],
               default_heartbeat_throttle_interval=options["default_heartbeat_throttle_interval"])
        for cloud, rate in launch_rates().items()]
    return GpuprovWorker(
        client,
        launch_workers=launch_workers,
        task_queue=queue,
        workflows=list(workflows),
        activities=activities_for(deps),
        workflow_runner=workflow_runner(client.data_converter),
        **options,
    )


async def run_worker(client: Client, deps: ActivityDeps, *, task_queue: str | None = None) -> None:
    """Run until cancelled (or until the worker is shut down)."""
    await build_worker(client, deps, task_queue=task_queue).run()


# --------------------------------------------------------------------------- the sweep's Schedule


def _every(action: ScheduleActionStartWorkflow, interval_s: float) -> Schedule:
    """`action` every `interval_s`, skipped while the previous run still goes."""
    return Schedule(action=action,
                    spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=interval_s))]),
                    policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP))


def sweep_schedule(*, task_queue: str, interval_s: float, grace_s: float) -> Schedule:
    """Every `interval_s`, one SweepWorkflow run; a run still going when the next is due makes it skip."""
    return _every(ScheduleActionStartWorkflow(
        SweepWorkflow.run, SweepInput(grace_s=grace_s), id=SWEEP_WORKFLOW_ID, task_queue=task_queue,
        execution_timeout=timedelta(hours=2)), interval_s)


async def ensure_sweep_schedule(client: Client, *, task_queue: str, interval_s: float, grace_s: float,
                                schedule_id: str = SWEEP_SCHEDULE_ID) -> ScheduleHandle:
    """The sweep's Schedule, created once by whichever worker starts first (a second start, on any
    replica, finds it); updated when this worker's interval, grace period or task queue differ."""
    wanted = sweep_schedule(task_queue=task_queue, interval_s=interval_s, grace_s=grace_s)
    return await ensure_schedule(client, schedule_id, wanted, SweepInput,
                                 f"every {interval_s}s, grace {grace_s}s, task queue {task_queue}")


async def ensure_schedule(client: Client, schedule_id: str, wanted: Schedule, input_type: type,
                          what: str) -> ScheduleHandle:
    """Schedule `schedule_id` as `wanted`: created if absent; else updated when its workflow, task
    queue, id, interval or input (an `input_type`) differ, an operator's pause (and note) kept."""
    try:
        return await client.create_schedule(schedule_id, wanted)
    except ScheduleAlreadyRunningError:
        pass
    handle = client.get_schedule_handle(schedule_id)

    async def update(current: ScheduleUpdateInput) -> ScheduleUpdate | None:
        if await _same_schedule(client, current.description.schedule, wanted, input_type):
            return None
        log.info("updating schedule %s: %s", schedule_id, what)
        wanted.state = current.description.schedule.state  # an operator's pause (and note) stays
        return ScheduleUpdate(schedule=wanted)

    await handle.update(update)
    return handle


async def _same_schedule(client: Client, have: Schedule, want: Schedule, input_type: type) -> bool:
    action, wanted = have.action, want.action
    start = ScheduleActionStartWorkflow
    if not (isinstance(action, start) and isinstance(wanted, start)):
        return False
    if (action.workflow, action.task_queue, action.id) != (wanted.workflow, wanted.task_queue, wanted.id):
        return False
    if [i.every for i in have.spec.intervals] != [i.every for i in want.spec.intervals]:
        return False
    try:
        args = await client.data_converter.decode(list(action.args), [input_type])  # type: ignore[arg-type]
    except Exception:
        return False  # an input this version cannot read: replace it
    return args == list(wanted.args)


# --------------------------------------------------------------------------- the health check's Schedule


def health_schedule(*, task_queue: str, interval_s: float) -> Schedule:
    """Every `interval_s`, one HealthWorkflow run (verify each connected cloud, record the answers);
    a run still going when the next is due makes it skip. A run is bounded (execution timeout), so
    one left waiting for a worker that is gone does not keep skipping every later one."""
    return _every(ScheduleActionStartWorkflow(
        HealthWorkflow.run, HealthInput(), id=HEALTH_WORKFLOW_ID, task_queue=task_queue,
        execution_timeout=timedelta(seconds=max(120.0, interval_s))), interval_s)


async def ensure_health_schedule(client: Client, *, task_queue: str, interval_s: float,
                                 schedule_id: str = HEALTH_SCHEDULE_ID) -> ScheduleHandle:
    """The health check's Schedule, kept like the sweep's (one, whichever worker starts first)."""
    wanted = health_schedule(task_queue=task_queue, interval_s=interval_s)
    return await ensure_schedule(client, schedule_id, wanted, HealthInput,
                                 f"every {interval_s}s, task queue {task_queue}")


def health_recheck_schedule(*, task_queue: str, interval_s: float) -> Schedule:
    """Every `interval_s`, one HealthRecheckWorkflow run: the degraded connections verified again
    (none degraded: one database read). Skips while a run is still going, bounded like the check's."""
    return _every(ScheduleActionStartWorkflow(
        HealthRecheckWorkflow.run, HealthRecheckInput(), id=HEALTH_RECHECK_WORKFLOW_ID,
        task_queue=task_queue, execution_timeout=timedelta(seconds=max(120.0, interval_s))), interval_s)


async def ensure_health_recheck_schedule(client: Client, *, task_queue: str, interval_s: float,
                                         schedule_id: str = HEALTH_RECHECK_SCHEDULE_ID) -> ScheduleHandle:
    """The degraded connections' re-check Schedule, kept like the health check's."""
    wanted = health_recheck_schedule(task_queue=task_queue, interval_s=interval_s)
    return await ensure_schedule(client, schedule_id, wanted, HealthRecheckInput,
                                 f"every {interval_s}s, task queue {task_queue}")


def freeze_start_up() -> None:
    """Move what start-up made (temporalio, every adapter and its SDK, the workflows' modules) out of
    the garbage collector's full walks. Each full collection walks every tracked object: on this
    heap 100-210 ms, eight of them in one (b) run of 200 allocations, each stalling every workflow
    task and activity in flight. What the work allocates afterwards is still collected. (The API
    does the same at its start: api/frozen_heap.py.)"""
    gc.collect()
    gc.freeze()


async def serve(client: Client, deps: ActivityDeps, s: Any, stop: asyncio.Event,
                started: asyncio.Event | None = None) -> None:
    """Keep the sweep's and the health check's Schedules, then run the worker until `stop` is set
    (`started` is set once it runs). `s`: the Settings."""
    await ensure_sweep_schedule(client, task_queue=s.task_queue, interval_s=s.sweep_interval_s,
                                grace_s=s.sweep_grace_s)
    await ensure_health_schedule(client, task_queue=s.task_queue, interval_s=s.health_interval_s)
    await ensure_health_recheck_schedule(client, task_queue=s.task_queue, interval_s=s.health_recheck_s)
    sticky = timedelta(seconds=s.sticky_timeout_s)
    async with build_worker(client, deps, task_queue=s.task_queue,
                            sticky_queue_schedule_to_start_timeout=sticky):
        log.info("worker running on %s, task queue %s", s.temporal_address, s.task_queue)
        watched = await start_all_watches(client, deps, s.task_queue)
        log.info("watching %d connection(s) every %gs", watched, deps.watch_interval_s)
        freeze_start_up()
        if started is not None:
            started.set()
        await stop.wait()
        log.info("shutting down")
    # leaving the context manager calls worker.shutdown(): in-flight activities get the grace period


async def serve_private(client: Client, deps: ActivityDeps, task_queue: str, stop: asyncio.Event) -> None:
    """A worker on `task_queue` alone: no Schedules kept, no watches started — the deployment's own
    workers do those. The acceptance runner starts one (and SIGKILLs it) for its worker-killed step."""
    # It is there to be killed: its workflows wait only a second on its sticky queue afterwards (not
    # Temporal's 10 s) before the worker started in its place takes them.
    async with build_worker(client, deps, task_queue=task_queue,
                            sticky_queue_schedule_to_start_timeout=timedelta(seconds=1)):
        log.info("private worker running on task queue %s", task_queue)
        freeze_start_up()
        await stop.wait()


async def main(private_queue: str | None = None) -> None:
    from sqlmodel import Session

    from activities.deps import share_pacing
    from settings import get_settings, private_home
    from store import spend
    from store.migrate import upgrade
    from workflows.converter import connect_client

    s = get_settings()
    private_home(s.home)
    upgrade()  # every replica may be the first to start; migrations take turns
    deps = ActivityDeps.from_settings()
    share_pacing(s.home, deps.engine)  # a key's budget, shared with the host's and other hosts' processes
    with Session(deps.engine) as session:
        # Ends written by a process from before migration 0031 (an upgrade's overlap) into spend_day.
        spend.roll_up_closed(session)
    if private_queue is None and s.worker_metrics_port:
        # before the client: the SDK's Runtime
        serve_metrics(s.worker_metrics_port, s.task_queue, addr=str(s.worker_metrics_addr), token=s.api_token)
    # The payload codec's keys are the secret store's: the API, reading the same store, decodes them.
    client = await connect_client(s.temporal_address, s.temporal_namespace, keys=deps.box.keys)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        if private_queue is not None:
            await serve_private(client, deps, private_queue, stop)
        else:
            await serve(client, deps, s, stop)
    finally:
        await deps.aclose()


def serve_metrics(port: int, task_queue: str, *, addr: str = "127.0.0.1", token: str | None = None) -> None:
    """The worker's /metrics on `addr`:`port` (README: Metrics): gpuprov's series and the Temporal
    SDK's, whose Runtime (made here, the default of every client made after) records into a buffer.
    Off loopback, only for the admin `token` (none: MetricsAddressError, before anything starts)."""
    from temporalio.runtime import Runtime

    from activities import metrics
    from activities.metrics_http import guard_for
    from activities.temporal_metrics import TemporalSdkMetrics, buffered_runtime

    guard = guard_for(addr, token)
    runtime, buffer = buffered_runtime()
    Runtime.set_default(runtime)
    queues = [task_queue, *(launch_task_queue(task_queue, cloud) for cloud in launch_rates())]
    sdk = TemporalSdkMetrics(buffer, queues)
    metrics.serve(port, also=sdk, addr=addr, token=guard)
    threading.Thread(target=sdk.drain_forever, args=(threading.Event(),), name="gpuprov-sdk-metrics",
                     daemon=True).start()
    log.info("metrics on http://%s:%d/metrics%s", addr, port, " (admin token)" if guard else "")


def private_queue_arg(argv: Sequence[str]) -> str | None:
    """`python worker.py --private-queue Q`: the queue of a private worker (serve_private), else None."""
    if not argv:
        return None
    if len(argv) == 2 and argv[0] == "--private-queue" and argv[1].startswith("gpuprov-acceptance-"):
        return argv[1]
    raise SystemExit("usage: python worker.py [--private-queue gpuprov-acceptance-<run>]")


if __name__ == "__main__":
    import sys

    queue = private_queue_arg(sys.argv[1:])
    logsafe.configure(logging.INFO)  # exception messages withheld: they may hold input
    asyncio.run(main(queue))
    from workflows.converter import exit_after_client

    exit_after_client(0)  # shut down cleanly: no teardown left for the SDK's threads to abort

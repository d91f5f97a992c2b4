"""The worker keeps one Temporal Schedule, `gpuprov-sweep`, and what it starts sweeps."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleHandle
from temporalio.service import RPCError

from activities.deps import ActivityDeps
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.ids import SWEEP_SCHEDULE_ID, SWEEP_WORKFLOW_ID
from messages.sweep import SweepInput
from settings import Settings
from store.models import SweepAction
from tests.eventually import eventually
from tests.sweep.conftest import TASK_QUEUE, actions, alive, plant
from worker import serve

# The queue `worker_started` serves: not the session sweep worker's (tests/sweep/conftest.py), which
# may be running in this process already: Temporal refuses two workers on one queue in a process.
SERVE_QUEUE = f"{TASK_QUEUE}-serve"


@asynccontextmanager
async def worker_started(client: Client, deps: ActivityDeps, **settings: Any) -> AsyncIterator[None]:
    """What `python worker.py` does after connecting (worker.main -> serve), until the block ends.
    Serving, it has frozen start-up's heap (worker.freeze_start_up; tests/api/test_start_up_frozen.py
    checks what freezing does)."""
    gc.unfreeze()  # what an earlier test in this process froze
    stop, started = asyncio.Event(), asyncio.Event()
    s = Settings(task_queue=SERVE_QUEUE, **settings)
    task = asyncio.create_task(serve(client, deps, s, stop, started))
    try:
        async with asyncio.timeout(60):
            waiting = asyncio.create_task(started.wait())
            await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
        if task.done():
            task.result()  # serve failed: raise why
        assert gc.get_freeze_count() > 10_000, "serve() did not freeze start-up's heap"
        yield
    finally:
        stop.set()
        await task


async def described(handle: ScheduleHandle) -> tuple[timedelta, SweepInput, str]:
    schedule = (await handle.describe()).schedule
    action = schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    assert (action.workflow, action.id) == (wf.SWEEP.name, SWEEP_WORKFLOW_ID)
    [inp] = await handle._client.data_converter.decode(list(action.args), [SweepInput])  # type: ignore[arg-type]
    [interval] = schedule.spec.intervals
    return interval.every, inp, action.task_queue


async def schedules_named(client: Client, schedule_id: str) -> list[str]:
    return [s.id async for s in await client.list_schedules() if s.id == schedule_id]


async def test_the_worker_keeps_one_sweep_schedule_that_sweeps(
        temporal_client: Client, sweep_deps: ActivityDeps, sim: FakeCloudServer,
        connect: Callable[[str], str], sweep_engine: sa.Engine) -> None:
    handle = temporal_client.get_schedule_handle(SWEEP_SCHEDULE_ID)
    try:
        async with worker_started(temporal_client, sweep_deps, sweep_interval_s=3600, sweep_grace_s=900):
            every, inp, queue = await described(handle)
            assert (every, inp.grace_s, queue) == (timedelta(hours=1), 900, SERVE_QUEUE)
        assert await eventually(lambda: schedules_named(temporal_client, SWEEP_SCHEDULE_ID), within=60,
                                what="the sweep schedule listed")
        await handle.pause(note="an operator's pause")
        # The session's dev server is shared: worker processes of earlier tests (crash, deploy,
        # lifecycle) kept this same schedule on their own task queues, and an interval schedule fires
        # on wall-clock multiples of its interval. A run it started then waits for a worker that is
        # gone, and with overlap SKIP every later run is skipped. Clear such runs while paused.
        for running in (await handle.describe()).info.running_actions:
            with contextlib.suppress(RPCError):  # it may have ended meanwhile
                await temporal_client.get_workflow_handle(running.workflow_id).terminate(
                    "a sweep left running by an earlier test's worker")

        # A second start (another replica, or a restart with new settings): the same one schedule,
        # updated to its interval and grace period, still paused; unpaused, it sweeps every second.
        grace = 2.0
        async with worker_started(temporal_client, sweep_deps, sweep_interval_s=1, sweep_grace_s=grace):
            every, inp, queue = await described(handle)
            assert (every, inp.grace_s, queue) == (timedelta(seconds=1), grace, SERVE_QUEUE)
            assert (await handle.describe()).schedule.state.paused
            assert await schedules_named(temporal_client, SWEEP_SCHEDULE_ID) == [SWEEP_SCHEDULE_ID]
            await handle.unpause()

            connect("local")
            ref = await plant(sim, "local")  # an orphan: our tag, no allocation

            async def removed() -> list[SweepAction]:
                return [a for a in actions(sweep_engine) if a.instance_id == ref.instance_id]

            [action] = await eventually(removed, within=120, what="the scheduled sweep to remove the orphan")
        assert not await alive(sim, ref.instance_id)
        assert action.sweep_id.startswith(SWEEP_WORKFLOW_ID) and action.verdict == "orphan"
        assert action.first_seen is not None
        waited = action.at.replace(tzinfo=UTC) - action.first_seen.replace(tzinfo=UTC)
        assert waited >= timedelta(seconds=grace)
        assert (await handle.describe()).info.num_actions >= 2
        assert action.at.replace(tzinfo=UTC) <= datetime.now(UTC)
    finally:
        await handle.delete()

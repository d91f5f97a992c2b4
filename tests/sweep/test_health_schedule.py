"""The worker keeps one Temporal Schedule, `gpuprov-health`, that starts HealthWorkflow every
GPUPROV_HEALTH_INTERVAL_S (a restart with another interval updates it)."""

from __future__ import annotations

import contextlib
from datetime import timedelta

from temporalio.client import Client, ScheduleActionStartWorkflow, ScheduleHandle
from temporalio.service import RPCError

from activities.deps import ActivityDeps
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.ids import (
    HEALTH_RECHECK_SCHEDULE_ID,
    HEALTH_RECHECK_WORKFLOW_ID,
    HEALTH_SCHEDULE_ID,
    HEALTH_WORKFLOW_ID,
    SWEEP_SCHEDULE_ID,
)
from tests.sweep.test_schedule import SERVE_QUEUE, schedules_named, worker_started


async def described(handle: ScheduleHandle) -> tuple[str, str, str, timedelta]:
    schedule = (await handle.describe()).schedule
    action = schedule.action
    assert isinstance(action, ScheduleActionStartWorkflow)
    [interval] = schedule.spec.intervals
    return action.workflow, action.id, action.task_queue, interval.every


async def test_the_worker_keeps_one_health_schedule(temporal_client: Client, sweep_deps: ActivityDeps,
                                                   sim: FakeCloudServer) -> None:
    handle = temporal_client.get_schedule_handle(HEALTH_SCHEDULE_ID)
    recheck = temporal_client.get_schedule_handle(HEALTH_RECHECK_SCHEDULE_ID)
    sweep_existed = bool(await schedules_named(temporal_client, SWEEP_SCHEDULE_ID))
    try:
        async with worker_started(temporal_client, sweep_deps, health_interval_s=3600, sweep_interval_s=3600):
            assert await described(handle) == (wf.HEALTH.name, HEALTH_WORKFLOW_ID, SERVE_QUEUE,
                                               timedelta(hours=1))
        async with worker_started(temporal_client, sweep_deps, health_interval_s=1800, sweep_interval_s=3600):
            assert (await described(handle))[3] == timedelta(minutes=30)
            assert await schedules_named(temporal_client, HEALTH_SCHEDULE_ID) == [HEALTH_SCHEDULE_ID]
        # The degraded connections' re-check: its own, shorter Schedule, kept the same way.
        async with worker_started(temporal_client, sweep_deps, health_recheck_s=45, sweep_interval_s=3600):
            assert await described(recheck) == (wf.HEALTH_RECHECK.name, HEALTH_RECHECK_WORKFLOW_ID,
                                                SERVE_QUEUE, timedelta(seconds=45))
            assert await schedules_named(temporal_client, HEALTH_RECHECK_SCHEDULE_ID) == [
                HEALTH_RECHECK_SCHEDULE_ID]
    finally:
        await handle.delete()
        with contextlib.suppress(RPCError):
            await recheck.delete()
        if not sweep_existed:  # the sweep's, made by these worker starts: not left firing for later tests
            try:
                await temporal_client.get_schedule_handle(SWEEP_SCHEDULE_ID).delete()
            except RPCError:
                pass

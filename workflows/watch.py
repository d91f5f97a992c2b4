"""WatchWorkflow: one poller per connection. Every interval it lists the machines the connection
holds and signals each ready allocation whose machine the cloud reports gone, preempted or broken
(`machine_lost`); the allocation records the reason and cleans up. Started when a connection is
saved (and for every connection when a worker starts); ends when the connection is removed."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from messages import activities as acts
from messages import workflows as wf
from messages.watch import WatchInput, WatchRequest
from workflows import retries
from workflows.calls import call


@workflow.defn(name=wf.WATCH.name)
class WatchWorkflow:
    def __init__(self) -> None:
        self._stop = False

    @workflow.signal(name=wf.WATCH.stop.name)
    def stop(self) -> None:
        self._stop = True

    @workflow.run
    async def run(self, req: WatchRequest) -> None:
        for _ in range(req.rounds_per_run):
            try:
                report = await call(
                    acts.WATCH_CONNECTION, WatchInput(connection_id=req.connection_id),
                    start_to_close_timeout=timedelta(seconds=max(60.0, req.interval_s)),
                    heartbeat_timeout=timedelta(seconds=30), retry_policy=retries.NEVER)
            except ActivityError:
                report = None  # the cloud did not answer: the next round asks again
            if (report is not None and not report.connection_found) or self._stop:
                return
            try:
                await workflow.wait_condition(lambda: self._stop, timeout=timedelta(seconds=req.interval_s))
                return
            except TimeoutError:
                pass
        workflow.continue_as_new(req)

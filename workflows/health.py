"""HealthWorkflow: is each connected cloud still answering? Started by the Temporal Schedule
`gpuprov-health` that the worker keeps (worker.py, every GPUPROV_HEALTH_INTERVAL_S), or by hand.

    connected connections ─► verify() each, at once (an activity each, bounded by verify_timeout_s)
                          ─► record every answer on its connection: healthy, or degraded with the
                             reason; when it was asked; how long verify took
    SSH fleets            ─► meanwhile, FleetProbeWorkflow for each (a child), under the fleet's
                             latest probe id: each host's answer is stored as on save, so a
                             fleet's status (reachable hosts, GPUs, a changed host key) is never
                             older than one interval

Two more ways a check runs sooner: once a connection is saved, ConnectWorkflow's start_watch
activity starts a one-off run of it alone (so it never reads `pending` for an interval); and
HealthRecheckWorkflow, on its own shorter Schedule (`gpuprov-health-recheck`, every
GPUPROV_HEALTH_RECHECK_S), verifies again only the
connections found degraded (a recovered cloud reads healthy within that, not a whole interval).

What `GET /api/compute/providers` shows is read from those columns: no cloud is called while the
page loads. A verify that fails, or does not answer in time, is an answer (degraded), not a
failure of the run: one slow cloud never holds back the others' records.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ChildWorkflowError

from messages import activities as acts
from messages import workflows as wf
from messages.allocation import CloudTarget
from messages.fleet import FleetProbeRequest, FleetProbeResult
from messages.health import (
    CheckInput,
    HealthCheck,
    HealthInput,
    HealthRecheckInput,
    HealthSummary,
    HealthTargetsInput,
    RecordHealthInput,
)
from messages.ids import fleet_reprobe_workflow_id, health_recheck_child_id
from workflows import retries
from workflows.calls import call, child
from workflows.failures import failure_reason


@workflow.defn(name=wf.HEALTH.name)
class HealthWorkflow:
    @workflow.run
    async def run(self, inp: HealthInput) -> HealthSummary:
        found = await call(acts.HEALTH_TARGETS, HealthTargetsInput(connection_ids=inp.connection_ids,
                                                                   fleet_ids=inp.fleet_ids),
                           start_to_close_timeout=timedelta(seconds=30), retry_policy=retries.DATABASE)
        probes = asyncio.gather(*(self._probe(f) for f in found.fleets))
        checks = await asyncio.gather(*(self._check(t, inp.verify_timeout_s) for t in found.targets))
        if checks:
            await call(acts.RECORD_HEALTH, RecordHealthInput(checks=list(checks)),
                       start_to_close_timeout=timedelta(seconds=30), retry_policy=retries.DATABASE)
        probed = [p for p in await probes if p is not None]
        return HealthSummary(checked=list(checks), probed=probed)

    async def _probe(self, req: FleetProbeRequest) -> FleetProbeResult | None:
        """Re-probe one fleet; its failure (e.g. the fleet deleted mid-run) is logged, never this
        run's: the other fleets and clouds are recorded all the same."""
        try:
            result: FleetProbeResult = await child(
                wf.FLEET_PROBE, req, id=fleet_reprobe_workflow_id(req.fleet_id, workflow.info().run_id))
        except ChildWorkflowError as e:
            workflow.logger.warning("re-probe of fleet %s failed: %s", req.fleet_id, failure_reason(e))
            return None
        return result

    async def _check(self, target: CloudTarget, timeout_s: float) -> HealthCheck:
        try:
            return await call(acts.CHECK_CONNECTION, CheckInput(target=target, timeout_s=timeout_s),
                              # verify is bounded inside the activity; this bounds the activity itself
                              start_to_close_timeout=timedelta(seconds=timeout_s + 15),
                              retry_policy=retries.ONCE_MORE)
        except ActivityError as e:
            return HealthCheck(connection_id=target.connection_id, ok=False,
                               reason=f"health check failed: {failure_reason(e)}",
                               checked_at=workflow.now().isoformat())


@workflow.defn(name=wf.HEALTH_RECHECK.name)
class HealthRecheckWorkflow:
    """The degraded connections verified again (a HealthWorkflow child over just those, no fleet
    re-probe); none degraded: one read, nothing asked of any cloud."""

    @workflow.run
    async def run(self, inp: HealthRecheckInput) -> HealthSummary:
        found = await call(acts.DEGRADED_CONNECTIONS, inp, start_to_close_timeout=timedelta(seconds=30),
                           retry_policy=retries.DATABASE)
        if not found.connection_ids:
            return HealthSummary()
        summary: HealthSummary = await child(
            wf.HEALTH, HealthInput(connection_ids=found.connection_ids, fleet_ids=[],
                                   verify_timeout_s=inp.verify_timeout_s),
            id=health_recheck_child_id(workflow.info().run_id))
        return summary

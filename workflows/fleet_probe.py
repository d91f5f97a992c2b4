"""FleetProbeWorkflow: log in to every host of an SSH fleet and store what each answered
(reachable or why not, GPUs, Docker, passwordless sudo, TCP forwarding).

Started by the API when a fleet is saved (POST, PUT). Its input is the fleet id only: the
activities read the sealed key from the database, so no key is ever in this history.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow

from messages import activities as acts
from messages import workflows as wf
from messages.fleet import FleetHostInput, FleetProbeRequest, FleetProbeResult
from workflows import retries
from workflows.calls import call


@workflow.defn(name=wf.FLEET_PROBE.name)
class FleetProbeWorkflow:
    @workflow.run
    async def run(self, req: FleetProbeRequest) -> FleetProbeResult:
        hosts = await call(acts.FLEET_HOSTS, req, start_to_close_timeout=timedelta(seconds=30),
                           retry_policy=retries.QUICK)
        # Bastion and host connections, then a handful of short commands, each bounded.
        budget = timedelta(seconds=2 * req.connect_timeout_s + 120)
        probes = await asyncio.gather(*[
            call(acts.PROBE_FLEET_HOST,
                 FleetHostInput(fleet_id=req.fleet_id, probe_id=req.probe_id, host_id=h,
                                connect_timeout_s=req.connect_timeout_s),
                 start_to_close_timeout=budget, retry_policy=retries.QUICK)
            for h in hosts.host_ids])
        return FleetProbeResult(fleet_id=req.fleet_id, hosts=list(probes))

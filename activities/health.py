"""Health-check activities (workflows/health.py): the connected connections, one verify() each
(timed, bounded; its failure is an answer, not an error), and the answers recorded on the rows.

Database work runs in plain `def`s (the worker's thread pool), the cloud call in an async one.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.deps import ActivityDeps
from messages import activities as acts
from messages.allocation import CloudTarget
from messages.fleet import FleetProbeRequest
from messages.health import (
    CheckInput,
    DegradedConnections,
    HealthCheck,
    HealthRecheckInput,
    HealthStatus,
    HealthTargets,
    HealthTargetsInput,
    RecordHealthInput,
)
from providers.base import ProviderError
from store import connections, fleets
from store.db import session_scope
from store.models import utcnow


class HealthActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=acts.HEALTH_TARGETS.name)
    def health_targets(self, inp: HealthTargetsInput) -> HealthTargets:
        """Every connected connection of every project (or those named); removing ones are not
        checked: their rows show `removing` until deleted. And every SSH fleet (or those named)
        with its latest probe id, to re-probe."""
        with session_scope(self.deps.engine) as session:
            rows = connections.connected_anywhere(session, inp.connection_ids)
            found = fleets.probe_targets(session, inp.fleet_ids)
        return HealthTargets(targets=[CloudTarget(connection_id=r.id, cloud=r.provider) for r in rows],
                             fleets=[FleetProbeRequest(fleet_id=f, probe_id=p) for f, p in found])

    @activity.defn(name=acts.DEGRADED_CONNECTIONS.name)
    def degraded_connections(self, inp: HealthRecheckInput) -> DegradedConnections:
        """The connected connections whose last check found them degraded: what a re-check verifies."""
        with session_scope(self.deps.engine) as session:
            rows = connections.connected_anywhere(session)
        return DegradedConnections(connection_ids=[r.id for r in rows
                                                   if r.health_status == HealthStatus.DEGRADED])

    @activity.defn(name=acts.CHECK_CONNECTION.name)
    async def check_connection(self, inp: CheckInput) -> HealthCheck:
        """Ask the cloud's verify() with the connection's own adapter (the worker's cached one),
        within `timeout_s`: healthy with its latency, or degraded with the reason."""
        checked_at = utcnow().isoformat()
        conn_id = inp.target.connection_id
        try:
            adapter = await self.deps.provider(inp.target)
        except ApplicationError as e:  # credentials that no longer open, an endpoint no longer allowed
            return HealthCheck(connection_id=conn_id, ok=False, reason=e.message, checked_at=checked_at)
        started = time.monotonic()
        try:
            await asyncio.wait_for(adapter.verify(), inp.timeout_s)
        except TimeoutError:
            return HealthCheck(connection_id=conn_id, ok=False, checked_at=checked_at,
                               reason=f"verify did not answer within {inp.timeout_s:g}s")
        except ProviderError as e:  # the adapter's own words: written to be shown (no secrets)
            return HealthCheck(connection_id=conn_id, ok=False, reason=e.message, checked_at=checked_at,
                               latency_ms=_ms_since(started))
        except Exception as e:  # noqa: BLE001 — any other failure degrades too; its text may hold input
            return HealthCheck(connection_id=conn_id, ok=False, checked_at=checked_at,
                               reason=f"verify failed unexpectedly ({type(e).__name__})",
                               latency_ms=_ms_since(started))
        return HealthCheck(connection_id=conn_id, ok=True, checked_at=checked_at,
                           latency_ms=_ms_since(started))

    @activity.defn(name=acts.RECORD_HEALTH.name)
    def record_health(self, inp: RecordHealthInput) -> None:
        """Write each answer on its connection (one removed meanwhile is skipped). Idempotent."""
        with session_scope(self.deps.engine) as session:
            for c in inp.checks:
                connections.record_health(session, c.connection_id,
                                          status=HealthStatus.HEALTHY if c.ok else HealthStatus.DEGRADED,
                                          reason=None if c.ok else c.reason,
                                          checked_at=datetime.fromisoformat(c.checked_at),
                                          latency_ms=c.latency_ms)
            session.commit()


def _ms_since(started: float) -> int:
    return max(0, round((time.monotonic() - started) * 1000))

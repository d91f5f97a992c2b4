"""The health check's messages (workflows/health.py): which connections to check (and which SSH
fleets to re-probe), one verify's answer, and what a run recorded.

Times travel as ISO 8601 UTC strings (this package stays free of anything but pure modules).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from messages.allocation import CloudTarget
from messages.fleet import FleetProbeRequest, FleetProbeResult


class HealthStatus(StrEnum):
    """A connection's health as the last check found it (stored on the connection; None: never
    checked, which the API shows as `pending`)."""

    HEALTHY = "healthy"  # verify() answered
    DEGRADED = "degraded"  # verify() failed or did not answer in time: `reason` says why


class HealthInput(BaseModel):
    """One health-check run. The Schedule passes the defaults; tests name their connections."""

    connection_ids: list[str] | None = None  # None: every connected connection
    fleet_ids: list[str] | None = None  # SSH fleets to re-probe; None: every fleet
    verify_timeout_s: float = Field(default=20.0, gt=0)  # one verify(); slower is degraded


class HealthRecheckInput(BaseModel):
    """One re-check of the degraded connections (HealthRecheckWorkflow, on its own shorter Schedule)."""

    verify_timeout_s: float = Field(default=20.0, gt=0)


class DegradedConnections(BaseModel):
    connection_ids: list[str] = Field(default_factory=list)  # connected ones whose last check degraded


class HealthTargetsInput(BaseModel):
    connection_ids: list[str] | None = None
    fleet_ids: list[str] | None = None


class HealthTargets(BaseModel):
    targets: list[CloudTarget]
    # Each fleet with its latest save's probe id: the re-probe records under it (a save meanwhile
    # starts a newer probe, whose answers win).
    fleets: list[FleetProbeRequest] = Field(default_factory=list)


class CheckInput(BaseModel):
    target: CloudTarget
    timeout_s: float


class HealthCheck(BaseModel):
    """One connection's answer. A failure is an answer too: `ok` False with the reason."""

    connection_id: str
    ok: bool
    reason: str | None = None
    checked_at: str  # ISO 8601 UTC, when verify was asked
    latency_ms: int | None = None  # how long verify took (None: it did not answer)


class RecordHealthInput(BaseModel):
    checks: list[HealthCheck]


class HealthSummary(BaseModel):
    checked: list[HealthCheck] = Field(default_factory=list)  # every connection's answer, in order
    probed: list[FleetProbeResult] = Field(default_factory=list)  # every re-probed fleet's answers

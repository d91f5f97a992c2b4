"""Workflow ids, idempotency keys and the task queue: derived from ids gpuprov generates, never
from user text."""

from __future__ import annotations

import re

TASK_QUEUE = "gpuprov"

_KEY_UNSAFE = re.compile(r"[^a-z0-9-]+")


def attempt_key(allocation_id: str, seq: int) -> str:
    """The idempotency key of attempt `seq`: from the allocation id and attempt, never a run id.
    It becomes the cloud-side name, tag and client token of what the attempt creates."""
    base = _KEY_UNSAFE.sub("-", allocation_id.lower()).strip("-")[:50] or "x"
    return f"gp-{base}-a{seq}"


_ATTEMPT_KEY = re.compile(r"^gp-([a-z0-9][a-z0-9-]*)-a([0-9]+)$")


def allocation_of_key(key: str) -> str | None:
    """The allocation id in an attempt key: `attempt_key`'s inverse, `gp-<allocation>-a<seq>` ->
    `<allocation>`; None for a key not made by `attempt_key`. Exact for every allocation id
    `attempt_key` leaves unchanged (lowercase [a-z0-9-], at most 50 chars: those gpuprov makes)."""
    m = _ATTEMPT_KEY.match(key)
    return m.group(1) if m else None


def allocation_workflow_id(allocation_id: str) -> str:
    """The one long-lived workflow of an allocation (workflows/allocation.py)."""
    return f"allocation-{allocation_id}"


def job_workflow_id(job_id: str) -> str:
    """A managed job's workflow (workflows/job.py)."""
    return f"job-{job_id}"


# The workflow id of the retired AllocateWorkflow ("allocate-<allocation>"): the drain check and
# migration 0023 look for live instances still on one (store/retired.py).
LEGACY_ALLOCATE_PREFIX = "allocate-"


def connect_workflow_id(connection_id: str) -> str:
    return f"connect-{connection_id}"


def disconnect_workflow_id(connection_id: str) -> str:
    return f"disconnect-{connection_id}"


def fleet_reprobe_workflow_id(fleet_id: str, health_run_id: str) -> str:
    """A health run's re-probe of a fleet (a child of HealthWorkflow): one per fleet per run."""
    return f"fleet-reprobe-{fleet_id}-{health_run_id}"


def fleet_probe_workflow_id(fleet_id: str, probe_id: str) -> str:
    """One probe of a fleet: each save (POST, PUT) starts its own, so a new configuration is always
    probed; only the fleet's latest probe records answers (Fleet.probe_id)."""
    return f"fleet-probe-{fleet_id}-{probe_id}"


def watch_workflow_id(connection_id: str) -> str:
    return f"watch-{connection_id}"


# The Temporal Schedule that starts SweepWorkflow, and its runs' workflow id (the schedule appends
# the scheduled time to it).
SWEEP_SCHEDULE_ID = "gpuprov-sweep"
SWEEP_WORKFLOW_ID = "gpuprov-sweep"

# The Temporal Schedule that starts HealthWorkflow (workflows/health.py), and its runs' workflow id.
HEALTH_SCHEDULE_ID = "gpuprov-health"
HEALTH_WORKFLOW_ID = "gpuprov-health"
# The shorter Schedule that re-checks only degraded connections (HealthRecheckWorkflow), and its runs' id.
HEALTH_RECHECK_SCHEDULE_ID = "gpuprov-health-recheck"
HEALTH_RECHECK_WORKFLOW_ID = "gpuprov-health-recheck"


def connection_health_workflow_id(connection_id: str) -> str:
    """The one-off health check ConnectWorkflow starts once a connection is saved."""
    return f"health-{connection_id}"


def health_recheck_child_id(recheck_run_id: str) -> str:
    """A re-check run's HealthWorkflow (its child): one per run."""
    return f"health-recheck-{recheck_run_id}"


def policy_schedule_id(project: str, policy_id: str) -> str:
    """The Temporal Schedule that evaluates a policy (shown in the Web UI's Schedules)."""
    return f"gpuprov-policy-{project}-{policy_id}"


def policy_workflow_id(project: str, policy_id: str) -> str:
    """Its runs' workflow id (the Schedule appends the scheduled time)."""
    return f"policy-{project}-{policy_id}"

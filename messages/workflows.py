"""Every workflow type by reference: its registered name, its input and result types, and the names
of its updates, signals and queries — beside `ActivityRef` (messages/activities.py).

A workflow's definition takes its names from here (`@workflow.defn(name=ALLOCATION.name)`,
`@workflow.update(name=ALLOCATION.terminate.name)`), and every caller — the API, activities, a
parent workflow, bench and tests — starts, updates, signals or queries it through the same
reference (workflows/client_calls.py outside a workflow, workflows/calls.py inside one). So a name is
written once, a caller cannot send an input of the wrong type without mypy saying so, and the result
type the data converter decodes into is the one the workflow returns.

A registered name is part of every open run's identity: renaming one orphans the runs started
under the old name. Change a workflow as workflows/README.md says, never by renaming it here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from messages.acceptance import AcceptanceRequest, AcceptanceState, Approval, WorkerKilled
from messages.allocation import (
    AllocationInput,
    AllocationState,
    MachineLost,
)
from messages.connection import ConnectRequest, ConnectResult, DisconnectRequest, DisconnectResult
from messages.fleet import FleetProbeRequest, FleetProbeResult
from messages.health import HealthInput, HealthRecheckInput, HealthSummary
from messages.job import JobInput, JobState, PreemptionNotice
from messages.policy import PolicyInput, PolicyRunOutcome
from messages.pool import ScaleInput, ScaleState
from messages.sweep import SweepInput, SweepSummary
from messages.watch import WatchRequest

I = TypeVar("I", bound=BaseModel)  # noqa: E741 — the conventional name of an input type
O = TypeVar("O")  # noqa: E741


@dataclass(frozen=True)
class UpdateRef(Generic[O]):
    """An update without an argument; `output` is its result's type (None: it returns nothing)."""

    name: str
    output: Any = None


@dataclass(frozen=True)
class SignalRef(Generic[I]):
    """A signal; `input` is its argument's type (None: it takes none)."""

    name: str
    input: type[I] | None = None


@dataclass(frozen=True)
class QueryRef(Generic[O]):
    name: str
    output: Any


@dataclass(frozen=True)
class WorkflowRef(Generic[I, O]):
    name: str
    input: type[I]
    output: Any  # the result's type hint, handed to the data converter as result_type


# --------------------------------------------------------------------------- the long-lived entities


@dataclass(frozen=True)
class AllocationRef(WorkflowRef[AllocationInput, AllocationState]):
    """One machine's life: allocate → ready → watched → terminated or lost (workflows/allocation.py)."""

    state: QueryRef[AllocationState] = QueryRef("state", AllocationState)
    terminate: UpdateRef[AllocationState] = UpdateRef("terminate", AllocationState)
    ready: UpdateRef[AllocationState] = UpdateRef("ready", AllocationState)
    machine_lost: SignalRef[MachineLost] = SignalRef("machine_lost", MachineLost)


@dataclass(frozen=True)
class JobRef(WorkflowRef[JobInput, JobState]):
    state: QueryRef[JobState] = QueryRef("state", JobState)
    cancel: UpdateRef[JobState] = UpdateRef("cancel", JobState)
    preemption_notice: SignalRef[PreemptionNotice] = SignalRef("preemption_notice", PreemptionNotice)


@dataclass(frozen=True)
class ScaleRef(WorkflowRef[ScaleInput, ScaleState]):
    state: QueryRef[ScaleState] = QueryRef("state", ScaleState)
    reconcile: UpdateRef[None] = UpdateRef("reconcile")


@dataclass(frozen=True)
class WatchRef(WorkflowRef[WatchRequest, None]):
    stop: SignalRef[BaseModel] = SignalRef("stop")


ALLOCATION = AllocationRef("AllocationWorkflow", AllocationInput, AllocationState)
JOB = JobRef("JobWorkflow", JobInput, JobState)
SCALE = ScaleRef("ScaleWorkflow", ScaleInput, ScaleState)
WATCH = WatchRef("WatchWorkflow", WatchRequest, None)

@dataclass(frozen=True)
class AcceptanceRef(WorkflowRef[AcceptanceRequest, AcceptanceState]):
    """One run of the acceptance suite on one connection (workflows/acceptance.py)."""

    state: QueryRef[AcceptanceState] = QueryRef("state", AcceptanceState)
    approve: SignalRef[Approval] = SignalRef("approve", Approval)
    worker_killed: SignalRef[WorkerKilled] = SignalRef("worker_killed", WorkerKilled)


ACCEPTANCE = AcceptanceRef("AcceptanceWorkflow", AcceptanceRequest, AcceptanceState)

# --------------------------------------------------------------------------- one-shot workflows

CONNECT: WorkflowRef[ConnectRequest, ConnectResult] = WorkflowRef(
    "ConnectWorkflow", ConnectRequest, ConnectResult)
DISCONNECT: WorkflowRef[DisconnectRequest, DisconnectResult] = WorkflowRef(
    "DisconnectWorkflow", DisconnectRequest, DisconnectResult)
FLEET_PROBE: WorkflowRef[FleetProbeRequest, FleetProbeResult] = WorkflowRef(
    "FleetProbeWorkflow", FleetProbeRequest, FleetProbeResult)
HEALTH: WorkflowRef[HealthInput, HealthSummary] = WorkflowRef("HealthWorkflow", HealthInput, HealthSummary)
HEALTH_RECHECK: WorkflowRef[HealthRecheckInput, HealthSummary] = WorkflowRef(
    "HealthRecheckWorkflow", HealthRecheckInput, HealthSummary)
POLICY: WorkflowRef[PolicyInput, PolicyRunOutcome] = WorkflowRef(
    "PolicyWorkflow", PolicyInput, PolicyRunOutcome)
SWEEP: WorkflowRef[SweepInput, SweepSummary] = WorkflowRef("SweepWorkflow", SweepInput, SweepSummary)

# --------------------------------------------------------------------------- retired

# Types retired from service and removed (workflows/README.md, "A rewrite: a new type, then drain"):
# the single-shot AllocateWorkflow and its TerminateWorkflow, before AllocationWorkflow. Named here
# only for the drain check (`gpuprov retired`, GET /api/compute/retired-workflows), which must still
# find a run of one an older worker left open.
RETIRED: tuple[str, ...] = ("AllocateWorkflow", "TerminateWorkflow")

ALL: tuple[WorkflowRef[Any, Any], ...] = (
    ALLOCATION, JOB, SCALE, WATCH, ACCEPTANCE,
    CONNECT, DISCONNECT, FLEET_PROBE, HEALTH, HEALTH_RECHECK, POLICY, SWEEP,
)


def handlers(ref: WorkflowRef[Any, Any]) -> list[UpdateRef[Any] | SignalRef[Any] | QueryRef[Any]]:
    """The updates, signals and queries `ref` declares."""
    return [v for v in vars(ref).values() if isinstance(v, UpdateRef | SignalRef | QueryRef)]

"""Every activity's name and typed input and output: one model in, one model (or None) out.

Workflows call activities through these references (workflows/calls.py), so they never import
an activity's implementation; each implementation in activities/ is registered under the same
name (`@activity.defn(name=REF.name)`), and tests/workflows/test_units.py checks that every
reference has an implementation taking its input type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, Field

from messages.acceptance import (
    AcceptancePlan,
    AllocationPhaseInput,
    Leftovers,
    LeftoversInput,
    MachineCheck,
    MachineCheckInput,
    PlanAcceptanceInput,
    RecordAcceptanceInput,
)
from messages.allocation import AllocateRequest, AllocationState, CloudTarget, GpuInfo
from messages.connection import ConnectRequest, ConnectResult
from messages.enums import AllocationStatus, Phase
from messages.fleet import FleetHostIds, FleetHostInput, FleetProbeRequest, HostProbe
from messages.health import (
    CheckInput,
    DegradedConnections,
    HealthCheck,
    HealthRecheckInput,
    HealthTargets,
    HealthTargetsInput,
    RecordHealthInput,
)
from messages.job import (
    AdmitInput,
    AdmitResult,
    AllocationReadyInput,
    ClaimInput,
    ClaimResult,
    MachineEndInput,
    RecordJobInput,
    RunJobInput,
    RunJobResult,
    SignalJobInput,
)
from messages.policy import ActInput, ActResult, PolicyFacts, PolicyInput, RecordPolicyRun
from messages.pool import (
    ForgetPoolInput,
    Observation,
    ObserveInput,
    RecordPoolInput,
    StartMachineInput,
    StartResult,
)
from messages.sweep import (
    JudgeInput,
    Judgements,
    ListOwnedInput,
    OwnedMachines,
    RemoveInput,
    RemoveResult,
    SweepTargets,
    SweepTargetsInput,
)
from messages.watch import WatchInput, WatchReport
from providers.base import Capabilities, InstanceRef, InstanceStatus, Offer, OfferQuery

I = TypeVar("I", bound=BaseModel)  # noqa: E741 — the conventional name of an input type
O = TypeVar("O")  # noqa: E741


@dataclass(frozen=True)


class ActivityRef(Generic[I, O]):
    name: str
    input: type[I]
    output: Any  # the result's type hint, handed to the data converter as result_type


# --------------------------------------------------------------------------- inputs and outputs


class PhaseMark(BaseModel):
    """A phase the allocation entered, written (as a status/phase event) by the next activity it
    calls, so phases cost no activity of their own and `gpuprov up` still sees every one."""

    status: AllocationStatus
    phase: Phase


class Marked(BaseModel):
    """Inputs of activities that write the allocation's pending phase marks before their work."""

    allocation_id: str = ""
    marks: list[PhaseMark] = Field(default_factory=list)


class ValidateInput(Marked):
    request: AllocateRequest
    # The allocation's first snapshot, written before validating (its row exists from the start);
    # None: the workflow recorded it with RECORD_ALLOCATION (runs from before RECORDS_RIDE_PATCH).
    record: RecordAllocationInput | None = None


class ValidateResult(BaseModel):
    capabilities: dict[str, Capabilities]  # of each target's cloud that can serve the request
    skipped: list[str] = Field(default_factory=list)  # targets that cannot, with the reason


class PlanInput(Marked):
    targets: list[CloudTarget]
    query: OfferQuery


class PlanResult(BaseModel):
    offers: list[Offer]  # from every target that answered, each with its connection_id, cheapest first
    failures: list[str] = Field(default_factory=list)  # targets that did not answer, with the reason
    # Offers moved last for a capacity or quota refusal still remembered (activities/capacity_memory.py),
    # one human note each: "tried last: lambda gpu_1x_a10@us-east-1 — refused for capacity 2× since ...".
    remembered: list[str] = Field(default_factory=list)


class CreateInput(Marked):
    """What to launch. The activity makes the LaunchSpec: it adds the installation's own public
    key and the owner tag (the deployment's installation id, from the database)."""

    target: CloudTarget
    offer: Offer
    key: str  # the attempt's idempotency key
    allocation_id: str
    ssh_public_keys: list[str]
    image: str | None = None
    ports: list[int] = Field(default_factory=list)
    heartbeat_every_s: float = 1.0
    poll_interval_s: float = 2.0  # looking up a launch that may still land (clouds without a token)
    k3s_at_boot: bool = False  # the cloud installs k3s from its user data (capability `cloud-init`)
    k8s_api_from: list[str] = Field(default_factory=list)  # LaunchSpec.k8s_api_from (direct clouds)
    lifetime_s: int | None = None  # the allocation's max_hours: the cloud stops the machine then


class WaitRunningInput(Marked):
    target: CloudTarget
    ref: InstanceRef
    poll_interval_s: float = 2.0
    heartbeat_every_s: float = 1.0
    # The snapshot after the create (the machine's id, for the watch and the sweep), written before
    # the first poll; None: recorded with RECORD_ALLOCATION (runs from before RECORDS_RIDE_PATCH).
    record: RecordAllocationInput | None = None


class SshTarget(Marked):
    host: str
    port: int = 22
    user: str = "root"
    poll_interval_s: float = 2.0
    # Public keys WAIT_SSH adds to the login user's authorized_keys once it gets in (clouds whose
    # Capabilities.user_keys is "ssh"); parsed, re-serialised OpenSSH lines.
    authorize_keys: list[str] = Field(default_factory=list)
    # Where the machine came from, when its adapter knows a bastion to reach it through
    # (Capabilities.bastion, SSH fleets); None: connect directly.
    via: CloudTarget | None = None


class MachineSetup(SshTarget):
    """SET_UP_MACHINE: the SSH steps of WAIT_SSH, INSTALL_K3S (when `install_k3s`) and PROBE_GPUS."""

    install_k3s: bool = False


class TerminateInput(Marked):
    target: CloudTarget
    key: str
    ref: InstanceRef | None = None  # None when the create answer was lost: find by key
    poll_interval_s: float = 2.0
    heartbeat_every_s: float = 1.0


class RecordAllocationInput(Marked):
    """A snapshot of the allocate workflow; the activity upserts the Instance row and attempts
    (after writing any pending phase marks as events)."""

    request: AllocateRequest
    state: AllocationState
    status: AllocationStatus


class ConnectionIdInput(BaseModel):
    connection_id: str


class LiveAllocation(BaseModel):
    allocation_id: str
    workflow_id: str


class LiveAllocations(BaseModel):
    allocations: list[LiveAllocation]


class TerminateAllocationInput(BaseModel):
    """Terminate an allocation through its workflow's `terminate` update (waits until gone)."""

    workflow_id: str
    heartbeat_every_s: float = 5.0


# --------------------------------------------------------------------------- references

VALIDATE_ALLOCATION: ActivityRef[ValidateInput, ValidateResult] = ActivityRef(
    "validate_allocation", ValidateInput, ValidateResult)
PLAN_ALLOCATION: ActivityRef[PlanInput, PlanResult] = ActivityRef("plan_allocation", PlanInput, PlanResult)
CREATE_INSTANCE: ActivityRef[CreateInput, InstanceRef] = ActivityRef(
    "create_instance", CreateInput, InstanceRef)
WAIT_RUNNING: ActivityRef[WaitRunningInput, InstanceStatus] = ActivityRef(
    "wait_running", WaitRunningInput, InstanceStatus)
TERMINATE_AND_VERIFY: ActivityRef[TerminateInput, None] = ActivityRef(
    "terminate_and_verify", TerminateInput, None)
VERIFY_CREDENTIALS: ActivityRef[ConnectRequest, ConnectResult] = ActivityRef(
    "verify_credentials", ConnectRequest, ConnectResult)
SAVE_CONNECTION: ActivityRef[ConnectRequest, None] = ActivityRef("save_connection", ConnectRequest, None)

WAIT_SSH: ActivityRef[SshTarget, None] = ActivityRef("wait_ssh", SshTarget, None)
INSTALL_K3S: ActivityRef[SshTarget, None] = ActivityRef("install_k3s", SshTarget, None)
PROBE_GPUS: ActivityRef[SshTarget, list[GpuInfo]] = ActivityRef("probe_gpus", SshTarget, list[GpuInfo])
SET_UP_MACHINE: ActivityRef[MachineSetup, list[GpuInfo]] = ActivityRef(
    "set_up_machine", MachineSetup, list[GpuInfo])

RECORD_ALLOCATION: ActivityRef[RecordAllocationInput, None] = ActivityRef(
    "record_allocation", RecordAllocationInput, None)
BEGIN_DISCONNECT: ActivityRef[ConnectionIdInput, LiveAllocations] = ActivityRef(
    "begin_disconnect", ConnectionIdInput, LiveAllocations)
DELETE_CONNECTION: ActivityRef[ConnectionIdInput, None] = ActivityRef(
    "delete_connection", ConnectionIdInput, None)
TERMINATE_ALLOCATION: ActivityRef[TerminateAllocationInput, None] = ActivityRef(
    "terminate_allocation", TerminateAllocationInput, None)
WATCH_CONNECTION: ActivityRef[WatchInput, WatchReport] = ActivityRef(
    "watch_connection", WatchInput, WatchReport)
START_WATCH: ActivityRef[ConnectionIdInput, None] = ActivityRef("start_watch", ConnectionIdInput, None)

# The sweep (workflows/sweep.py, activities/sweep.py).
SWEEP_TARGETS: ActivityRef[SweepTargetsInput, SweepTargets] = ActivityRef(
    "sweep_targets", SweepTargetsInput, SweepTargets)
LIST_OWNED: ActivityRef[ListOwnedInput, OwnedMachines] = ActivityRef(
    "list_owned", ListOwnedInput, OwnedMachines)
JUDGE_MACHINES: ActivityRef[JudgeInput, Judgements] = ActivityRef("judge_machines", JudgeInput, Judgements)
SWEEP_REMOVE: ActivityRef[RemoveInput, RemoveResult] = ActivityRef(
    "sweep_remove", RemoveInput, RemoveResult)

# The health check (workflows/health.py, activities/health.py).
HEALTH_TARGETS: ActivityRef[HealthTargetsInput, HealthTargets] = ActivityRef(
    "health_targets", HealthTargetsInput, HealthTargets)
CHECK_CONNECTION: ActivityRef[CheckInput, HealthCheck] = ActivityRef(
    "check_connection", CheckInput, HealthCheck)
RECORD_HEALTH: ActivityRef[RecordHealthInput, None] = ActivityRef("record_health", RecordHealthInput, None)
DEGRADED_CONNECTIONS: ActivityRef[HealthRecheckInput, DegradedConnections] = ActivityRef(
    "degraded_connections", HealthRecheckInput, DegradedConnections)

# SSH fleets (workflows/fleet_probe.py, activities/fleet.py).
FLEET_HOSTS: ActivityRef[FleetProbeRequest, FleetHostIds] = ActivityRef(
    "fleet_hosts", FleetProbeRequest, FleetHostIds)
PROBE_FLEET_HOST: ActivityRef[FleetHostInput, HostProbe] = ActivityRef(
    "probe_fleet_host", FleetHostInput, HostProbe)

# Policies (workflows/policy.py, activities/policy.py).
POLICY_FACTS: ActivityRef[PolicyInput, PolicyFacts] = ActivityRef("policy_facts", PolicyInput, PolicyFacts)
POLICY_ACT: ActivityRef[ActInput, ActResult] = ActivityRef("policy_act", ActInput, ActResult)
RECORD_POLICY_RUN: ActivityRef[RecordPolicyRun, None] = ActivityRef(
    "record_policy_run", RecordPolicyRun, None)
# Managed jobs (workflows/job.py, activities/jobs.py).
RECORD_JOB: ActivityRef[RecordJobInput, None] = ActivityRef("record_job", RecordJobInput, None)
AWAIT_ALLOCATION_READY: ActivityRef[AllocationReadyInput, AllocationState] = ActivityRef(
    "await_allocation_ready", AllocationReadyInput, AllocationState)
RUN_JOB: ActivityRef[RunJobInput, RunJobResult] = ActivityRef("run_job", RunJobInput, RunJobResult)
ADMIT_JOB: ActivityRef[AdmitInput, AdmitResult] = ActivityRef("admit_job", AdmitInput, AdmitResult)
# Jobs on a pool's machines: claim a free one, and notice it go (the pool scaled down, or lost).
CLAIM_POOL_MACHINE: ActivityRef[ClaimInput, ClaimResult] = ActivityRef("claim_pool_machine", ClaimInput,
                                                                       ClaimResult)
AWAIT_MACHINE_END: ActivityRef[MachineEndInput, str] = ActivityRef("await_machine_end", MachineEndInput, str)
# A cloud's preemption notice for a job's machine: SIGTERM to its command (workflows/job.py).
SIGNAL_JOB: ActivityRef[SignalJobInput, bool] = ActivityRef("signal_job", SignalJobInput, bool)
# Pools (workflows/scale.py, activities/pools.py).
OBSERVE_POOL: ActivityRef[ObserveInput, Observation] = ActivityRef("observe_pool", ObserveInput, Observation)
START_POOL_MACHINE: ActivityRef[StartMachineInput, StartResult] = ActivityRef(
    "start_pool_machine", StartMachineInput, StartResult)
RECORD_POOL: ActivityRef[RecordPoolInput, None] = ActivityRef("record_pool", RecordPoolInput, None)
FORGET_POOL: ActivityRef[ForgetPoolInput, None] = ActivityRef("forget_pool", ForgetPoolInput, None)
# The acceptance suite (workflows/acceptance.py, activities/acceptance.py).
PLAN_ACCEPTANCE: ActivityRef[PlanAcceptanceInput, AcceptancePlan] = ActivityRef(
    "plan_acceptance", PlanAcceptanceInput, AcceptancePlan)
CHECK_MACHINE: ActivityRef[MachineCheckInput, MachineCheck] = ActivityRef(
    "check_machine", MachineCheckInput, MachineCheck)
AWAIT_ALLOCATION_PHASE: ActivityRef[AllocationPhaseInput, AllocationState] = ActivityRef(
    "await_allocation_phase", AllocationPhaseInput, AllocationState)
LEFTOVERS: ActivityRef[LeftoversInput, Leftovers] = ActivityRef("leftovers", LeftoversInput, Leftovers)
RECORD_ACCEPTANCE: ActivityRef[RecordAcceptanceInput, None] = ActivityRef(
    "record_acceptance", RecordAcceptanceInput, None)

ALL: tuple[ActivityRef[Any, Any], ...] = (
    VALIDATE_ALLOCATION, PLAN_ALLOCATION, CREATE_INSTANCE, WAIT_RUNNING,
    TERMINATE_AND_VERIFY, VERIFY_CREDENTIALS, SAVE_CONNECTION, WAIT_SSH, INSTALL_K3S, PROBE_GPUS,
    SET_UP_MACHINE, RECORD_ALLOCATION, BEGIN_DISCONNECT,
    DELETE_CONNECTION, TERMINATE_ALLOCATION, WATCH_CONNECTION, START_WATCH,
    SWEEP_TARGETS, LIST_OWNED, JUDGE_MACHINES, SWEEP_REMOVE,
    HEALTH_TARGETS, CHECK_CONNECTION, RECORD_HEALTH, DEGRADED_CONNECTIONS,
    FLEET_HOSTS, PROBE_FLEET_HOST,
    POLICY_FACTS, POLICY_ACT, RECORD_POLICY_RUN,
    RECORD_JOB, AWAIT_ALLOCATION_READY, RUN_JOB, ADMIT_JOB, CLAIM_POOL_MACHINE, AWAIT_MACHINE_END, SIGNAL_JOB,
    OBSERVE_POOL, START_POOL_MACHINE, RECORD_POOL, FORGET_POOL,
    PLAN_ACCEPTANCE, CHECK_MACHINE, AWAIT_ALLOCATION_PHASE, LEFTOVERS, RECORD_ACCEPTANCE,
)

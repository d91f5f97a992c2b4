"""The acceptance suite's messages: a run's request, its steps and where it stands, and the result
it records (providers/support.py derives each cloud's support status from results).

The steps, in order (workflows/acceptance.py runs them; `STEPS` names them):

- `connect`: the connection's credentials verified; the account named by a fingerprint at most.
- `offer`: the cheapest offer of the GPU asked for (or the cloud's cheapest), within the ceilings.
- `allocate`: an allocation on that offer reaches ready (SSH, k3s where asked, the GPU check).
- `ssh`: a login as the cloud's documented user, with the host key pinned at the first login.
- `gpu`: nvidia-smi on the machine sees a GPU (where the offer has one).
- `k3s`: the k3s node is Ready (and, where the NVIDIA container runtime is there, k3s has its
  runtime class: a GPU pods can use).
- `terminate`: the allocation's teardown returns (the cloud shows the machine gone).
- `nothing_billable`: the cloud's own listing holds nothing of the run's keys, machine or side resource.
- `interrupt_after_create`: a second allocation cancelled as soon as its create is in flight.
- `interrupt_while_booting`: a third cancelled while its machine boots.
- `interrupt_worker_killed`: a fourth whose worker is SIGKILLed mid-create (only the CLI runs it: it
  needs a worker of its own to kill, on a private task queue; a run started through the API reports
  it not run).
Each interrupt step passes only when the cloud's listing holds nothing of that allocation afterwards.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from messages.allocation import Timing

Account = Literal["real", "simulated"]
# `not_applicable`: the cloud cannot do what the step checks (k3s where the cloud hosts none); it
# counts as passed, with the cloud's reason in the detail.
Outcome = Literal["passed", "failed", "not_run", "not_applicable"]
PASSING: frozenset[str] = frozenset({"passed", "not_applicable"})

STEPS: tuple[str, ...] = (
    "connect", "offer", "allocate", "ssh", "gpu", "k3s", "terminate", "nothing_billable",
    "interrupt_after_create", "interrupt_while_booting", "interrupt_worker_killed",
)
INTERRUPTS: tuple[str, ...] = ("interrupt_after_create", "interrupt_while_booting", "interrupt_worker_killed")
# How many machines a run makes at most: the main one and one per interrupt (the cost ceiling's count).
MACHINES_PER_RUN = 1 + len(INTERRUPTS)


class AcceptanceStep(BaseModel):
    """One step of an acceptance run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=80)
    outcome: Outcome
    seconds: float = Field(ge=0)
    detail: str | None = Field(default=None, max_length=2000)


class AcceptanceResult(BaseModel):
    """One run of the acceptance suite against one connection of one cloud. Unknown fields are
    refused, so a credential can never ride along; the account is named by a fingerprint at most
    (a hash the runner computes, hex only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cloud: str = Field(min_length=1)
    adapter_version: str = Field(min_length=1)
    account: Account  # from the connection's endpoint (providers.support.account_kind), never a flag
    steps: list[AcceptanceStep] = Field(min_length=1)
    started_at: datetime
    account_fingerprint: str | None = Field(default=None, pattern=r"^[0-9a-f]{8,64}$")

    @property
    def outcome(self) -> Literal["passed", "failed", "incomplete"]:
        """`failed` when a step failed; `passed` when every step passed; else `incomplete` (a step
        did not run and none failed): an incomplete run counts neither way."""
        if any(s.outcome == "failed" for s in self.steps):
            return "failed"
        return "passed" if all(s.outcome in PASSING for s in self.steps) else "incomplete"

    @property
    def failed_step(self) -> str | None:
        return next((s.name for s in self.steps if s.outcome == "failed"), None)


class AcceptanceRequest(BaseModel):
    """AcceptanceWorkflow's input. The offer is pinned by the caller (the CLI showed it and its price,
    and was told to spend) or chosen by the `offer` step; the ceilings bound the whole run."""

    run_id: str
    project: str = "default"
    connection_id: str
    cloud: str
    gpu: str | None = None
    instance_type: str | None = None  # the offer shown to the user: only that one
    region: str | None = None
    max_usd: float = Field(gt=0)  # the run stops (and cleans up) before its estimate passes this
    max_minutes: float = Field(gt=0)  # ... or once this long has passed
    ssh_public_keys: list[str] = Field(min_length=1)  # the installation's key: the run logs in with it
    # The task queue of a worker the caller runs (and SIGKILLs) for `interrupt_worker_killed`; None:
    # that step is not run (a run through the API has no worker of its own to kill).
    kill_task_queue: str | None = None
    # Hold after the `offer` step, with the plan (offer, price) in the state, until the `approve`
    # signal says to spend or not: how a caller asks its user before anything is created.
    hold_for_approval: bool = False
    # ... and decline by itself (nothing created) if no answer came this long after the plan: a caller
    # that went away must not hold the account's acceptance lane until `max_minutes`.
    approve_within_minutes: float = Field(default=15.0, gt=0, le=24 * 60)
    timing: Timing = Field(default_factory=Timing)
    # How long the cloud's listing may still show a removed resource (an asynchronous delete) before
    # `nothing_billable` fails naming it.
    settle_s: float = Field(default=120.0, ge=0)


class Leftover(BaseModel):
    """Something the cloud still lists under a run's key: the cloud's own id, to remove by hand."""

    key: str
    kind: str
    cloud_id: str


class AcceptancePlan(BaseModel):
    """The `connect` and `offer` steps' answer: the account, and what a run would allocate at what
    price (None with `offer_error` when nothing fits). Also what only an activity can know: the
    adapter's version and whether the endpoint is the cloud's real API."""

    adapter_version: str
    account: Account
    account_fingerprint: str | None = None
    connect_error: str | None = None  # the credentials refused, or the cloud unreachable
    offer_error: str | None = None  # no offer, or one over the ceiling: nothing is created
    instance_type: str | None = None
    region: str | None = None
    gpu: str | None = None
    gpu_count: int = 0
    price_per_hour: float | None = None
    k3s_reason: str | None = None  # set when the cloud cannot host k3s: why


class AcceptanceState(BaseModel):
    """What the `state` query returns: the steps so far and, for the CLI's kill step, the allocation
    whose worker it is to kill now (`kill_now`)."""

    run_id: str
    cloud: str
    done: bool = False
    steps: list[AcceptanceStep] = Field(default_factory=list)
    plan: AcceptancePlan | None = None
    allocations: list[str] = Field(default_factory=list)  # every allocation the run started
    leftovers: list[Leftover] = Field(default_factory=list)  # what it could not remove
    awaiting_approval: bool = False  # held after the plan until the `approve` signal
    approve_by: datetime | None = None  # ... or until then: unanswered, the run declines itself
    unanswered: bool = False  # it did: a later answer changes nothing
    kill_now: str | None = None  # the allocation id whose create is in flight on the private worker
    spent_usd_estimate: float = 0.0
    result: AcceptanceResult | None = None


class PlanAcceptanceInput(BaseModel):
    connection_id: str
    cloud: str
    gpu: str | None = None
    instance_type: str | None = None
    region: str | None = None
    max_usd: float
    max_minutes: float


class MachineCheckInput(BaseModel):
    """Log in to an allocation's machine (its pinned host key) and look: nvidia-smi, the k3s node."""

    allocation_id: str
    host: str
    port: int
    user: str
    k3s: bool


class MachineCheck(BaseModel):
    """What the login found. `gpus`: the GPUs nvidia-smi names; `k3s_ready`: a node Ready;
    `k3s_gpu_runtime`: k3s registered the NVIDIA runtime class (None: not asked)."""

    user: str
    gpus: list[str] = Field(default_factory=list)
    k3s_ready: bool | None = None
    k3s_gpu_runtime: bool | None = None
    detail: str = ""


class AllocationPhaseInput(BaseModel):
    """Wait until an allocation reaches one of `phases` (or ends): its `state` query, polled."""

    workflow_id: str
    phases: list[str]
    poll_interval_s: float = Field(default=0.2, gt=0)
    heartbeat_every_s: float = 5.0


class LeftoversInput(BaseModel):
    """What the cloud still lists of these allocations' keys, polled for up to `settle_s`."""

    connection_id: str
    cloud: str
    allocation_ids: list[str]
    settle_s: float = 120.0
    poll_interval_s: float = 2.0
    heartbeat_every_s: float = 5.0


class Leftovers(BaseModel):
    items: list[Leftover] = Field(default_factory=list)


class RecordAcceptanceInput(BaseModel):
    run_id: str
    project: str
    connection_id: str
    result: AcceptanceResult | None = None  # None: the run started (its row, before any step)
    state: AcceptanceState


class Approval(BaseModel):
    """The caller's answer to a held run's plan: spend (go on), or not (the run ends, nothing made)."""

    spend: bool


class WorkerKilled(BaseModel):
    """The CLI's word that it SIGKILLed the private worker (and started a fresh one)."""

    phase: str | None = None  # the allocation's phase when the caller killed the worker

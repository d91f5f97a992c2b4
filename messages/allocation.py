"""The allocation's messages: what is asked (AllocateRequest) and where it stands (AllocationState).

Workflows carry connection ids, never credentials. The installation id (the ownership tag) is
not part of a request: it belongs to the deployment and activities read it from the database.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from messages.enums import AttemptOutcome, Phase
from providers.base import InstanceRef, Offer


class Timing(BaseModel):
    """Activity timing knobs. Defaults suit real clouds; tests lower them so a killed
    worker is noticed within seconds."""

    # How long a dead worker goes unnoticed; generous enough for a loaded worker's heartbeats.
    heartbeat_timeout_s: float = Field(default=30.0, gt=0)
    poll_interval_s: float = Field(default=2.0, gt=0)
    call_timeout_s: float = Field(default=120.0, gt=0)  # one cloud API call (incl. retries inside)
    boot_timeout_s: float = Field(default=1800.0, gt=0)  # pending -> running
    ssh_timeout_s: float = Field(default=600.0, gt=0)  # running -> SSH answers
    k3s_timeout_s: float = Field(default=900.0, gt=0)
    max_retry_interval_s: float = Field(default=30.0, gt=0)
    # Activities that only read or write the database (record, validate) do not heartbeat: one lost
    # with its worker is retried only after this.
    record_timeout_s: float = Field(default=30.0, gt=0)
    # A watched machine's workflow starts afresh (continue-as-new) this often, so the history of a
    # machine that lives for months stays small; sooner if Temporal suggests it.
    continue_as_new_after_s: float = Field(default=86400.0, gt=0)


class CloudTarget(BaseModel):
    """Which account to talk to: the connection row holds options and encrypted credentials."""

    connection_id: str
    cloud: str


class AllocateRequest(BaseModel):
    """What a user asked for. `targets` are every connection planning may use (resolved by the API
    from `cloud`, `clouds` or `connection_id`, or every connected cloud); `connection_id` and
    `cloud` name the first of them (and are all that allocations started before had)."""

    allocation_id: str
    connection_id: str
    cloud: str
    targets: list[CloudTarget] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)  # e.g. a cloud skipped because it needs a region
    project: str = "default"
    name: str | None = None
    gpu: str | None = None
    gpu_count: int | None = Field(default=None, ge=1)
    region: str | None = None
    spot: bool | None = None
    # Only this instance type: the backend's default offer (picked in its offers browser) when the
    # request named that backend and no GPU.
    instance_type: str | None = None
    # Only offers at or under this $/hr (a managed job's cap); None: any price.
    max_price_per_hour: float | None = Field(default=None, gt=0)
    ports: list[int] = Field(default_factory=list)
    image: str | None = None
    k3s: bool = True
    # Networks (normalised CIDRs) the Kubernetes API port is opened to on clouds whose k8s access is
    # direct (the API's default: the address the request came from); empty: not opened.
    k8s_api_from: list[str] = Field(default_factory=list)
    ssh_public_keys: list[str] = Field(min_length=1)
    timing: Timing = Field(default_factory=Timing)
    # How long the machine may live: the cloud stops it then (only clouds whose capabilities enforce a
    # lifetime take it: Modal's sandbox timeout); None: as long as the cloud lets it.
    max_hours: float | None = Field(default=None, gt=0)
    # The dead-man switch (activities/lease.py): hours the machine lives on without gpuprov renewing
    # its lease before it ends itself, where its cloud can (Capabilities.self_end); 0: no lease. The
    # API resolves it (request, else the project's default, else 12); None: started before leases.
    lease_hours: float | None = Field(default=None, ge=0, le=720)

    def all_targets(self) -> list[CloudTarget]:
        return self.targets or [CloudTarget(connection_id=self.connection_id, cloud=self.cloud)]

    def lifetime_s(self) -> int | None:
        """max_hours in whole seconds (at least one), as the create activity hands it to the cloud."""
        return None if self.max_hours is None else max(1, round(self.max_hours * 3600))


class AttemptRecord(BaseModel):
    seq: int
    offer: Offer
    key: str
    outcome: AttemptOutcome
    reason: str | None = None


class GpuInfo(BaseModel):
    index: int
    name: str
    memory_mib: int | None = None
    uuid: str | None = None
    driver_version: str | None = None


class AllocationState(BaseModel):
    """What the `state` query returns: the phase and the decision history."""

    allocation_id: str
    phase: Phase
    attempts: list[AttemptRecord] = Field(default_factory=list)
    target: CloudTarget | None = None  # the connection of the current (last) attempt
    ref: InstanceRef | None = None
    offer: Offer | None = None
    host: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    error: str | None = None
    preempted: bool = False  # lost because the cloud reclaimed it (a spot interruption, an eviction…)


class AllocationInput(BaseModel):
    """AllocationWorkflow's input: the request, and the state carried across continue-as-new
    (None on the first run: allocate first)."""

    request: AllocateRequest
    state: AllocationState | None = None


class MachineLost(BaseModel):
    """The watch's report: the cloud shows the machine gone, preempted or broken."""

    reason: str
    preempted: bool = False  # the cloud said it reclaimed the machine (InstanceStatus.preempted)


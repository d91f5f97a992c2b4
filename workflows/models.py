"""Typed inputs and outputs of the workflows, shared with the API and CLI.

Workflows carry connection ids, never credentials.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from providers.base import InstanceRef, Offer

TASK_QUEUE = "gpuprov"


class Phase(StrEnum):
    VALIDATE = "validate"
    PLAN = "plan"
    CREATE = "create"
    WAIT_RUNNING = "wait_running"
    PORTS = "ports"
    SSH = "ssh"
    K3S = "k3s"
    GPU_CHECK = "gpu_check"
    READY = "ready"
    COMPENSATING = "compensating"
    FAILED = "failed"
    TERMINATING = "terminating"
    TERMINATED = "terminated"


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


class AllocateRequest(BaseModel):
    allocation_id: str
    connection_id: str
    cloud: str
    installation_id: str
    project: str = "default"
    name: str | None = None
    gpu: str | None = None
    gpu_count: int | None = Field(default=None, ge=1)
    region: str | None = None
    spot: bool | None = None
    ports: list[int] = Field(default_factory=list)
    image: str | None = None
    k3s: bool = True
    ssh_public_keys: list[str] = Field(min_length=1)
    timing: Timing = Field(default_factory=Timing)


class AttemptRecord(BaseModel):
    seq: int
    offer: Offer
    key: str
    outcome: str  # created|capacity|quota|failed|cancelled
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
    ref: InstanceRef | None = None
    offer: Offer | None = None
    host: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    error: str | None = None


class TerminateRequest(BaseModel):
    allocation_id: str
    timing: Timing = Field(default_factory=Timing)


class TerminateResult(BaseModel):
    allocation_id: str
    terminated: bool  # False: the allocation never reached a create, so nothing was on the cloud


class ConnectRequest(BaseModel):
    connection_id: str


class ConnectResult(BaseModel):
    """What ConnectWorkflow returns; the Connection row holds the same outcome."""

    connection_id: str
    ok: bool
    account: str | None = None
    reason: str | None = None


def allocate_workflow_id(allocation_id: str) -> str:
    return f"allocate-{allocation_id}"


def terminate_workflow_id(allocation_id: str) -> str:
    return f"terminate-{allocation_id}"

"""Typed inputs and outputs of the activities: one model in, one model (or None) out.

Pure pydantic (no I/O imports), so workflows can import it inside the sandbox.
"""

from __future__ import annotations

from pydantic import BaseModel

from providers.base import InstanceRef, LaunchSpec, Offer, OfferQuery
from workflows.models import AllocateRequest, AllocationState


class CloudTarget(BaseModel):
    """Which account to talk to: the connection row holds endpoint and encrypted credentials."""

    connection_id: str
    cloud: str


class ValidateInput(BaseModel):
    request: AllocateRequest


class PlanInput(BaseModel):
    target: CloudTarget
    query: OfferQuery


class CreateInput(BaseModel):
    target: CloudTarget
    offer: Offer
    spec: LaunchSpec  # the installation's own public key is added by the activity
    heartbeat_every_s: float = 1.0


class WaitRunningInput(BaseModel):
    target: CloudTarget
    ref: InstanceRef
    poll_interval_s: float = 2.0
    heartbeat_every_s: float = 1.0


class SshTarget(BaseModel):
    host: str
    port: int = 22
    user: str = "root"
    poll_interval_s: float = 2.0


class TerminateInput(BaseModel):
    target: CloudTarget
    key: str
    ref: InstanceRef | None = None  # None when the create answer was lost: find by key
    poll_interval_s: float = 2.0
    heartbeat_every_s: float = 1.0


class RecordAllocationInput(BaseModel):
    """A snapshot of the allocate workflow; the activity upserts the Instance row and attempts."""

    request: AllocateRequest
    state: AllocationState
    status: str  # provisioning|ready|failed|terminating|terminated


class RecordStatusInput(BaseModel):
    allocation_id: str
    status: str
    phase: str
    error: str | None = None
    note: str | None = None


class InstanceRecord(BaseModel):
    """What TerminateWorkflow needs from the Instance row."""

    allocation_id: str
    connection_id: str
    cloud: str
    status: str
    key: str | None = None
    ref: InstanceRef | None = None


class AllocationIdInput(BaseModel):
    allocation_id: str
    poll_interval_s: float = 1.0


class ConnectionIdInput(BaseModel):
    connection_id: str
    reason: str | None = None


"""SSH / on-prem fleets: the probe workflow's inputs and each host's answer.

Only ids travel: the fleet's private key stays sealed in the database, and the activity that
logs in reads it there by fleet id, so no key (not even sealed) is in workflow history.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class FleetProbeRequest(BaseModel):
    fleet_id: str
    probe_id: str  # the save that started it: answers are stored only while it is the fleet's latest
    connect_timeout_s: float = 10.0  # per SSH connection (bastion and host)


class FleetHostInput(BaseModel):
    fleet_id: str
    probe_id: str
    host_id: str
    connect_timeout_s: float = 10.0


class FleetHostIds(BaseModel):
    host_ids: list[str] = Field(default_factory=list)  # empty: the fleet was deleted meanwhile


class HostProbe(BaseModel):
    """What one host answered. reachable=False comes with `reason` and nothing else."""

    host_id: str
    reachable: bool
    reason: str | None = None
    gpu_vendor: str | None = None  # nvidia, amd, gaudi
    gpu_name: str | None = None
    gpu_count: int = 0
    gpu_memory_gb: int | None = None  # per GPU
    gpu_summary: str | None = None  # "2× H100 (80GB) · 160GB total"; "no GPU" when none found
    docker: bool | None = None
    sudo: bool | None = None
    tcp_forwarding: bool | None = None
    # The host keys the servers presented (OpenSSH public key lines, not secret): pinned on the
    # first successful probe. The host's only when it was reachable; the bastion's once it let us in.
    host_key: str | None = None
    bastion_host_key: str | None = None


class FleetProbeResult(BaseModel):
    fleet_id: str
    hosts: list[HostProbe] = Field(default_factory=list)

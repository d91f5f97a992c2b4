"""Request and response bodies of the compute API. Requests forbid unknown fields, so a typo
(`gpu_cout`) is a 422 naming the field instead of a silently ignored option."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import asyncssh
from pydantic import BaseModel, ConfigDict, Field, field_validator

from store.models import Attempt, Connection, Instance, InstanceEvent

Name = Annotated[str, Field(min_length=1, max_length=100)]


def aware(ts: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every stored timestamp is UTC."""
    if ts is not None and ts.tzinfo is None:
        return ts.replace(tzinfo=UTC)
    return ts


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- connections


class ConnectionCreate(Strict):
    provider: Name
    name: Name | None = None
    credentials: dict[str, Annotated[str, Field(max_length=10_000)]] = Field(default_factory=dict)
    endpoint: Annotated[str, Field(pattern=r"^https?://\S+$", max_length=2000)] | None = None


class ConnectionOut(BaseModel):
    """A connection as shown to users: never its credentials."""

    id: str
    provider: str
    name: str
    account: str | None
    status: str
    endpoint: str | None
    error: str | None = None
    created_at: datetime | None

    @classmethod
    def of(cls, row: Connection) -> ConnectionOut:
        return cls(id=row.id, provider=row.provider, name=row.name, account=row.account, status=row.status,
                   endpoint=row.endpoint, error=row.error, created_at=aware(row.created_at))


# --------------------------------------------------------------------------- instances


class InstanceCreate(Strict):
    cloud: Name
    gpu: Annotated[str, Field(min_length=1, max_length=40)] | None = None
    gpu_count: Annotated[int, Field(ge=1, le=64)] | None = None
    region: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    spot: bool | None = None
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list, max_length=32)
    image: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    k3s: bool = True
    ssh_public_keys: list[str] = Field(min_length=1, max_length=20)
    name: Annotated[str, Field(min_length=1, max_length=63)] | None = None
    project: Annotated[str, Field(min_length=1, max_length=63)] = "default"

    @field_validator("ssh_public_keys")
    @classmethod
    def _openssh_keys(cls, keys: list[str]) -> list[str]:
        cleaned = []
        for i, key in enumerate(keys):
            try:
                asyncssh.import_public_key(key.strip())
            except (asyncssh.KeyImportError, ValueError, TypeError) as e:
                raise ValueError(f"ssh_public_keys[{i}] is not an OpenSSH public key: {e}") from None
            cleaned.append(key.strip())
        return cleaned

    @field_validator("ports")
    @classmethod
    def _unique_ports(cls, ports: list[int]) -> list[int]:
        return sorted(set(ports))


class InstanceAccepted(BaseModel):
    id: str
    status: str


class Ssh(BaseModel):
    host: str
    port: int
    user: str


class AttemptOut(BaseModel):
    seq: int
    provider: str
    instance_type: str
    region: str
    spot: bool
    price_per_hour: float
    outcome: str
    reason: str | None
    at: datetime | None

    @classmethod
    def of(cls, row: Attempt) -> AttemptOut:
        return cls(seq=row.seq, provider=row.provider, instance_type=row.instance_type, region=row.region,
                   spot=row.spot, price_per_hour=row.price_per_hour, outcome=row.outcome, reason=row.reason,
                   at=aware(row.at))


class EventOut(BaseModel):
    """One status/phase transition; `id` orders them (pass the last one seen as `after`)."""

    id: int
    status: str
    phase: str
    at: datetime | None

    @classmethod
    def of(cls, row: InstanceEvent) -> EventOut:
        assert row.id is not None
        return cls(id=row.id, status=row.status, phase=row.phase, at=aware(row.at))


class InstanceOut(BaseModel):
    id: str
    name: str | None
    project: str
    cloud: str
    connection_id: str
    status: str  # provisioning|ready|failed|terminating|terminated
    phase: str
    requested: dict[str, Any]  # gpu, gpu_count, region, spot as asked
    instance_type: str | None
    region: str | None  # where it landed
    price_per_hour: float | None
    ssh: Ssh | None
    gpus: list[dict[str, Any]]
    attempts: list[AttemptOut] = Field(default_factory=list)
    events: list[EventOut] = Field(default_factory=list)
    error: str | None
    note: str | None
    created_at: datetime | None
    updated_at: datetime | None
    ready_at: datetime | None
    terminated_at: datetime | None

    @classmethod
    def of(cls, row: Instance, attempts: list[Attempt] | None = None,
           events: list[InstanceEvent] | None = None) -> InstanceOut:
        ssh = None
        if row.ssh_host and row.ssh_port:
            ssh = Ssh(host=row.ssh_host, port=row.ssh_port, user=row.ssh_user or "root")
        return cls(
            id=row.id, name=row.name, project=row.project, cloud=row.provider,
            connection_id=row.connection_id, status=row.status, phase=row.phase,
            requested={"gpu": row.gpu, "gpu_count": row.gpu_count, "region": row.region, "spot": row.spot},
            instance_type=row.instance_type, region=row.offer_region, price_per_hour=row.price_per_hour,
            ssh=ssh, gpus=row.gpus_found or [], attempts=[AttemptOut.of(a) for a in attempts or []],
            events=[EventOut.of(e) for e in events or []],
            error=row.error, note=row.note, created_at=aware(row.created_at),
            updated_at=aware(row.updated_at), ready_at=aware(row.ready_at),
            terminated_at=aware(row.terminated_at),
        )

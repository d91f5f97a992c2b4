"""Request and response bodies that more than one router uses: `InstanceCreate` (POST /instances,
jobs, the project defaults, planning in api/placement.py), `ConnectionRemoval` (connections and
providers), `CredentialFieldOut` and `SupportOut` (the clouds and the connect catalog), `GpuOut`,
`PickOut` and `gpu_label` (the offers table and the Modal picker), and `instance_gpu_label`
(instances and workloads). A body only one router uses lives beside that router.

Responses are the API's own models, apart from the provider contract's (`providers.base`), so the
contract can change without changing what clients read.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from api.fields import Network, PlacementId, Printable, Strict, Timestamp, aware, openssh_key_lines
from providers import support
from store.models import BackendPick, Instance


class ConnectionRemoval(BaseModel):
    """A removal under way: DisconnectWorkflow deletes the connection once its machines are gone."""

    id: str
    status: str


class CredentialFieldOut(BaseModel):
    """One field of a cloud's connect form."""

    name: str
    label: str
    kind: str  # text | secret | file | toggle | select
    required: bool
    default: Any = None
    help: str | None = None


class SupportOut(BaseModel):
    """A cloud's support status, derived from the committed acceptance results
    (providers/support.py): `supported` only after a passing real-account acceptance run on its
    current adapter version; `simulated` when the latest passing run was against a simulation;
    `failing` when the latest run failed (`detail` names the step); `untested` when nothing ran on
    the current adapter version."""

    status: Literal["supported", "simulated", "failing", "untested"]
    detail: str
    adapter_version: str | None = Field(description="a short hash of the adapter's source and its "
                                                    "client library's exact pin; null: no adapter here")
    last_run_at: Timestamp | None = Field(description="the latest acceptance run on this adapter version")

    @classmethod
    def of(cls, status: support.SupportStatus) -> SupportOut:
        return cls(status=status.status, detail=status.detail, adapter_version=status.adapter_version,
                   last_run_at=status.last_run_at)

    @classmethod
    def no_adapter(cls, reason: str) -> SupportOut:
        return cls(status="untested", detail=reason, adapter_version=None, last_run_at=None)


class GpuOut(BaseModel):
    name: str
    count: int
    memory_gib: float | None  # per GPU


def gpu_label(gpu: GpuOut | None) -> str | None:
    """The offers table's GPU cell: `2× H100 (80GB)`, `1× A10`; None for a CPU-only machine."""
    if gpu is None:
        return None
    memory = f" ({gpu.memory_gib:g}GB)" if gpu.memory_gib else ""
    return f"{gpu.count}× {gpu.name}{memory}"


class PickOut(BaseModel):
    """The backend's default offer in this project: a request naming this backend with no GPU and no
    instance type gets this instance type in this region."""

    provider: str
    instance_type: str
    region: str
    spot: bool
    gpu_label: str | None
    price_per_hour: float | None
    picked_at: Timestamp | None

    @classmethod
    def of(cls, row: BackendPick) -> PickOut:
        return cls(provider=row.provider, instance_type=row.instance_type, region=row.region, spot=row.spot,
                   gpu_label=row.gpu_label, price_per_hour=row.price_per_hour,
                   picked_at=aware(row.picked_at))


class InstanceCreate(Strict):
    """Where planning may look: `connection_id` (that connection), `cloud` (every connected
    connection of it; `ssh`: every SSH fleet of the project), `clouds` (every connected connection
    of those), or none of them (every connected cloud; fleets only when named). At most one of the
    three."""

    cloud: PlacementId | None = None
    clouds: list[PlacementId] | None = Field(None, min_length=1, max_length=50)
    connection_id: Annotated[str, Field(min_length=1, max_length=100), Printable] | None = None
    gpu: Annotated[str, Field(min_length=1, max_length=40), Printable] | None = None
    gpu_count: Annotated[int, Field(ge=1, le=64)] | None = None
    region: Annotated[str, Field(min_length=1, max_length=64), Printable] | None = None
    spot: bool | None = None
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(default_factory=list, max_length=32)
    image: Annotated[str, Field(min_length=1, max_length=500), Printable] | None = None
    k3s: bool = True
    # Who may reach the Kubernetes API (6443) directly on clouds whose k8s access is direct: networks,
    # normalised. null (the default): the address this request came from. []: nobody (the SSH tunnel,
    # `gpuprov tunnel`, still reaches it). Widen with your office's network, e.g. ["203.0.113.0/24"].
    k8s_api_from: list[Network] | None = Field(None, max_length=16)
    ssh_public_keys: list[str] = Field(min_length=1, max_length=20)
    name: Annotated[str, Field(min_length=1, max_length=63), Printable] | None = None
    # How long the machine may live, in hours: the cloud stops it then. Only clouds that enforce a
    # lifetime take it (capability `max_lifetime_h`: Modal, up to 24 h); others are refused or skipped.
    # Strict: a JSON number (neither "2" nor true).
    max_hours: Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)] | None = None
    # The machine's lease (dead-man switch), in hours: it ends itself that long after gpuprov last
    # renewed it, where its cloud can (capability `self_end`). 0: off. None: the project's default
    # (PUT /api/compute/defaults), else 12.
    lease_hours: Annotated[float, Field(ge=0, le=720, allow_inf_nan=False, strict=True)] | None = None

    @model_validator(mode="after")
    def _one_selector(self) -> InstanceCreate:
        given = [n for n in ("cloud", "clouds", "connection_id") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one of cloud, clouds and connection_id "
                             f"(got {' and '.join(given)})")
        return self

    @field_validator("clouds")
    @classmethod
    def _distinct_clouds(cls, clouds: list[str] | None) -> list[str] | None:
        return list(dict.fromkeys(clouds)) if clouds is not None else None

    @field_validator("ssh_public_keys")
    @classmethod
    def _openssh_keys(cls, keys: list[str]) -> list[str]:
        return openssh_key_lines(keys)

    @field_validator("ports")
    @classmethod
    def _unique_ports(cls, ports: list[int]) -> list[int]:
        return sorted(set(ports))

    @field_validator("k8s_api_from")
    @classmethod
    def _unique_networks(cls, networks: list[str] | None) -> list[str] | None:
        return list(dict.fromkeys(networks)) if networks is not None else None


def instance_gpu_label(row: Instance) -> str | None:
    """`2× NVIDIA H100` as the GPU check found them, else as asked (`1× H100`)."""
    found = [str(g.get("name")) for g in row.gpus_found or [] if isinstance(g, dict) and g.get("name")]
    if found:
        return f"{len(found)}× {found[0]}"
    if row.gpu:
        return f"{row.gpu_count or 1}× {row.gpu}"
    return None

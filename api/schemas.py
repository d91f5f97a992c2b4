"""Request and response bodies of the compute API. Requests forbid unknown fields, so a typo
(`gpu_cout`) is a 422 naming the field instead of a silently ignored option.

Responses are the API's own models, apart from the provider contract's (`providers.base`), so the
contract can change without changing what clients read. Request fields naming a cloud are checked
against the registry when the request arrives, and OpenAPI shows them as an enum of its clouds.
"""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime
from datetime import date as date_
from typing import Annotated, Any, Literal

from cryptography import x509
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from sqlalchemy.orm import object_session

from api.errors import shown
from api.strict_json import loc_part
from messages.enums import AllocationStatus
from providers import endpoints, future, host_keys, listing, registry, ssh_keys
from providers.base import Capabilities, CloudProvider, Offer
from store import host_keys as store_host_keys
from store.models import ApiToken, Attempt, BackendPick, Connection, Instance, InstanceEvent
from store.models import Project as ProjectRow

# Characters that act on a terminal or reorder what it shows: C0/C1 controls (ESC sequences, \r,
# \x9b CSI), format characters (bidi overrides U+202A-202E and U+2066-2069, zero-width characters),
# surrogates, and the line/paragraph separators. Names are printed by the CLI and the Web UI.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def _printable(value: str) -> str:
    for i, ch in enumerate(value):
        if unicodedata.category(ch) in _UNPRINTABLE:
            raise ValueError(f"must not contain control or formatting characters "
                             f"(U+{ord(ch):04X} at position {i})")
    return value


Printable = AfterValidator(_printable)  # for every free-text name or label a request gives
Name = Annotated[str, Field(min_length=1, max_length=100), Printable]
MAX_CA_BUNDLE = 64_000  # characters of PEM: a private CA chain, not a system trust store


def _known_cloud(value: str) -> str:
    known = registry.known()
    if value not in known:
        if (why := future.not_supported(value)) is not None:  # listed in the connect grid, no adapter
            raise ValueError(why)
        raise ValueError(f"unknown cloud {shown(value)}; known: {', '.join(known)}")
    return value


def _cloud_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = registry.known()  # when the schema is generated: every registered cloud


# A cloud id of the registry: validated per request (clouds registered later count), an enum in OpenAPI.
CloudId = Annotated[str, Field(min_length=1, max_length=100, json_schema_extra=_cloud_enum),
                    AfterValidator(_known_cloud)]



def _placeable_cloud(value: str) -> str:
    return value if registry.is_fleet(value) else _known_cloud(value)


def _placeable_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = registry.placeable()


# Where an allocation may be placed: a cloud of the registry, or a fleet kind (`ssh`: the project's
# SSH fleets, which are not connections).
PlacementId = Annotated[str, Field(min_length=1, max_length=100, json_schema_extra=_placeable_enum),
                        AfterValidator(_placeable_cloud)]

# Backends whose offers page is not the offer table but a picker of their own, served by their own
# routes (`GET /backends/<cloud>/offers`, `POST .../pick`), which match before the table's. Each
# picker's module adds its cloud as it is imported (api/routers/modal_picker.py, which also has
# the DELETE .../pick): cloud -> what its picker is called.
OWN_PICKER: dict[str, str] = {}


def _table_backend(value: str) -> str:
    if value in OWN_PICKER:
        raise ValueError(f"{value} has {OWN_PICKER[value]}: GET /api/compute/backends/{value}/offers")
    return value


def _table_backend_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = [c for c in registry.placeable() if c not in OWN_PICKER]


# A backend whose page is the offer table: a placement id without those that have a picker of their own.
TableBackendId = Annotated[str, Field(min_length=1, max_length=100, json_schema_extra=_table_backend_enum),
                           AfterValidator(_placeable_cloud), AfterValidator(_table_backend)]

# A project is an identifier (it becomes a search attribute and scopes idempotency keys), not free text.
PROJECT_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
Project = Annotated[str, Field(pattern=PROJECT_PATTERN, description="a slug: a-z, 0-9 and -, up to 63")]

# The `?status=` filter: a status, or `active` — every status in which a machine may exist and bill
# (provisioning, ready, terminating): the Compute page's "Active cloud instances".
ACTIVE = "active"
InstanceStatusFilter = Literal["active", "provisioning", "ready", "terminating", "terminated", "failed",
                               "lost"]


def aware(ts: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; every stored timestamp is UTC."""
    if ts is not None and ts.tzinfo is None:
        return ts.replace(tzinfo=UTC)
    return ts


def _utc(ts: datetime) -> datetime:
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


# Every timestamp the API returns (the schema's `date-time`, which carries its offset): a naive
# value (SQLite's, every stored one UTC) becomes UTC, so it is written `…+00:00`, never zoneless.
# Each response model's datetime field is one of these (tests/api/test_timestamps.py checks).
Timestamp = Annotated[datetime, AfterValidator(_utc)]


def openssh_key_lines(keys: list[str]) -> list[str]:
    """One OpenSSH public key line per entry, passed on re-serialised from the parsed key
    (providers/ssh_keys.py): never the user's text, never a private key. ValueError naming the entry."""
    cleaned = []
    for i, key in enumerate(keys):
        try:
            cleaned.append(ssh_keys.public_key_line(key))
        except ssh_keys.KeyRefused as e:
            raise ValueError(f"ssh_public_keys[{i}]: {e}") from None
    return cleaned


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- projects and tokens


class ProjectCreate(Strict):
    id: Project


class ProjectOut(BaseModel):
    id: str
    created_at: Timestamp | None

    @classmethod
    def of(cls, row: ProjectRow) -> ProjectOut:
        return cls(id=row.id, created_at=aware(row.created_at))


class TokenCreate(Strict):
    label: Name | None = Field(None, description="what the token is for, e.g. `ci`")


class TokenOut(BaseModel):
    """A project token as listed: never its value (only its hash is kept)."""

    id: str
    project: str
    label: str | None
    created_at: Timestamp | None
    revoked_at: Timestamp | None

    @classmethod
    def of(cls, row: ApiToken) -> TokenOut:
        return cls(id=row.id, project=row.project, label=row.label, created_at=aware(row.created_at),
                   revoked_at=aware(row.revoked_at))


class TokenCreated(TokenOut):
    token: str = Field(description="the token: shown this once, not kept (only its hash is)")


# --------------------------------------------------------------------------- connections


CredentialName = Annotated[str, Field(min_length=1, max_length=100), Printable]
MAX_CREDENTIAL_VALUE = 64_000


class ConnectionCreate(Strict):
    provider: CloudId
    name: Name | None = None
    credentials: dict[CredentialName, Any] = Field(
        default_factory=dict, max_length=50,
        description="fields of the cloud's credential form (GET /api/compute/clouds)")
    endpoint: Annotated[str, Field(max_length=2000, description=(
        "API base URL: https on one of the cloud's documented API hosts, or under a prefix the "
        "administrator allows (GPUPROV_ALLOWED_ENDPOINTS); no user:pass@, query or fragment"))] | None = None
    ca_bundle: Annotated[str, Field(min_length=1, max_length=MAX_CA_BUNDLE)] | None = Field(
        None, description="PEM certificates to trust for the endpoint, besides the system's")

    @field_validator("credentials")
    @classmethod
    def _scalar_values(cls, credentials: dict[str, Any]) -> dict[str, Any]:
        """The cloud's credentials model (providers/credentials.py) decides names and types when the
        request is handled; here only the shape and size, naming the field and never its value."""
        for key, value in credentials.items():
            name = loc_part(key)
            if not isinstance(value, str | bool | int | float):
                raise ValueError(f"credentials.{name} must be a string, a number or true/false")
            if isinstance(value, str) and len(value) > MAX_CREDENTIAL_VALUE:
                raise ValueError(f"credentials.{name} is longer than {MAX_CREDENTIAL_VALUE} characters")
        return credentials

    @field_validator("endpoint")
    @classmethod
    def _endpoint_shape(cls, url: str | None) -> str | None:
        """The rules of every endpoint; which hosts are allowed is the route's check (it needs the
        administrator's setting), done again wherever an adapter is built."""
        if url is not None:
            try:
                endpoints.parse(url)
            except endpoints.EndpointError as e:
                raise ValueError(f"endpoint {e}") from None
        return url

    @field_validator("ca_bundle")
    @classmethod
    def _pem_certificates(cls, pem: str | None) -> str | None:
        if pem is None:
            return None
        try:
            x509.load_pem_x509_certificates(pem.encode())
        except ValueError:
            raise ValueError("ca_bundle is not PEM certificates (-----BEGIN CERTIFICATE----- ...)") from None
        return pem.strip() + "\n"


class ConnectionOut(BaseModel):
    """A connection as shown to users: never its credentials."""

    id: str
    project: str
    provider: str
    name: str
    account: str | None
    status: str
    endpoint: str | None
    has_ca_bundle: bool = False
    error: str | None = None
    created_at: Timestamp | None

    @classmethod
    def of(cls, row: Connection) -> ConnectionOut:
        return cls(id=row.id, project=row.project, provider=row.provider, name=row.name, account=row.account,
                   status=row.status,
                   endpoint=row.endpoint, has_ca_bundle=bool(row.ca_bundle),
                   error=row.error, created_at=aware(row.created_at))


class ConnectionRemoval(BaseModel):
    """A removal under way: DisconnectWorkflow deletes the connection once its machines are gone."""

    id: str
    status: str


# --------------------------------------------------------------------------- clouds and offers


class CapabilitiesOut(BaseModel):
    """What a cloud can do, checked before any planning."""

    k3s: str  # cloud-init | ssh | none
    k3s_reason: str | None
    k8s_api: bool
    ports: bool
    ports_reason: str | None
    spot: bool
    custom_image: bool
    login_user: str
    side_resources: list[str]
    regions: list[str]  # empty: any region the cloud names
    max_lifetime_h: float | None = None  # the longest max_hours it takes; None: it takes none

    @classmethod
    def of(cls, caps: Capabilities) -> CapabilitiesOut:
        return cls(k3s=caps.k3s, k3s_reason=caps.k3s_reason, k8s_api=caps.k8s_api, ports=caps.ports,
                   ports_reason=caps.ports_reason, spot=caps.spot, custom_image=caps.custom_image,
                   login_user=caps.login_user, side_resources=list(caps.side_resources),
                   regions=list(caps.regions), max_lifetime_h=caps.max_lifetime_h)


class CredentialFieldOut(BaseModel):
    """One field of a cloud's connect form."""

    name: str
    label: str
    kind: str  # text | secret | file | toggle | select
    required: bool
    default: Any = None
    help: str | None = None


class CloudOut(BaseModel):
    id: str
    display_name: str
    available: bool = True  # False: its adapter (or SDK) is not installed here; `reason` says why
    reason: str | None = None
    capabilities: CapabilitiesOut | None
    credentials: list[CredentialFieldOut] = Field(default_factory=list,
                                                  description="the connect form, one entry per field")

    @classmethod
    def of(cls, cloud: str, adapter: type[CloudProvider]) -> CloudOut:
        caps = adapter.capabilities
        return cls(id=cloud, display_name=listing.of(adapter).display_name or cloud,
                   capabilities=CapabilitiesOut.of(caps),
                   credentials=[CredentialFieldOut(**f) for f in adapter.credentials_model.form()])

    @classmethod
    def unavailable(cls, cloud: str, reason: str) -> CloudOut:
        return cls(id=cloud, display_name=cloud, available=False, reason=reason, capabilities=None)


class GpuOut(BaseModel):
    name: str
    count: int
    memory_gib: float | None  # per GPU


class OfferOut(BaseModel):
    """One live offer: launchable now unless `available` is false."""

    provider: str
    instance_type: str
    gpu: GpuOut | None  # None: a CPU-only machine
    vcpus: int
    memory_gib: float
    region: str
    zone: str | None
    price_per_hour: float  # USD
    spot: bool
    available: bool
    connection_id: str | None = None  # the connection that offered it (cross-cloud offers)

    @classmethod
    def of(cls, offer: Offer) -> OfferOut:
        gpu = offer.gpu
        return cls(provider=offer.provider, instance_type=offer.instance_type,
                   gpu=GpuOut(name=gpu.name, count=gpu.count, memory_gib=gpu.memory_gib) if gpu else None,
                   vcpus=offer.vcpus, memory_gib=offer.memory_gib, region=offer.region, zone=offer.zone,
                   price_per_hour=offer.price_per_hour, spot=offer.spot, available=offer.available,
                   connection_id=offer.connection_id)


class CatalogFieldOut(CredentialFieldOut):
    """One field of a provider's connect form, as the connect page draws it. `secret`: its value is
    never shown back (nor pre-filled); a secret field's `default` is always null."""

    secret: bool = False


class CatalogProviderOut(BaseModel):
    """One card of the connect grid and what its connect page shows."""

    key: str = Field(description="the provider's id: `provider` of POST /api/compute/connections")
    name: str
    tagline: str
    how_to_connect: str = Field(description="provider-specific setup: where to create the key")
    billed_note: bool = Field(description="show the amber \"billed to your account\" note (all but SSH)")
    billed_note_text: str | None
    available: bool = Field(description="false: no adapter here yet (connecting it answers 422)")
    reason: str | None = None  # why it is not available
    credentials: list[CatalogFieldOut] = Field(description="the credential form, one entry per field")


def gpu_label(gpu: GpuOut | None) -> str | None:
    """The offers table's GPU cell: `2× H100 (80GB)`, `1× A10`; None for a CPU-only machine."""
    if gpu is None:
        return None
    memory = f" ({gpu.memory_gib:g}GB)" if gpu.memory_gib else ""
    return f"{gpu.count}× {gpu.name}{memory}"


class BackendOfferOut(OfferOut):
    """An offer with the offers table's columns: Instance, GPU, vCPUs, RAM, Region, $/hr (+ spot)."""

    instance: str = Field(description="the instance / machine type (= instance_type)")
    gpu_label: str | None = Field(description="`N× name (memory)`, or null for CPU-only")
    ram: str = Field(description="system memory for people, e.g. `64 GB` (memory_gib in GiB)")

    @classmethod
    def of(cls, offer: Offer) -> BackendOfferOut:
        base = OfferOut.of(offer)
        return cls(**base.model_dump(), instance=base.instance_type, gpu_label=gpu_label(base.gpu),
                   ram=f"{base.memory_gib:g} GB")


class PickCreate(Strict):
    """The offer picked in the offers table: the backend's default for this project from now on."""

    instance_type: Annotated[str, Field(min_length=1, max_length=200), Printable]
    region: Annotated[str, Field(min_length=1, max_length=64), Printable]
    spot: bool = False
    gpu: Annotated[str, Field(max_length=100), Printable] | None = Field(
        None, description="the GPU cell as shown (display only: the offer's own is stored)")


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


class BackendOffersPage(BaseModel):
    """The offers browser of one backend: its title, a page of offers cheapest first, and the
    offer picked as its default (null: none)."""

    title: str = Field(description="`{Provider} — Available Instances`")
    items: list[BackendOfferOut]
    next_cursor: str | None = None
    picked: PickOut | None = None


# --------------------------------------------------------------------------- instances


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
    ssh_public_keys: list[str] = Field(min_length=1, max_length=20)
    name: Annotated[str, Field(min_length=1, max_length=63), Printable] | None = None
    # How long the machine may live, in hours: the cloud stops it then. Only clouds that enforce a
    # lifetime take it (capability `max_lifetime_h`: Modal, up to 24 h); others are refused or skipped.
    # Strict: a JSON number (neither "2" nor true).
    max_hours: Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)] | None = None

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


class InstanceAccepted(BaseModel):
    id: str
    status: str


class HostKeyOut(BaseModel):
    """A host key gpuprov pinned (it checks every login against it): for the user's own SSH."""

    fingerprint: str  # "SHA256:…"
    known_hosts: str  # "<host or [host]:port> <keytype> <base64>", a line for a known_hosts file

    @classmethod
    def of(cls, host: str, port: int, key_line: str | None) -> HostKeyOut | None:
        if not key_line:
            return None
        return cls(fingerprint=str(host_keys.fingerprint(key_line)),
                   known_hosts=store_host_keys.known_hosts_line(host, port, key_line))


class SshBastion(BaseModel):
    """The proxy jump a fleet host is reached through (`ssh -J user@host:port`), with its pinned key."""

    host: str
    port: int
    user: str
    host_key: HostKeyOut | None = None


class Ssh(BaseModel):
    host: str
    port: int
    user: str
    bastion: SshBastion | None = None  # a fleet host behind a bastion


class AttemptOut(BaseModel):
    seq: int
    provider: str
    instance_type: str
    region: str
    spot: bool
    price_per_hour: float
    outcome: str
    reason: str | None
    at: Timestamp | None

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
    at: Timestamp | None

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
    created_at: Timestamp | None
    updated_at: Timestamp | None
    ready_at: Timestamp | None
    terminated_at: Timestamp | None
    gpu_label: str | None = None  # "2× NVIDIA H100 80GB HBM3" as found, else as asked ("2× H100")
    uptime_s: float | None = None  # since ready, while it is not ended
    # The machine's SSH host key once gpuprov has seen it (pinned: every login of gpuprov's is
    # checked against it); a fleet host's is the fleet's pin. `gpuprov ssh <id>` logs in with it.
    host_key: HostKeyOut | None = None

    @classmethod
    def of(cls, row: Instance, attempts: list[Attempt] | None = None,
           events: list[InstanceEvent] | None = None,
           route: store_host_keys.MachineRoute | None = None) -> InstanceOut:
        ssh, host_key = None, None
        if row.ssh_host and row.ssh_port:
            ssh = Ssh(host=row.ssh_host, port=row.ssh_port, user=row.ssh_user or "root")
            route = route or _route_of(row)
            host_key = HostKeyOut.of(row.ssh_host, row.ssh_port, route.host_key)
            if route.bastion is not None:
                b = route.bastion
                ssh.bastion = SshBastion(host=b.host, port=b.port, user=b.user,
                                         host_key=HostKeyOut.of(b.host, b.port, b.host_key))
        return cls(
            id=row.id, name=row.name, project=row.project, cloud=row.provider,
            connection_id=row.connection_id, status=row.status, phase=row.phase,
            requested={"gpu": row.gpu, "gpu_count": row.gpu_count, "region": row.region, "spot": row.spot},
            instance_type=row.instance_type, region=row.offer_region, price_per_hour=row.price_per_hour,
            ssh=ssh, gpus=row.gpus_found or [], attempts=[AttemptOut.of(a) for a in attempts or []],
            events=[EventOut.of(e) for e in events or []],
            error=row.error, note=row.note, created_at=aware(row.created_at),
            updated_at=aware(row.updated_at), ready_at=aware(row.ready_at),
            terminated_at=aware(row.terminated_at), gpu_label=instance_gpu_label(row), uptime_s=uptime_s(row),
            host_key=host_key,
        )


def _route_of(row: Instance) -> store_host_keys.MachineRoute:
    """The pinned keys (and a fleet host's bastion) of the instance's machine, read in the session
    the row was read in (a fleet host's pin is the fleet's); a row without one: its own pin."""
    session = object_session(row)
    if session is None or not registry.is_fleet(row.provider):
        return store_host_keys.MachineRoute(host_key=store_host_keys.pinned_key(row))
    return store_host_keys.route_of(session, row, fleet=True)  # type: ignore[arg-type]


def instance_gpu_label(row: Instance) -> str | None:
    """`2× NVIDIA H100` as the GPU check found them, else as asked (`1× H100`)."""
    found = [str(g.get("name")) for g in row.gpus_found or [] if isinstance(g, dict) and g.get("name")]
    if found:
        return f"{len(found)}× {found[0]}"
    if row.gpu:
        return f"{row.gpu_count or 1}× {row.gpu}"
    return None


def uptime_s(row: Instance) -> float | None:
    ready = aware(row.ready_at)
    if ready is None or row.status not in (AllocationStatus.READY, AllocationStatus.TERMINATING):
        return None
    return max(0.0, round((datetime.now(UTC) - ready).total_seconds(), 1))


# --------------------------------------------------------------------------- spend (the ledger)


class SpendDayOut(BaseModel):
    date: date_  # a UTC day
    cost: float = Field(description="$ accrued that day: each interval's $/hr × its hours within the day")


class SpendJobTypeOut(BaseModel):
    job_type: str = Field(description="the workload type the machines served; `manual`: allocated by hand")
    cost: float


class SpendProjectOut(BaseModel):
    project: str
    cost: float


class SpendOut(BaseModel):
    """The Cloud tab's spend card in one answer: daily totals (zero-filled), by job type, by project."""

    days: int
    currency: str = "USD"
    daily: list[SpendDayOut] = Field(description="one row per UTC day of the window, oldest first")
    by_job_type: list[SpendJobTypeOut] = Field(description="the window's cost per job type, largest first")
    by_project: list[SpendProjectOut] = Field(
        description="the window's cost per project, largest first: every project for the admin token, "
                    "its own for a project token")
    total: float
    empty: bool = Field(description="true until a provider is connected and spend was recorded: the page "
                                    "hides the card")
    reason: str | None = Field(default=None, description="why it is empty")

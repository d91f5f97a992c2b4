"""The CloudProvider contract: six primitives, static capabilities, one error taxonomy.

Every cloud is an adapter behind this contract. Workflows supply failover, retries,
compensation and crash recovery; an adapter only maps its cloud's API onto the six
primitives and translates its errors into the taxonomy below. An adapter never lets a
raw SDK/HTTP exception escape.
"""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from messages.echo import shown
from providers.credentials import Credentials, describe_error
from providers.gpus import same_gpu

# The launch's send (its own module): adapters import these from here
from providers.launch_send import launch_leaving as launch_leaving
from providers.launch_send import launch_request as launch_request
from providers.launch_send import on_launch_send as on_launch_send

if TYPE_CHECKING:
    from providers.listing import Listing

# --------------------------------------------------------------------------- errors


class ProviderError(Exception):
    """Base of every error an adapter raises. `retryable` tells the workflow layer; `in_doubt`
    says the request may have taken effect all the same (no answer came: a timeout, a dropped
    connection, a gateway's 502/504), which matters for a create on a cloud without a token."""

    retryable: ClassVar[bool] = True

    def __init__(self, message: str, *, in_doubt: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.in_doubt = in_doubt

    @property
    def kind(self) -> str:
        return type(self).__name__


class FailureScope(BaseModel):
    """What a capacity or quota failure names, and so what failover skips: every field set must
    match an offer for the failure to cover it. `lambda/us-east-1/gpu_1x_a10` blocks that type in
    that region only; `lambda` blocks the whole cloud. The connection is filled in by the
    activity (two connections of one cloud have separate quotas)."""

    provider: str
    connection_id: str | None = None
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None

    @classmethod
    def parse(cls, text: str) -> FailureScope:
        """From "provider[/region[/zone]]", the short form adapters may use."""
        parts = (text.split("/") + [None, None])[:3]
        return cls(provider=str(parts[0]), region=parts[1] or None, zone=parts[2] or None)

    def covers(self, offer: Offer) -> bool:
        return all(mine is None or mine == theirs for mine, theirs in (
            (self.provider, offer.provider), (self.connection_id, offer.connection_id),
            (self.region, offer.region), (self.zone, offer.zone), (self.instance_type, offer.instance_type)))

    def __str__(self) -> str:
        return "/".join(p for p in (self.provider, self.region, self.zone, self.instance_type) if p)


def _scope(scope: FailureScope | str) -> FailureScope:
    return scope if isinstance(scope, FailureScope) else FailureScope.parse(scope)


class CapacityError(ProviderError):
    """The cloud has no capacity for this offer in `scope` (a zone, region, type or the provider)."""

    def __init__(self, message: str, scope: FailureScope | str) -> None:
        super().__init__(message)
        self.scope = _scope(scope)


class QuotaError(ProviderError):
    """The account's quota is exhausted in `scope`. Failover, like capacity."""

    def __init__(self, message: str, scope: FailureScope | str) -> None:
        super().__init__(message)
        self.scope = _scope(scope)


class RateLimited(ProviderError):
    """The cloud asked us to slow down; retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class AuthError(ProviderError):
    """Credentials are missing, wrong or lack permission. Stop: retrying cannot help."""

    retryable = False


class InvalidRequest(ProviderError):
    """The cloud refused the request as malformed. Non-retryable."""

    retryable = False


class Unsupported(ProviderError):
    """The cloud cannot do what was asked; `message` is the cloud-specific reason."""

    retryable = False


class Transient(ProviderError):
    """A 5xx, a timeout, a dropped connection: try the same call again."""


# --------------------------------------------------------------------------- models


class GpuSpec(BaseModel):
    name: str  # canonical short name, e.g. "H100", "A10"
    count: int = Field(ge=1)
    memory_gib: float | None = None  # per GPU

    def label(self) -> str:
        mem = f" {self.memory_gib:g} GB" if self.memory_gib else ""
        return f"{self.count}× {self.name}{mem}"


class Offer(BaseModel):
    """One thing that can be launched now (or not: `available=False`)."""

    provider: str
    instance_type: str
    gpu: GpuSpec | None = None  # None: a CPU-only machine
    vcpus: int
    memory_gib: float
    region: str
    zone: str | None = None
    price_per_hour: float  # USD
    spot: bool = False
    available: bool = True
    connection_id: str | None = None  # which connection offered it (set by the planner, not the adapter)


class OfferQuery(BaseModel):
    gpu: str | None = None  # any spelling of a model ("h100", "RTX A6000"), see providers/gpus.py
    gpu_count: int | None = Field(default=None, ge=1)
    region: str | None = None
    spot: bool | None = None  # None: both; True: only spot; False: only on-demand
    include_unavailable: bool = False
    instance_type: str | None = None  # only this type (a backend's picked default offer)

    def matches(self, offer: Offer) -> bool:
        if not self.include_unavailable and not offer.available:
            return False
        if self.spot is not None and offer.spot != self.spot:
            return False
        if self.region and offer.region != self.region:
            return False
        if self.instance_type and offer.instance_type != self.instance_type:
            return False
        if self.gpu:
            if offer.gpu is None or not same_gpu(self.gpu, offer.gpu.name):
                return False
        if self.gpu_count and (offer.gpu is None or offer.gpu.count != self.gpu_count):
            return False
        return True


def rank_offers(offers: list[Offer], query: OfferQuery) -> list[Offer]:
    """Filter by the query and sort cheapest first (ties: region name, type) — deterministic."""
    return sorted(
        (o for o in offers if query.matches(o)),
        key=lambda o: (o.price_per_hour, o.region, o.instance_type, o.spot),
    )


_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
K8S_API_PORT = 6443  # where k3s serves the Kubernetes API


class Ownership(BaseModel):
    """Carried by every cloud resource we make, so list_owned() can find it years later."""

    installation_id: str
    allocation_id: str


class BootLease(BaseModel):
    """The lease timer a machine gets at boot (activities/lease.py renders it): `script` runs as the
    login `user` under systemd, from the machine's first boot, and at every boot after."""

    user: str = Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")  # a POSIX login name: it goes in a unit
    script: str


class LaunchSpec(BaseModel):
    """What to put on the machine. `key` is the idempotency key: cloud name, tag and token."""

    key: str
    owner: Ownership
    ssh_public_keys: list[str] = Field(min_length=1)
    image: str | None = None
    ports: list[int] = Field(default_factory=list)
    user_data: str | None = None  # cloud-init / startup script
    # Networks (CIDRs, normalised: "203.0.113.7/32") the Kubernetes API port (K8S_API_PORT) is opened
    # to at create, through the same firewall path as `ports` but from these sources only. Set for
    # clouds whose k8s access is direct (Capabilities.k8s_api) when the allocation runs k3s; empty:
    # 6443 stays closed (the SSH tunnel still reaches it).
    k8s_api_from: list[str] = Field(default_factory=list)
    # Install k3s at boot (providers/cloudinit.py): set for clouds whose k3s capability is
    # `cloud-init` when the allocation wants k3s; others get it over SSH after boot.
    k3s: bool = False
    # How long the machine may live, in seconds (the allocation's max_hours): the cloud stops it
    # then. Only for clouds whose capabilities say they enforce one (`max_lifetime_h`); None: as
    # long as the cloud lets it (Modal: its 24 h cap).
    lifetime_s: int | None = Field(default=None, gt=0)
    # The lease's timer, installed at boot (clouds whose SelfEnd.boot_timer is set put it in their
    # cloud-init user data: providers/cloudinit.py `lease_at_boot`); None: no lease, or not at boot.
    lease: BootLease | None = None
    # No create was ever sent under `key` (the worker's ledger of sends says so, activities/cloud.py):
    # nothing can exist under it, and a cloud without an idempotency token launches without first
    # looking the key up — on a rate-limited key (Lambda: one request a second) that lookup was a
    # whole listing per create. False: look it up (a retry, or a caller without the ledger).
    unsent: bool = False

    @field_validator("key")
    @classmethod
    def _key_shape(cls, v: str) -> str:
        if not _KEY_RE.match(v):
            raise ValueError("key must be 3-63 chars of [a-z0-9-], starting alphanumeric")
        return v


MACHINE = "machine"


class InstanceRef(BaseModel):
    """Enough to find a machine again: the cloud's id plus our key.

    `list_owned` also reports per-machine side resources (a security group, firewall rule, NIC,
    public IP) that carry our tag and key: `kind` names them (`security-group`, ...), and such a ref
    is never a machine — `find`/`find_all` skip it, and the sweep removes one whose allocation is
    over through `release(key)` once no machine carries the key."""

    provider: str
    instance_id: str
    key: str
    region: str | None = None
    kind: str = MACHINE
    # When the cloud made the machine, where its API says (the spend ledger starts there when a
    # create's answer was lost and the machine was found later); None: not told.
    created_at: datetime | None = None

    @property
    def is_machine(self) -> bool:
        return self.kind == MACHINE


class InstanceState(StrEnum):
    PENDING = "pending"  # accepted, booting
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    TERMINATING = "terminating"
    TERMINATED = "terminated"  # the cloud still lists it, but it is gone and not billing
    ERROR = "error"  # the cloud reports it broken (unhealthy, died)


class InstanceStatus(BaseModel):
    ref: InstanceRef
    state: InstanceState
    host: str | None = None
    ssh_port: int = 22
    ssh_user: str = "root"
    instance_type: str | None = None
    detail: str | None = None  # the cloud's own word for the state
    # The cloud ended (or is ending) the machine to reclaim it — a spot interruption (AWS), a
    # preemption (GCP), an eviction (Azure), an outbid (Vast.ai), a preemptible stop (Nebius) — as
    # its API says so, not guessed from a disappearance.
    preempted: bool = False
    # An interruption notice is out while the machine still runs (AWS: two minutes; GCP: thirty
    # seconds): what is running there is told (SIGTERM) before the machine goes.
    notice: bool = False


# --------------------------------------------------------------------------- capabilities

K3sMode = Literal["cloud-init", "ssh", "none"]


def container_env(name: str) -> str:
    """A shell word for the environment variable `name` as the cloud gave it to the machine: from the
    login's environment, else from the container's first process. RunPod and Vast.ai set their
    machine-scoped credentials on the container's main process; an SSH session (where the lease
    timer is started) may not inherit them unless the image exports them."""
    from_pid1 = f"tr '\\0' '\\n' < /proc/1/environ 2>/dev/null | sed -n 's/^{name}=//p'"
    return f'"${{{name}:-$({from_pid1})}}"'


class SelfEnd(BaseModel):
    """How a machine on a cloud ends its own bill when its lease runs out (the dead-man switch):
    "shutdown" (a guest shutdown ends the bill there), "api" (the machine carries a credential
    scoped to itself and calls the cloud's API), "none" (a guest shutdown keeps billing and no
    machine-scoped credential exists without extra setup: such a machine is reported, not ended),
    "n/a" (no cloud bill to end: a user's own host, a container on this one)."""

    model_config = ConfigDict(extra="ignore")

    method: Literal["shutdown", "api", "none", "n/a"] = "none"
    how: str = "not researched for this cloud"  # one line: what the machine runs, what it needs
    source: str | None = None  # the vendor documentation that says so
    # What the machine's lease timer runs when the lease is over ("" for none/n/a).
    command: str = ""
    # The timer is installed at boot, from the user data, as a systemd service (cloud-init runs it
    # there): it runs from boot, before gpuprov first logs in, and comes back after a reboot. Else
    # the timer is a detached process started over SSH at ready (it dies with a reboot; the next
    # renewal starts it again).
    boot_timer: bool = False


class Capabilities(BaseModel):
    """Static facts about a cloud, checked before any planning: what workflows and planning read.

    It travels in activity results (ValidateResult) into every allocation's history, so it holds
    behaviour only; the catalog's and console's copy (tagline, how to connect) is the adapter's
    `listing` (providers/listing.py). Histories recorded before that split carry the copy here too:
    unknown fields are ignored when one is decoded (never `forbid`), so they still replay."""

    model_config = ConfigDict(extra="ignore")

    display_name: str  # the cloud's name in refusals and notes ("Lambda Cloud has no region ...")
    k3s: K3sMode = "none"
    k3s_reason: str | None = None  # why k3s is "none", shown to the user
    k8s_api: bool = False
    ports: bool = False
    ports_reason: str | None = None
    spot: bool = False
    custom_image: bool = False
    # The one form the cloud names images in, where it has one (a regular expression an `--image`
    # must match whole), and that form in words for the refusal: a malformed image is refused with
    # the request (the API's 422), not by the cloud after a workflow started.
    image_pattern: str | None = None
    image_form: str | None = None
    login_user: str = "root"
    side_resources: list[str] = Field(default_factory=list)  # per-machine resources terminate removes
    # Who puts the user's SSH keys on the machine: the cloud at launch ("cloud"), or gpuprov over SSH
    # with its own key once the machine answers ("ssh": clouds that install only account-level keys,
    # where registering a user's key would open every machine of the account to it).
    user_keys: Literal["cloud", "ssh"] = "cloud"
    # The machines may be reachable only through a bastion the adapter knows (SSH fleets): gpuprov's
    # own SSH steps then connect through the adapter's `ssh_bastion()` (activities/ssh.py).
    bastion: bool = False
    regions: list[str] = Field(default_factory=list)  # empty: any region the cloud names
    region_required: bool = False  # planning across clouds skips it (with a note) when none is given
    # Where planning looks when no --region is given (the seed's "Default when none given"): empty
    # means every region the cloud offers. An explicit --region may still name any of `regions`.
    default_regions: list[str] = Field(default_factory=list)
    # Clouds without an idempotency token: how long after a create was sent it may still land. A
    # create whose outcome is unknown is not re-issued before this has passed (≥ the adapter's
    # request timeout); 0 for clouds that refuse a second create under the same key themselves.
    create_in_flight_s: float = Field(default=0.0, ge=0)
    # How long a machine may take from accepted to running before the attempt is given up (torn
    # down, and the next offer tried); None: the request's Timing.boot_timeout_s.
    boot_timeout_s: float | None = Field(default=None, gt=0)
    # The cloud's documented launch rate per API key (Lambda: one per 12 s), or None. Workers then run
    # this cloud's create activity on a task queue of its own that Temporal dispatches at no more
    # than this rate across every worker (worker.py); the adapter paces its own process too.
    launches_per_s: float | None = Field(default=None, gt=0)
    # The cloud itself stops a machine once a lifetime set at launch has passed (--max-hours), up to
    # this many hours (Modal: a sandbox's timeout, at most 24 h). None: it stops none by itself, so
    # a request with a lifetime is refused (gpuprov does not stop machines on a clock).
    max_lifetime_h: float | None = Field(default=None, gt=0)
    lifetime_reason: str | None = None  # the cloud's own words for its cap, shown when it refuses
    # How a machine here ends its own bill when its lease runs out; the default ("none") is what
    # histories recorded before the field decode to.
    self_end: SelfEnd = Field(default_factory=SelfEnd)

    def check(self, req: LaunchRequirements) -> None:
        """Raise Unsupported with the cloud's reason when `req` cannot be met here (InvalidRequest
        when its image is not in the cloud's form)."""
        name = self.display_name
        if req.spot and not self.spot:
            raise Unsupported(f"--spot needs spot/preemptible instances; {name} has none")
        if req.ports and not self.ports:
            raise Unsupported(self.ports_reason or f"--port needs a firewall API; {name} has none")
        if req.image and not self.custom_image:
            raise Unsupported(f"--image needs custom images; {name} boots its own image only")
        if req.image and self.image_pattern and not re.fullmatch(self.image_pattern, req.image):
            raise InvalidRequest(self.image_form or f"--image {req.image!r} is not an image {name} can boot")
        if req.region and self.regions and req.region not in self.regions:
            raise Unsupported(f"{name} has no region {shown(req.region)} "
                              f"(regions: {', '.join(self.regions)})")
        if req.max_hours is not None:
            cap = self.max_lifetime_h
            if cap is None:
                raise Unsupported(f"--max-hours needs a cloud that stops a machine itself after a set "
                                  f"lifetime; {name} does not")
            if req.max_hours > cap:
                why = self.lifetime_reason or f"{name} caps a machine's lifetime at {cap:g} h"
                raise Unsupported(f"--max-hours {req.max_hours:g}: {why}")


class LaunchRequirements(BaseModel):
    """The parts of a user's request that capabilities can refuse before planning."""

    spot: bool | None = None
    ports: list[int] = Field(default_factory=list)
    image: str | None = None
    region: str | None = None
    k3s: bool = True
    max_hours: float | None = None  # how long the machine may live (the cloud must enforce it)


# --------------------------------------------------------------------------- the contract


class ConnectionOptions(BaseModel):
    """Per-connection settings every cloud may need in real life, beside its credentials."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str | None = None  # API base URL override (a private endpoint, a proxy, a simulation)
    ca_bundle: str | None = None  # PEM certificates to trust for that endpoint, besides the system's


class CloudProvider(abc.ABC):
    """One cloud. Construct with validated credentials (`credentials_model`) and connection options.

    Subclasses set `id`, `capabilities` and `credentials_model`, and implement the six primitives
    (`create` as `_find_or_launch`: the contract runs the capability check first, for every cloud);
    `find_all(key)` and `release(key)` (terminate-by-key) have defaults an adapter overrides where
    its cloud allows duplicate names or keeps per-key side resources. All are async and raise only
    ProviderError subclasses. One instance serves many concurrent activities of one worker
    process (clients and their connection pools live as long as it).
    """

    id: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    # The catalog's and console's copy (read through providers.listing.of); None: the name alone.
    listing: ClassVar[Listing | None] = None
    credentials_model: ClassVar[type[Credentials]]
    # The hosts of the cloud's public API, as its documentation names them (lower case, no scheme or
    # port). A connection's `endpoint` may point at one of them over https; anything else only under
    # a prefix the administrator allows (providers/endpoints.py). Empty: no public API (a simulation).
    api_hosts: ClassVar[tuple[str, ...]] = ()

    def __init__(self, credentials: Credentials, *, options: ConnectionOptions | None = None,
                 installation_id: str) -> None:
        if not isinstance(credentials, self.credentials_model):
            raise TypeError(f"{type(self).__name__} takes {self.credentials_model.__name__}")
        self.credentials = credentials
        self.options = options or ConnectionOptions()
        self.installation_id = installation_id

    @classmethod
    def parse_credentials(cls, raw: Mapping[str, Any]) -> Credentials:
        """Validate `raw` against this cloud's model; InvalidRequest names the fields, not the values."""
        try:
            return cls.credentials_model.model_validate(dict(raw))
        except ValidationError as e:
            name = cls.capabilities.display_name
            raise InvalidRequest(f"{name} credentials: {describe_error(e)}") from None

    async def prepare(self, region: str) -> None:  # noqa: B027 — optional hook
        """Create the shared side resources `region` needs (key pairs, environments, resource
        groups) before a create there. Idempotent: called before every create, on any worker."""

    @abc.abstractmethod
    async def verify(self) -> str:
        """Check the credentials; return the account identity. AuthError when they are bad."""

    @abc.abstractmethod
    async def offers(self, query: OfferQuery) -> list[Offer]:
        """Live offers matching `query`, cheapest first."""

    async def create(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        """Find-or-create by spec.key: a retry after a crash returns the machine already made.

        The template every cloud shares: what the cloud's capabilities refuse (spot, ports, a custom
        image, a region it lacks, a lifetime it does not enforce) is refused here, with the cloud's
        reason, before the adapter's `_find_or_launch` runs. Adapters implement that, never this."""
        self.capabilities.check(LaunchRequirements(
            spot=offer.spot, ports=spec.ports, image=spec.image, region=offer.region,
            max_hours=None if spec.lifetime_s is None else spec.lifetime_s / 3600))
        return await self._find_or_launch(offer, spec)

    @abc.abstractmethod
    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        """The adapter's create, once the capability check passed: look spec.key up first (a retry
        after a crash returns the machine already made), else launch it."""

    @abc.abstractmethod
    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        """Status and address; None when the machine is gone."""

    @abc.abstractmethod
    async def terminate(self, ref: InstanceRef) -> None:
        """Remove the machine and its per-machine side resources. Already gone is success."""

    @abc.abstractmethod
    async def list_owned(self) -> list[InstanceRef]:
        """Everything billable carrying this installation's ownership tag: machines, and side resources
        (`kind` other than "machine") whose machine is gone or was never made."""

    def listing_calls(self, machines: int) -> int | None:
        """About how many calls `list_machines` makes when it shows `machines` machines: state polls
        share the listing only while more of them are under way (providers/shared_statuses.py). None
        (the default): never — a listing per region, or a second for the addresses, costs more."""
        return None

    def paced(self) -> bool:
        """Whether calls wait their turn under the cloud's rate limits (Lambda's, Vast.ai's:
        providers/pacing.py)."""
        return False

    async def list_machines(self) -> list[InstanceStatus] | None:
        """Every machine of ours with its state and address as the cloud's listing reports them — the
        same listing calls `list_owned` makes for machines (every page), none for side resources.
        The watch's round (activities/watch.py) asks this once per connection instead of `get` once
        per machine, and asks `get` only for a machine the listing does not show. A status's `ref`
        carries what `list_owned` would (id, key, region). Machines the cloud already shows gone
        (terminated, deleted) may be left out. None: this cloud's listing does not tell a machine's
        state, and the watch asks `get` for each (the default, until an adapter says otherwise)."""
        return None

    async def find(self, key: str) -> InstanceRef | None:
        """The machine made under `key`, if any (compensation uses this when create's answer was lost)."""
        for ref in await self.list_owned():
            if ref.key == key and ref.is_machine:
                return ref
        return None

    # Terminate-by-key (activities/cloud.py, terminate_and_verify): every machine `find_all(key)`
    # returns is terminated and seen gone, then `release(key)` removes what the key left beside them.

    async def find_all(self, key: str) -> list[InstanceRef]:
        """Every machine of ours carrying `key` that is not gone. More than one where the cloud does
        not enforce unique names and two creates raced (Lambda); terminate-by-key removes them all.
        Default: `list_owned()` filtered by key; override with a cheaper lookup where there is one."""
        return [ref for ref in await self.list_owned() if ref.key == key and ref.is_machine]

    async def release(self, key: str) -> None:  # noqa: B027 — optional hook
        """Remove the per-key side resources (e.g. Lambda's firewall ruleset named like the machine)
        that remain once no machine carries `key` — also those a create registered before a launch
        that never happened. Called only after every machine of `key` is gone; idempotent: nothing
        left is success. Default: nothing to release."""

    async def aclose(self) -> None:  # noqa: B027 — optional hook
        """Release HTTP clients and the like."""

    async def __aenter__(self) -> CloudProvider:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

"""What a simulated cloud declares about itself: one `Facade` per provider API, defined as
`FACADE` in its module (fakeclouds/<cloud>_api.py) and found through the simulation's own list
(fakeclouds/clouds.py, or an entry point in `gpuprov.simulations`). The server mounts every
simulated cloud's facade; `make run` connects each one with the credentials `credentials(token)`
gives.

The engine knows nothing about any particular cloud: everything that differs between clouds
(what they sell, how they name and number machines, who logs in, what the image carries, how
SSH is reached) is a field here.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fakeclouds.catalog import InstanceType, Region
from fakeclouds.ratelimit import Limit

if TYPE_CHECKING:
    from fastapi import APIRouter

    from fakeclouds.engine import Engine, Machine

IngressRule = tuple[int, int, str]  # (first port, last port, source CIDR) a cloud firewall lets in


@dataclass(frozen=True)
class NameRule:
    """How a cloud treats machine names."""

    required: bool
    unique: bool  # among the facade's machines that are not gone
    max_length: int
    pattern: str | None = None  # must match in full; None: any characters
    hint: str | None = None  # the refusal message when the name breaks the rule
    per_region: bool = False  # unique within a region only (GCP: names are unique per zone)

    def problem(self, name: str | None) -> str | None:
        """Why `name` is refused (uniqueness aside), or None."""
        if not name:
            return (self.hint or "a name is required") if self.required else None
        if len(name) > self.max_length or (self.pattern and not re.fullmatch(self.pattern, name)):
            return self.hint or f"name must be at most {self.max_length} characters"
        return None


# Our own API: a slug, unique among live machines (it is how callers find their machine again).
UNIQUE_SLUG = NameRule(required=True, unique=True, max_length=63, pattern=r"[a-z0-9][a-z0-9-]*",
                       hint="name must be 1-63 characters of [a-z0-9-], starting with a letter or digit")
# Lambda-style: optional, free-form, at most 64 characters, NOT unique.
FREE_FORM_64 = NameRule(required=False, unique=False, max_length=64)


def hex_id() -> str:
    """A 32-hex-digit id (Lambda's instance ids look like this)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Facade:
    name: str  # the cloud id it simulates (fakeclouds/clouds.py); also the admin API's `facade`
    prefix: str  # where the server mounts it, e.g. "/lambda/api/v1"
    display_name: str  # e.g. "Lambda Cloud (simulated)"
    build_router: Callable[[Engine, str], APIRouter]  # (engine, the facade's valid token)
    # The adapter's credential fields for this simulation's token (what `make run` connects with).
    credentials: Callable[[str], dict[str, Any]]
    login_user: str  # the only user a machine's SSH server accepts
    regions: tuple[Region, ...]
    instance_types: tuple[InstanceType, ...]  # each lists its regions' prices and default stock
    names: NameRule = UNIQUE_SLUG
    machine_id: Callable[[], str] = hex_id  # a new machine's id
    # Executables put in $HOME/bin on every machine (name -> script): what the cloud's image
    # ships with. GPU types also get the simulated nvidia-smi; that follows the type, not the cloud.
    preinstalled: Mapping[str, str] = field(default_factory=dict)
    # The port the provider always serves SSH on, when its API reports none (Lambda: 22). Then
    # every machine gets its own loopback address (127.x.y.z) listening on that port, so adapters
    # run their real code path. None: the API reports host and port, machines share 127.0.0.1
    # on random ports.
    ssh_port: int | None = None
    # The provider's SDK talks only https (Azure's refuses a bearer token over plain http): clients
    # use the server's TLS listener (`FakeCloudServer.tls_url`) and trust its CA (`ca_pem`), which
    # `make run` passes as the connection's ca_bundle. A gRPC facade (`grpc`) with `tls`: clients dial
    # the gRPC listener's TLS port (`grpc_tls_target`) instead, trusting the same CA (Nebius: its SDK
    # talks TLS to the real cloud, so it does here too).
    tls: bool = False
    # The provider's account-level resources beside machines (network interfaces, addresses, firewall
    # rules, ...): rows of {"kind", "id", "name"} for the admin API's /_fake/side-resources.
    side_resources: Callable[[Engine], list[dict[str, Any]]] | None = None
    # Who may reach a machine's ports from outside, as the cloud's firewall state says: (engine,
    # machine) -> rules (first port, last port, source CIDR), read at each connection. The simulated
    # Kubernetes API on a machine's own address (fakeclouds/k8s_api.py) admits only a peer these
    # rules allow, so a direct kubeconfig works only where the adapter opened 6443 to the client.
    # None: the firewall is not modelled and the machine serves nothing but SSH to the outside.
    ingress: Callable[[Engine, Machine], list[IngressRule]] | None = None
    # The cloud's documented rate limits (fakeclouds/ratelimit.py), enforced on every call that goes
    # through `common.make_call` or `common.check_rate`.
    rate_limits: tuple[Limit, ...] = ()
    # The cloud's gRPC API (Nebius, Modal: gRPC only): (engine, token) -> the `grpc.GenericRpcHandler`s
    # of its services (fakeclouds/grpc_host.py), served beside the HTTP app on the server's gRPC port.
    # A gRPC-only cloud gives `build_router` an empty APIRouter (its prefix still reserves its name).
    grpc: Callable[[Engine, str], list[Any]] | None = None
    # What a guest poweroff (`sudo shutdown -h now` on the machine) does there, per the cloud's docs
    # (fakeclouds/guest_power.py): "stop_billing" (stopped or off, still allocated and billed: the
    # honest default), "stop_compute" (stopped, no compute bill), "terminate", "restart".
    guest_shutdown: str = "stop_billing"
    # The CLI its machines end themselves with through its API, with a key scoped to themselves
    # (`runpodctl remove pod`); None: they have none.
    api_self_end: str | None = None

    def region(self, name: str) -> Region | None:
        return next((r for r in self.regions if r.name == name), None)

    def instance_type(self, name: str) -> InstanceType | None:
        return next((t for t in self.instance_types if t.name == name), None)


def _overlaps(a: str, b: str) -> bool:
    """Whether one mount prefix is the other or lies under it (the server could not tell them apart)."""
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


def index_facades(facades: Iterable[Facade], *, reserved: str) -> dict[str, Facade]:
    """Facades by name, refusing declarations that would clash on the server (`reserved`: a mount
    that is not a facade's, the admin API's) or in the engine."""
    found: dict[str, Facade] = {}
    for f in facades:
        if f.name in found:
            raise ValueError(f"two facades are named {f.name!r}")
        taken = [reserved, *(other.prefix for other in found.values())]
        if not f.prefix.startswith("/") or any(_overlaps(f.prefix, p) for p in taken):
            raise ValueError(f"facade {f.name!r}: prefix {f.prefix!r} must start with / and not overlap "
                             f"another mount ({', '.join(taken)})")
        regions = {r.name for r in f.regions}
        for t in f.instance_types:
            if not set(t.prices) <= regions:
                raise ValueError(f"facade {f.name!r}: {t.name} is priced in undeclared regions")
        found[f.name] = f
    return found

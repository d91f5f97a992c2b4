"""The one list of clouds. The API (its cloud enum, the connections it accepts), the CLI and the
conformance suite all read it; no other product module names cloud ids.

Adding a cloud is one adapter module (`providers/<cloud>.py`) and one `CloudEntry` below; its
simulation is the simulation's business (fakeclouds/clouds.py: one facade module and one line
there), which this module never names. A separately installed package can add a cloud without
editing this file: it declares an entry point in the group `gpuprov.clouds` whose value names a
`CloudEntry` object (and, for its simulation, one in `gpuprov.simulations`).

Modules are imported lazily, so a missing SDK for one cloud never breaks the others.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from providers import endpoints
from providers.base import Capabilities, CloudProvider, ConnectionOptions, InvalidRequest

ENTRY_POINT_GROUP = "gpuprov.clouds"


@dataclass(frozen=True)
class CloudEntry:
    id: str  # the `--cloud` id
    adapter: str  # "module:Class" of the CloudProvider subclass


BUILTIN: tuple[CloudEntry, ...] = (
    CloudEntry("local", "providers.local:LocalProvider"),
    CloudEntry("lambda", "providers.lambda_:LambdaProvider"),
    CloudEntry("aws", "providers.aws:AwsProvider"),
    CloudEntry("gcp", "providers.gcp:GcpProvider"),
    CloudEntry("azure", "providers.azure:AzureProvider"),
    CloudEntry("runpod", "providers.runpod:RunPodProvider"),
    CloudEntry("massedcompute", "providers.massedcompute:MassedComputeProvider"),
    CloudEntry("hyperstack", "providers.hyperstack:HyperstackProvider"),
    CloudEntry("vastai", "providers.vastai:VastAIProvider"),
    CloudEntry("primeintellect", "providers.primeintellect:PrimeIntellectProvider"),
    CloudEntry("verda", "providers.verda:VerdaProvider"),
    CloudEntry("digitalocean", "providers.digitalocean:DigitalOceanProvider"),
    CloudEntry("nebius", "providers.nebius:NebiusProvider"),
    CloudEntry("modal", "providers.modal_:ModalProvider"),
    CloudEntry("docker", "providers.docker_:DockerProvider"),
    CloudEntry("oci", "providers.oci:OciProvider"),
)

# SSH / on-prem fleets: placed on like a cloud (`--cloud ssh`), but configured as fleets
# (/api/compute/fleets), never as connections — so not among `known()`, the connection clouds.
# A placement target naming one carries the fleet id as its connection id (activities/deps.py).
FLEETS: tuple[CloudEntry, ...] = (
    CloudEntry("ssh", "providers.ssh_fleet:SshFleetProvider"),
)

# Test-only registrations (an in-memory fake adapter) go here, never into BUILTIN.
_EXTRA: dict[str, type[CloudProvider]] = {}


@functools.cache  # the targets are fixed strings; import_module costs a lock and lookups per call
def _load(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


@functools.cache
def entries() -> tuple[CloudEntry, ...]:
    """Built-in clouds, then those installed packages declare (entry point group gpuprov.clouds)."""
    found = {e.id: e for e in BUILTIN}
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
        entry = ep.load()
        if not isinstance(entry, CloudEntry):
            raise TypeError(f"entry point {ep.name!r} in {ENTRY_POINT_GROUP} must name a CloudEntry")
        if entry.id in found:
            raise ValueError(f"cloud {entry.id!r} is registered twice (entry point {ep.name!r})")
        found[entry.id] = entry
    return tuple(found.values())


@functools.cache  # entries() is fixed for the process; lists ask once per row
def _entries_by_id() -> Mapping[str, CloudEntry]:
    return {e.id: e for e in entries()}


def known() -> list[str]:
    """Every cloud id an adapter exists for, sorted."""
    return sorted({*_entries_by_id(), *_EXTRA})


def fleets() -> list[str]:
    """The fleet kinds (`--cloud` ids whose targets are fleets, not connections)."""
    return [e.id for e in FLEETS]


_FLEET_IDS = frozenset(e.id for e in FLEETS)


def is_fleet(cloud: str) -> bool:
    return cloud in _FLEET_IDS


def placeable() -> list[str]:
    """Every `--cloud` an allocation may name: the connection clouds and the fleet kinds."""
    return sorted({*known(), *fleets()})


def entry(cloud: str) -> CloudEntry:
    found = _entries_by_id().get(cloud) or next((e for e in FLEETS if e.id == cloud), None)
    if found is None:
        raise InvalidRequest(f"unknown cloud {cloud!r}; known: {', '.join(known())}")
    return found


def adapter_class(cloud: str) -> type[CloudProvider]:
    if cloud in _EXTRA:
        return _EXTRA[cloud]
    cls: type[CloudProvider] = _load(entry(cloud).adapter)
    return cls


def capabilities(cloud: str) -> Capabilities:
    return adapter_class(cloud).capabilities


def build(cloud: str, credentials: Mapping[str, Any], *, options: ConnectionOptions | None = None,
          installation_id: str, allowed_endpoints: Collection[str] = ()) -> CloudProvider:
    """An adapter for `cloud` with `credentials` validated against its typed model (InvalidRequest
    naming the field — never its value — when they do not fit). The options' endpoint is checked
    here too (providers/endpoints.py; `allowed_endpoints`: the administrator's prefixes), so a
    connection stored before a rule existed, or one whose prefix was since removed, calls nothing."""
    cls = adapter_class(cloud)
    endpoints.check(cls, options.endpoint if options else None, allowed_endpoints)
    return cls(cls.parse_credentials(credentials), options=options or ConnectionOptions(),
               installation_id=installation_id)


def register_for_tests(cls: type[CloudProvider]) -> None:
    _EXTRA[cls.id] = cls


def unregister_for_tests(cloud: str) -> None:
    _EXTRA.pop(cloud, None)

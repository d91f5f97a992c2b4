"""The simulation's own list of clouds: cloud id -> the module whose `FACADE` (a `facade.Facade`)
simulates it. The product's registry (providers/registry.py) names no simulation; this map is how
the server, `gpuprov dev`, the tests and the bench find a cloud's facade.

A separately installed package adds a simulation without editing this file: it declares an entry
point in the group `gpuprov.simulations` named after the cloud id, whose value names a module with
`FACADE` or (`module:attr`) the `Facade` itself — beside the `gpuprov.clouds` entry point that adds
the cloud's adapter to the product.

Modules are imported lazily, on first `facade(cloud)`: listing the simulated clouds imports none.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points

from fakeclouds.facade import Facade

ENTRY_POINT_GROUP = "gpuprov.simulations"

FACADE_MODULES: Mapping[str, str] = {
    "local": "fakeclouds.local_api",
    "lambda": "fakeclouds.lambda_api",
    "aws": "fakeclouds.aws_api",
    "gcp": "fakeclouds.gcp_api",
    "azure": "fakeclouds.azure_api",
    "runpod": "fakeclouds.runpod_api",
    "massedcompute": "fakeclouds.massedcompute_api",
    "hyperstack": "fakeclouds.hyperstack_api",
    "vastai": "fakeclouds.vastai_api",
    "primeintellect": "fakeclouds.primeintellect_api",
    "verda": "fakeclouds.verda_api",
    "digitalocean": "fakeclouds.digitalocean_api",
    "modal": "fakeclouds.modal_api",
    "nebius": "fakeclouds.nebius_api",
    "oci": "fakeclouds.oci_api",
}


@functools.cache
def declared() -> Mapping[str, str]:
    """Cloud id -> where its facade is: the built-in ones, then those installed packages declare
    (entry point group gpuprov.simulations, sorted by name). `declared.cache_clear()` re-reads them."""
    found = dict(FACADE_MODULES)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
        if ep.name in found:
            raise ValueError(f"cloud {ep.name!r} is simulated twice (entry point {ep.name!r} in "
                             f"{ENTRY_POINT_GROUP})")
        found[ep.name] = ep.value
    return found


def simulated() -> list[str]:
    """Every cloud id with a simulation facade, built-in ones first (what `make run` serves)."""
    return list(declared())


def facade(cloud: str) -> Facade:
    """The facade that simulates `cloud` (LookupError for a cloud without one)."""
    target = declared().get(cloud)
    if target is None:
        raise LookupError(f"cloud {cloud!r} has no simulation; simulated: {', '.join(simulated())}")
    module_name, _, attr = target.partition(":")
    found = getattr(importlib.import_module(module_name), attr or "FACADE")
    if not isinstance(found, Facade):
        raise TypeError(f"{target} (the simulation of {cloud!r}) is not a fakeclouds.facade.Facade")
    if found.name != cloud:
        raise ValueError(f"{target} simulates {found.name!r}, but is declared as cloud {cloud!r}")
    return found


def all_facades() -> list[Facade]:
    """Every simulated cloud's facade (what a server serves when not told which)."""
    return [facade(cloud) for cloud in simulated()]

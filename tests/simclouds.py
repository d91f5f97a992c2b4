"""Adapters and connections pointed at a simulated cloud server, the way `make run` points them:
endpoint = server URL + the facade's prefix (the TLS listener's URL, with its CA as the ca_bundle,
for a facade whose SDK talks only https), credentials = what the facade says its token means.
Every simulated cloud is found through fakeclouds/clouds.py, so a new cloud needs nothing here."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sqlmodel import Session

from fakeclouds import clouds
from fakeclouds.connect import SimServer, allowed_env, ca_bundle, endpoint, endpoints, options
from providers import registry
from providers.base import CloudProvider
from store import connections
from store.secrets import SecretBox

__all__ = ["SimServer", "add_connection", "allowed", "allowed_env", "ca_bundle", "credentials", "endpoint",
           "endpoints", "options", "provider"]

if TYPE_CHECKING:
    from activities.deps import ActivityDeps


@contextlib.contextmanager
def allowed(deps: ActivityDeps, server: SimServer) -> Iterator[None]:
    """An in-process worker's ActivityDeps allows `server`'s clouds while the block runs."""
    added = [e for e in endpoints(server) if e not in deps.allowed_endpoints]
    deps.allowed_endpoints.extend(added)
    try:
        yield
    finally:
        for e in added:
            deps.allowed_endpoints.remove(e)


def credentials(server: SimServer, cloud: str, token: str | None = None) -> dict[str, Any]:
    return clouds.facade(cloud).credentials(token or server.tokens[cloud])


def provider(server: SimServer, cloud: str, *, installation_id: str,
             token: str | None = None) -> CloudProvider:
    return registry.build(cloud, credentials(server, cloud, token), options=options(server, cloud),
                          installation_id=installation_id, allowed_endpoints=endpoints(server))


def add_connection(session: Session, box: SecretBox, server: SimServer, cloud: str) -> str:
    return connections.add_connection(session, box, provider=cloud, name=cloud,
                                      credentials=credentials(server, cloud),
                                      endpoint=endpoint(server, cloud), ca_bundle=ca_bundle(server, cloud)).id

"""Adapters and connections pointed at a simulated cloud server, the way `make run` points them:
endpoint = server URL + the facade's prefix, credentials = what the facade says its token means.
Every simulated cloud is found through the registry, so a new cloud needs nothing here."""

from __future__ import annotations

from typing import Any, Protocol

from sqlmodel import Session

from providers import registry
from providers.base import CloudProvider, ConnectionOptions
from store import repo
from store.secrets import SecretBox


class SimServer(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def tokens(self) -> dict[str, str]: ...


def endpoint(server: SimServer, cloud: str) -> str:
    return server.url + registry.simulation(cloud).prefix


def credentials(server: SimServer, cloud: str, token: str | None = None) -> dict[str, Any]:
    return registry.simulation(cloud).credentials(token or server.tokens[cloud])


def provider(server: SimServer, cloud: str, *, installation_id: str,
             token: str | None = None) -> CloudProvider:
    return registry.build(cloud, credentials(server, cloud, token),
                          options=ConnectionOptions(endpoint=endpoint(server, cloud)),
                          installation_id=installation_id)


def add_connection(session: Session, box: SecretBox, server: SimServer, cloud: str) -> str:
    return repo.add_connection(session, box, provider=cloud, name=cloud,
                               credentials=credentials(server, cloud), endpoint=endpoint(server, cloud)).id

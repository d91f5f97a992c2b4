"""Docker: the engine socket."""

from __future__ import annotations

from providers.permissions.base import no_account

ENTRY = no_account(
    "none at a cloud; access to the Docker Engine socket is root on that host, so give gpuprov a "
              "rootless engine (or podman's user socket) where you can",
    ("providers/docker_.py (DOCKER_HOST, else /var/run/docker.sock)",
     "https://docs.docker.com/engine/security/#docker-daemon-attack-surface"),
    ("GET /info", "GET /containers/json", "GET /containers/{id}/json", "POST /containers/create",
     "POST /containers/{id}/start", "DELETE /containers/{id}"),
    "the Docker Engine API has no per-call permissions: whoever reaches its socket may make every call")

"""Where a simulated cloud is reached on a fakeclouds server, the way `make run` reaches it:
endpoint = server URL + the facade's prefix (the TLS listener's URL, with its CA as the connection's
ca_bundle, for a facade whose SDK talks only https); a gRPC facade at the gRPC listener (its TLS
port, with the same CA, for one whose SDK talks TLS). Used by the tests and the bench."""

from __future__ import annotations

from typing import Protocol

from fakeclouds import clouds
from providers.base import ConnectionOptions


class SimServer(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def tokens(self) -> dict[str, str]: ...

    @property
    def tls_url(self) -> str | None: ...

    @property
    def ca_pem(self) -> str | None: ...


def endpoint(server: SimServer, cloud: str) -> str:
    facade = clouds.facade(cloud)
    if facade.grpc is not None:  # a gRPC-only cloud (Modal, Nebius): its client dials the gRPC listener
        # over TLS when its SDK talks TLS (Nebius, trusting the server's CA), else in plain text
        target = getattr(server, "grpc_tls_target" if facade.tls else "grpc_target", None)
        if target is None:
            raise RuntimeError(f"{cloud}'s simulation needs the server's gRPC listener")
        return f"{'https' if facade.tls else 'http'}://{target}"
    base = server.tls_url if facade.tls else server.url
    if base is None:
        raise RuntimeError(f"{cloud}'s simulation needs the server's TLS listener (tls=True)")
    return base + facade.prefix


def ca_bundle(server: SimServer, cloud: str) -> str | None:
    """The CA to trust for `cloud`'s endpoint: the server's, for a facade served over TLS (HTTPS or
    the gRPC listener's TLS port: one CA)."""
    return server.ca_pem if clouds.facade(cloud).tls else None


def options(server: SimServer, cloud: str) -> ConnectionOptions:
    return ConnectionOptions(endpoint=endpoint(server, cloud), ca_bundle=ca_bundle(server, cloud))


def endpoints(server: SimServer) -> list[str]:
    """Every simulated cloud's endpoint on `server`: what `make run` puts in GPUPROV_ALLOWED_ENDPOINTS
    (a server started without its TLS listener serves no TLS facade, and one serving no gRPC facade
    has no gRPC listener: those have none)."""
    tls = server.tls_url is not None
    grpc = getattr(server, "grpc_target", None) is not None
    def served(cloud: str) -> bool:
        facade = clouds.facade(cloud)
        if facade.grpc is not None:  # the gRPC listener serves its TLS port too
            return grpc
        return tls or not facade.tls

    return [endpoint(server, cloud) for cloud in clouds.simulated() if served(cloud)]


def allowed_env(server: SimServer) -> dict[str, str]:
    """The setting for worker and API processes that use connections to `server`."""
    return {"GPUPROV_ALLOWED_ENDPOINTS": ",".join(endpoints(server))}

"""The worker's /metrics over HTTP (README: Metrics): prometheus_client's WSGI app on a daemon thread.

On a loopback address (the default, 127.0.0.1) anyone on the host may scrape it, as before. On any
other address — a container's, so that a scraper on its network can reach each replica
(docker-compose.yml) — every scrape needs the installation's admin token (`Authorization: Bearer
...`, 401 otherwise), as the API's /metrics does: the series are the whole installation's, and the
Temporal SDK's name task queues. Without a token such an address is refused before anything binds."""

from __future__ import annotations

import hmac
import ipaddress
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.registry import Collector

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class MetricsAddressError(ValueError):
    """A non-loopback metrics address without a token to guard it."""


def is_loopback(addr: str) -> bool:
    """`addr` is an IP address of this host's loopback (127.0.0.0/8, ::1); a name is not."""
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def bearer_only(app: WsgiApp, token: str) -> WsgiApp:
    """`app` for requests carrying `Authorization: Bearer <token>` (the scheme in any case, RFC 9110
    11.1); a 401 naming what is missing else."""
    expected = token.encode()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        scheme, _, given = str(environ.get("HTTP_AUTHORIZATION", "")).partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode("utf-8", "replace"), expected):
            start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                                ("WWW-Authenticate", "Bearer")])
            return [b"the worker's metrics need the installation's admin token (Authorization: Bearer)\n"]
        return app(environ, start_response)
    return guarded


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """No access log on stderr: a scrape every few seconds would bury the worker's own lines."""


class _Server6(_Server):
    address_family = socket.AF_INET6


def guard_for(addr: str, admin_token: str | None) -> str | None:
    """The token the metrics on `addr` need: none on loopback (as before: anyone on the host), the
    admin token anywhere else — MetricsAddressError when there is none."""
    if is_loopback(addr):
        return None
    if not admin_token:
        raise MetricsAddressError(
            f"the worker's metrics on {addr} (not a loopback address) need the admin token to guard them: "
            "set GPUPROV_API_TOKEN, or keep GPUPROV_WORKER_METRICS_ADDR on 127.0.0.1")
    return admin_token


def serve(registry: Collector, port: int, *, addr: str = "127.0.0.1", token: str | None = None) -> WSGIServer:
    """`registry` at http://addr:port/metrics on a daemon thread; the server (its `server_port` is the
    port bound, for `port` 0). `token`: every scrape must carry it; required off loopback."""
    if token is None:
        guard_for(addr, None)  # refuses any address but loopback
    app = make_wsgi_app(registry)
    server_class = _Server6 if ":" in addr else _Server
    server = make_server(addr, port, bearer_only(app, token) if token else app, server_class,
                         handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="gpuprov-metrics", daemon=True).start()
    return server

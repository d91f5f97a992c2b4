"""Hosting gRPC facades: one `grpc.aio` server, on a port of its own, beside the HTTP app.

uvicorn speaks no HTTP/2, so a cloud whose API is gRPC only (Nebius, Modal) cannot be an APIRouter.
Such a facade declares `Facade.grpc`: `(engine, token) -> [grpc.GenericRpcHandler, ...]`, built with
`service()` and `unary()` below from its vendor's request/response message classes (protobuf
classes, no code generated at build time). The server (fakeclouds/server.py) starts one
`GrpcListener` for every facade that declares services, in the HTTP app's lifespan: on the same
event loop, after the engine started and stopped before it, so gRPC calls share the one engine, its
machines, and the fault rules added through `/_fake/faults`.

Two ports, every service on both: plain-text HTTP/2 on `port` (Modal's grpclib client dials
`http://` and takes no CA of ours), and TLS on `tls_port` with a certificate for the listen host
signed by the simulation's CA (fakeclouds/tls.py, the same CA as the HTTPS listener's), for SDKs
that talk TLS as they do to the real cloud (Nebius: `Facade.tls`). Port 0 picks a free one; `port`
and `tls_port` hold the bound ones once started. `tls_port=None`: no TLS port.

Keepalive pings: the Nebius SDK's channels ping every 20 s, with or without a call in flight (its
defaults, "compatible with the Nebius SDK for Go": nebius 0.6.29, `nebius/aio/keepalive.py`), so
the real API accepts that. grpc's stock server policy does not — a ping without data more often than
every 5 minutes, or any ping with no call open, is a strike, and two strikes close the connection
with GOAWAY "too_many_pings", failing the calls on it with UNAVAILABLE ("Too many pings": `make
fuzz` met it on the offers page, after `gpuprov dev` had run a few minutes). The listener accepts
pings without calls down to PING_FLOOR_S apart (scaled like the documented rate-limit windows:
`Engine.time_scale`), half the SDK's interval: a client pinging faster than that is still refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc

from fakeclouds import tls
from fakeclouds.calls import CallLog
from fakeclouds.engine import Engine
from fakeclouds.facade import Facade

# The shortest interval between keepalive pings the listener accepts with no data sent, in real seconds
# (module docstring): half the Nebius SDK's default 20 s.
PING_FLOOR_S = 10.0

# A unary handler: (request message, context) -> response message.
Unary = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def unary(handler: Unary, request_type: Any, response_type: Any) -> Any:
    """A unary-unary method over protobuf message classes (a `grpc.RpcMethodHandler`)."""
    return grpc.unary_unary_rpc_method_handler(handler, request_deserializer=request_type.FromString,
                                               response_serializer=response_type.SerializeToString)


def service(name: str, methods: Mapping[str, Any]) -> Any:
    """A `grpc.GenericRpcHandler` for the fully qualified service `name` (e.g. "pkg.v1.Service")."""
    return grpc.method_handlers_generic_handler(name, dict(methods))


def grpc_facades(facades: Iterable[Facade]) -> list[Facade]:
    """The facades that declare gRPC services."""
    return [f for f in facades if f.grpc is not None]


class _RecordCalls(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Names each call a facade serves ("pkg.v1.Service/Method") in the engine's call log
    (fakeclouds/calls.py), as the HTTP app does for REST facades."""

    def __init__(self, log: CallLog) -> None:
        self.log = log
        self.facades: dict[str, str] = {}  # service name -> the facade serving it

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        service, _, method = str(details.method).lstrip("/").partition("/")
        if (facade := self.facades.get(service)) is not None:
            self.log.record(facade, f"{service}/{method}")
        return await continuation(details)


class GrpcListener:
    """The gRPC server of every facade of `engine` that declares services."""

    def __init__(self, engine: Engine, tokens: Mapping[str, str], host: str = "127.0.0.1",
                 port: int = 0, tls_port: int | None = 0) -> None:
        self.engine, self.tokens, self.host, self.port = engine, dict(tokens), host, port
        self.tls_port = tls_port
        self.ping_floor_s = PING_FLOOR_S * engine.time_scale  # 0 (limits off): any ping
        self.services: list[str] = []  # fully qualified names, once started
        self.tls_files: tls.TlsFiles | None = None  # once started with a TLS port
        self._server: grpc.aio.Server | None = None

    @property
    def target(self) -> str:
        """What a plain-text client dials (`grpc.aio.insecure_channel(target)`): "host:port"."""
        return f"{self.host}:{self.port}"

    @property
    def tls_target(self) -> str | None:
        """What a TLS client dials, trusting `ca_pem`: "host:port" (None without a TLS port)."""
        return f"{self.host}:{self.tls_port}" if self.tls_port is not None else None

    @property
    def ca_pem(self) -> str | None:
        """The CA the TLS port's certificate chains to (None before start or without a TLS port)."""
        return self.tls_files.ca_pem if self.tls_files else None

    async def start(self) -> int:
        """Build the handlers, bind and serve; returns the bound port (RuntimeError if it cannot bind)."""
        recorder = _RecordCalls(self.engine.calls)
        server = grpc.aio.server(interceptors=[recorder], options=[
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", int(self.ping_floor_s * 1000))])
        self.services = []
        for facade in grpc_facades(self.engine.facades.values()):
            assert facade.grpc is not None
            handlers = list(facade.grpc(self.engine, self.tokens[facade.name]))
            server.add_generic_rpc_handlers(handlers)
            names = [h.service_name() for h in handlers if hasattr(h, "service_name")]
            self.services += names
            recorder.facades.update(dict.fromkeys(names, facade.name))
        bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if not bound:  # older grpcio answers 0 instead of raising
            raise RuntimeError(f"gRPC listener cannot bind {self.host}:{self.port}")
        bound_tls = None
        if self.tls_port is not None:
            # The state dir's CA (made once, reused: clients that trust it keep trusting restarts).
            files = self.tls_files = tls.ensure(self.engine.root, (self.host,))
            creds = grpc.ssl_server_credentials([(files.key_file.read_bytes(), files.cert_file.read_bytes())])
            bound_tls = server.add_secure_port(f"{self.host}:{self.tls_port}", creds)
            if not bound_tls:
                raise RuntimeError(f"gRPC listener cannot bind {self.host}:{self.tls_port} (TLS)")
        await server.start()
        self._server, self.port = server, int(bound)
        if bound_tls is not None:
            self.tls_port = int(bound_tls)
        return self.port

    async def stop(self, grace: float = 1.0) -> None:
        """Stop accepting calls; calls in flight get `grace` seconds before they are cancelled."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)

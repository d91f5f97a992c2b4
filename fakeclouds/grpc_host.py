"""Hosting gRPC facades: one `grpc.aio` server, on a port of its own, beside the HTTP app.

uvicorn speaks no HTTP/2, so a cloud whose API is gRPC only (Nebius, Modal) cannot be an APIRouter.
Such a facade declares `Facade.grpc`: `(engine, token) -> [grpc.GenericRpcHandler, ...]`, built with
`service()` and `unary()` below from its vendor's request/response message classes (protobuf
classes, no code generated at build time). The server (fakeclouds/server.py) starts one
`GrpcListener` for every facade that declares services, in the HTTP app's lifespan: on the same
event loop, after the engine started and stopped before it, so gRPC calls share the one engine, its
machines, and the fault rules added through `/_fake/faults`. Plain-text HTTP/2 on the listen host
(127.0.0.1); port 0 picks a free one, `port` holds the bound one once started.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc

from fakeclouds.engine import Engine
from fakeclouds.facade import Facade

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


class GrpcListener:
    """The gRPC server of every facade of `engine` that declares services."""

    def __init__(self, engine: Engine, tokens: Mapping[str, str], host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.engine, self.tokens, self.host, self.port = engine, dict(tokens), host, port
        self.services: list[str] = []  # fully qualified names, once started
        self._server: grpc.aio.Server | None = None

    @property
    def target(self) -> str:
        """What a client dials (`grpc.aio.insecure_channel(target)`): "host:port"."""
        return f"{self.host}:{self.port}"

    async def start(self) -> int:
        """Build the handlers, bind and serve; returns the bound port (RuntimeError if it cannot bind)."""
        server = grpc.aio.server()
        self.services = []
        for facade in grpc_facades(self.engine.facades.values()):
            assert facade.grpc is not None
            handlers = list(facade.grpc(self.engine, self.tokens[facade.name]))
            server.add_generic_rpc_handlers(handlers)
            self.services += [h.service_name() for h in handlers if hasattr(h, "service_name")]
        bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if not bound:  # older grpcio answers 0 instead of raising
            raise RuntimeError(f"gRPC listener cannot bind {self.host}:{self.port}")
        await server.start()
        self._server, self.port = server, int(bound)
        return self.port

    async def stop(self, grace: float = 1.0) -> None:
        """Stop accepting calls; calls in flight get `grace` seconds before they are cancelled."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)

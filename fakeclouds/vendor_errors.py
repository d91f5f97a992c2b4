"""How each facade turns the engine's errors (`fakeclouds/errors.py`) into its vendor's own error
responses — one mechanism for all of them.

A facade builds its router with `vendor_router(render)`: every route on it runs inside a guard that
answers any `CloudError` its handler (or the body parsing, auth, rate limits and faults it calls)
raises with `render(exc, request)`, the vendor's status code and body shape. FastAPI's exception
handlers live on the app, not on a router, so the guard is the router's route class: it travels with
the router wherever the server mounts it. Facades whose vendor has a table of codes keep it as a
`CodeTable` (the last class that matches wins, so a subclass listed after its base refines it).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Generic, TypeVar

from fastapi import APIRouter, Request
from fastapi.routing import APIRoute
from starlette.responses import Response

from fakeclouds.errors import CloudError, RateLimit, ServerFault

Render = Callable[[CloudError, Request], Response]
V = TypeVar("V")


def vendor_router(render: Render) -> APIRouter:
    """A router whose routes answer every CloudError with `render` (the vendor's format)."""

    class VendorRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def guarded(request: Request) -> Response:
                try:
                    return await handler(request)
                except CloudError as exc:
                    return render(exc, request)

            return guarded

    return APIRouter(route_class=VendorRoute)


class CodeTable(Generic[V]):
    """A vendor's answers per error class: `(class, answer)` rows, the last that matches wins;
    `default` for an error no row names."""

    def __init__(self, rows: Sequence[tuple[type[CloudError], V]], default: V) -> None:
        self.rows, self.default = tuple(rows), default

    def __call__(self, exc: CloudError) -> V:
        found = self.default
        for cls, answer in self.rows:
            if isinstance(exc, cls):
                found = answer
        return found


def status_of(exc: CloudError, table_status: int) -> int:
    """An injected server fault keeps the status it was injected with; others the table's."""
    return exc.status if isinstance(exc, ServerFault) else table_status


def retry_after_header(seconds: float) -> str:
    # Fractional values are a simulation extension so tests stay fast; real clouds send integers.
    return f"{seconds:g}"


def retry_after(exc: CloudError) -> dict[str, str] | None:
    """`Retry-After` on a rate-limit refusal, nothing otherwise."""
    return {"Retry-After": retry_after_header(exc.retry_after)} if isinstance(exc, RateLimit) else None

"""The remote calls each facade served, by name: what an adapter asks of its cloud.

The conformance suite reads them per check and compares them with the list it keeps
(tests/conformance/remote_calls/), so an SDK upgrade or an adapter change that makes different
calls fails loudly instead of passing against a simulation that happens to answer them.

A call's name is its vendor's own where one exists: "GET /instances/{id}" (the route's template,
below the facade's prefix) for REST clouds, the `Action` for AWS's query API, "Service/Method" for
gRPC. A facade whose one route serves many calls (AWS, Azure's ARM dispatcher) names the call with
`name_call` before it answers; everything else is named by the route that matched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fakeclouds.facade import Facade

_NAME = "gpuprov.remote_call"  # where a handler leaves the call's name in the ASGI scope

Scope = MutableMapping[str, Any]
App = Callable[[Scope, Callable[..., Awaitable[Any]], Callable[..., Awaitable[Any]]], Awaitable[None]]


class CallLog:
    """Per facade, the distinct calls served since the last `clear`, and how many of each (what a
    watch round or an allocation costs a cloud's rate limit, counted where the cloud would)."""

    def __init__(self) -> None:
        self._seen: dict[str, set[str]] = {}
        self._counts: dict[str, dict[str, int]] = {}
        self._logins: dict[str, int] = {}  # machine id -> SSH logins its server accepted

    def record_login(self, machine_id: str) -> None:
        self._logins[machine_id] = self._logins.get(machine_id, 0) + 1

    def logins_json(self) -> dict[str, int]:
        return dict(sorted(self._logins.items()))

    def record(self, facade: str, call: str) -> None:
        self._seen.setdefault(facade, set()).add(call)
        counts = self._counts.setdefault(facade, {})
        counts[call] = counts.get(call, 0) + 1

    def counts_json(self) -> dict[str, dict[str, int]]:
        return {f: dict(sorted(c.items())) for f, c in sorted(self._counts.items())}

    def seen(self, facade: str) -> set[str]:
        return set(self._seen.get(facade, ()))

    def as_json(self) -> dict[str, list[str]]:
        return {f: sorted(calls) for f, calls in sorted(self._seen.items())}

    def clear(self) -> None:
        self._seen.clear()
        self._counts.clear()
        self._logins.clear()


def name_call(scope: Scope, name: str) -> None:
    """Name the call being served (for a route that serves many: a query API's action)."""
    scope[_NAME] = name


class RecordCalls:
    """ASGI middleware: after each request a facade served, record its call's name in `log`.
    Requests outside every facade's prefix (the admin API, health) are not calls to a cloud."""

    def __init__(self, app: App, *, log: CallLog, facades: list[Facade]) -> None:
        self.app, self.log = app, log
        # Longest prefix first: a facade mounted under another's prefix is still told apart.
        self.prefixes = sorted(((f.prefix, f.name) for f in facades), key=lambda p: -len(p[0]))

    async def __call__(self, scope: Scope, receive: Callable[..., Awaitable[Any]],
                       send: Callable[..., Awaitable[Any]]) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if scope["type"] == "http":
                self._record(scope)

    def _record(self, scope: Scope) -> None:
        route = getattr(scope.get("route"), "path", None)
        if route is None:  # no route matched: a 404 of the framework's, not a call the cloud serves
            return
        path = str(scope.get("path", ""))
        for prefix, facade in self.prefixes:
            if path == prefix or path.startswith(prefix + "/"):
                # The route's template: below the prefix (FastAPI may or may not keep it in `path`).
                template = route.removeprefix(prefix) or "/"
                self.log.record(facade, scope.get(_NAME) or f"{scope['method']} {template}")
                return

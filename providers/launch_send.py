"""The moment a launch request leaves, for the create activity's in-flight record
(providers/base.py re-exports these: adapters import them from there)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar

# On a cloud without an idempotency token (`create_in_flight_s` > 0) a create that failed without an
# answer may still land, so the create activity records in the database when a launch was sent. It
# must be the moment the launch request leaves — not the start of the create, before the adapter's
# lookups, key setup and pacing: a create that fails (or whose worker dies) before then sent nothing,
# and its retry must not wait the window. One mechanism for every adapter: the activity sets a hook
# for the duration of its create (`on_launch_send`); the adapter wraps the call that launches in
# `launch_request()`; the REST base's clients run `launch_leaving()` right before each request goes
# out (an httpx request hook: after auth and pacing), so the hook fires then. An adapter that does
# not send over HTTP calls `launch_leaving()` itself inside `launch_request()`.
_ON_LAUNCH: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar("gpuprov_on_launch", default=None)
_LAUNCHING: ContextVar[bool] = ContextVar("gpuprov_launching", default=False)


@contextlib.contextmanager
def on_launch_send(hook: Callable[[], Awaitable[None]]) -> Iterator[None]:
    """While this holds (around one `create`), `hook` is awaited right before each launch request
    leaves; if it raises, the request is not sent."""
    token = _ON_LAUNCH.set(hook)
    try:
        yield
    finally:
        _ON_LAUNCH.reset(token)


@contextlib.contextmanager
def launch_request() -> Iterator[None]:
    """Adapters wrap the one call that launches a machine (the POST) in this, and nothing else: each
    request sent inside it counts as a launch leaving."""
    token = _LAUNCHING.set(True)
    try:
        yield
    finally:
        _LAUNCHING.reset(token)


async def launch_leaving() -> None:
    """A request is about to leave: inside `launch_request()`, the create's hook runs first (what the
    hook itself sends is no launch)."""
    hook = _ON_LAUNCH.get() if _LAUNCHING.get() else None
    if hook is None:
        return
    token = _LAUNCHING.set(False)
    try:
        await hook()
    finally:
        _LAUNCHING.reset(token)

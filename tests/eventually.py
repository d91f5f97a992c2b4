"""The suite's one poll-until: `eventually` (async) and `eventually_sync` (threads, subprocess output);
and `steps_until`, for a condition only other tasks of this event loop can make true (no clock).

A wait is on a condition; `within` only bounds a failure, so it is generous (a busy 2-core box) and
no test asserts on how long a wait took. Polling starts fast and backs off (0.01 s doubling to
0.25 s): most conditions hold within milliseconds, and a fixed 0.2-1 s interval wasted that much per
wait.

`check()` returns something truthy when done (that value is returned) or falsy to poll again; or,
given `until`, `check()` reads a value and `until(value)` says whether it is done (the value is
returned, falsy or not: `until=lambda st: st is None` waits for a thing to go). An
exception propagates at once (an `assert` inside a check fails the test with its own message rather
than after the whole wait), except the types named in `ignore`, which count as "not yet" (e.g.
`ignore=(httpx.TransportError,)` while a server restarts, or `(AssertionError,)` for a check written
as asserts).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, overload

T = TypeVar("T")

FIRST = 0.01  # s: the first pause between checks
CAP = 0.25  # s: the longest


def _failure(what: str, within: float, started: float, checks: int, last: Any, error: BaseException | None,
             detail: Callable[[], object] | None) -> AssertionError:
    seen = f"last exception: {error!r}" if error is not None else f"last value: {last!r}"
    message = (f"timed out waiting for {what}: {checks} checks over {time.monotonic() - started:.1f}s "
               f"(within={within:g}s); {seen}")
    if detail is not None:
        message += f"\n{detail()}"
    return AssertionError(message)


@overload
async def eventually(check: Callable[[], Awaitable[T | None]], *, within: float, what: str,
                     ignore: tuple[type[Exception], ...] = (), until: None = None,
                     cap: float = CAP, detail: Callable[[], object] | None = None) -> T: ...


@overload
async def eventually(check: Callable[[], Awaitable[T]], *, within: float, what: str,
                     ignore: tuple[type[Exception], ...] = (), until: Callable[[T], object],
                     cap: float = CAP, detail: Callable[[], object] | None = None) -> T: ...


@overload
async def eventually(check: Callable[[], T | None], *, within: float, what: str,
                     ignore: tuple[type[Exception], ...] = (),
                     until: Callable[[T | None], object] | None = None, cap: float = CAP,
                     detail: Callable[[], object] | None = None) -> T: ...


async def eventually(check: Callable[[], Any], *, within: float, what: str,
                     ignore: tuple[type[Exception], ...] = (), until: Callable[[Any], object] | None = None,
                     cap: float = CAP, detail: Callable[[], object] | None = None) -> Any:
    """The first truthy value of `check()` (sync or async; with `until`, the first value `until`
    accepts), polled with back-off; AssertionError naming `what`, the time waited and the last value
    (or ignored exception) once `within` seconds have passed. `detail()` (optional) adds to that
    message, read at the failure. A check still running at the deadline may finish; one hanging past
    twice `within` fails the same way."""
    started = time.monotonic()
    deadline = started + within
    pause, checks, last, error = FIRST, 0, None, None
    hang = asyncio.timeout(2 * within)
    try:
        async with hang:
            while True:
                checks += 1
                try:
                    got = check()
                    if inspect.isawaitable(got):
                        got = await got
                except ignore as e:
                    error = e
                else:
                    if until(got) if until is not None else got:
                        return got
                    last, error = got, None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _failure(what, within, started, checks, last, error, detail)
                await asyncio.sleep(min(pause, left))
                pause = min(pause * 2, cap)
    except TimeoutError:
        if not hang.expired():
            raise  # the check's own TimeoutError
        raise _failure(what, within, started, checks, last, error, detail) from None


def eventually_sync(check: Callable[[], T | None], *, within: float, what: str,
                    ignore: tuple[type[Exception], ...] = (),
                    until: Callable[[T | None], object] | None = None, cap: float = CAP,
                    detail: Callable[[], object] | None = None) -> T:
    """`eventually` for code off the event loop (threads, a subprocess's output): `check` is plain."""
    started = time.monotonic()
    deadline = started + within
    pause, checks, last, error = FIRST, 0, None, None
    while True:
        checks += 1
        try:
            got = check()
        except ignore as e:
            error = e
        else:
            if inspect.isawaitable(got):
                if inspect.iscoroutine(got):
                    got.close()
                raise TypeError(f"eventually_sync: {what}: the check returned an awaitable; use eventually")
            if until(got) if until is not None else got:
                return got  # type: ignore[return-value]
            last, error = got, None
        left = deadline - time.monotonic()
        if left <= 0:
            raise _failure(what, within, started, checks, last, error, detail)
        time.sleep(min(pause, left))
        pause = min(pause * 2, cap)


def text_of(path: Path) -> str:
    """`path`'s text, '' while it does not exist. A file a boot script writes (`echo x > f`) exists,
    empty, before its line is in it: a test waits for the text (`eventually(lambda: text_of(f),
    until=...)`), never for the file alone and then reads it."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


async def steps_until(ready: Callable[[], bool]) -> None:
    """Let this event loop's other tasks run until `ready()`: for a state they reach without I/O or
    time (callers joined a shared call held by a fake), so the wait is steps of the loop, never a
    clock. Nothing bounds it but the test's timeout: use `eventually` for anything outside the loop."""
    while not ready():  # noqa: ASYNC110 — nothing to wait on but the other tasks' progress
        await asyncio.sleep(0)

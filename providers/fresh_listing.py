"""One listing call for many concurrent callers, each answered by a listing that began after it asked.

A create looks its key up in the cloud's listing first (DESIGN.md, the idempotency rule); where the
API cannot filter by name (Lambda), that is one whole listing per create, and 200 concurrent creates
make 200 listings of 200 machines each — most of their CPU, on both ends (bench (c)). Here callers
that ask while a listing is in flight wait for the next one, which starts as soon as that one ends
and answers all of them. No caller gets an answer older than its own question, so a lookup still
sees every launch that finished before it asked: the rule holds, with one listing per listing time
instead of one per caller.

A listing whose callers all went away (their activity cancelled, their worker shutting down) is
cancelled too: on a cloud whose calls go one at a time (providers/pacing.py), a held listing nobody
awaits would keep every other call on the account waiting out its request timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class FreshListing(Generic[T]):
    def __init__(self, fetch: Callable[[], Awaitable[list[T]]]) -> None:
        self._fetch = fetch
        self._waiting: asyncio.Future[list[T]] | None = None  # the next listing's callers
        self._runner: asyncio.Task[None] | None = None
        self._fetching: asyncio.Future[list[T]] | None = None  # the listing under way
        self._callers: dict[asyncio.Future[list[T]], int] = {}  # callers still awaiting each answer
        self.fetches = 0  # listings made (tests count them)

    @property
    def callers(self) -> int:
        """How many callers await a listing now."""
        return sum(self._callers.values())

    async def get(self) -> list[T]:
        """A listing that began after this call: the caller's own list (the items are shared)."""
        if self._waiting is None:
            self._waiting = asyncio.get_running_loop().create_future()
        waiting = self._waiting
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        self._callers[waiting] = self._callers.get(waiting, 0) + 1
        try:
            return list(await asyncio.shield(waiting))
        finally:
            self._callers[waiting] -= 1
            if not self._callers[waiting]:
                del self._callers[waiting]
                if not waiting.done():
                    self._abandon(waiting)

    def _abandon(self, answer: asyncio.Future[list[T]]) -> None:
        """Nobody awaits `answer` any more: its listing is not made, or stops where it is."""
        if answer is self._waiting:
            self._waiting = None
        elif self._fetching is not None:
            self._fetching.cancel()

    async def _run(self) -> None:
        while self._waiting is not None:
            answer, self._waiting = self._waiting, None  # everyone who asked before this listing
            self.fetches += 1
            fetching = self._fetching = asyncio.ensure_future(self._fetch())
            try:
                await asyncio.wait({fetching})
            except asyncio.CancelledError:  # the loop is closing: so are its callers
                fetching.cancel()
                answer.cancel()
                raise
            finally:
                self._fetching = None
            if fetching.cancelled():  # its callers all went away (`_abandon`)
                answer.cancel()
            elif (e := fetching.exception()) is not None:  # each waiter raises it, as its own call would have
                answer.set_exception(e)
                answer.exception()  # retrieved: a waiter that went away must not log it as lost
            else:
                answer.set_result(fetching.result())

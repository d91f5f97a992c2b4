"""One call for many callers' items, where the cloud's API takes a list (Lambda's terminate takes
`instance_ids`): callers that ask while a call is under way go in the next one, made as soon as
that one ends.

On a key paced to one request a second (providers/pacing.py), fifty machines torn down at once were
fifty terminate calls, fifty seconds of the key's budget with every other call waiting behind them.
Batched, the first goes alone and the rest wait for its answer together: a few calls. Unpaced, a call
is answered at once and most batches hold one item: nothing changes there.

The shape of providers/fresh_listing.py (callers during a call wait for the next, made when it ends),
with items. Unlike a listing, a call that no caller awaits any more is still made: a batch's call runs
in a task of its own, so a caller that goes away (its activity cancelled) does not take the others'
call with it, and its item stays in the batch — a terminate asked is still meant.
A call that fails fails every caller of its batch, as each one's own call would have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")


class BatchedCalls(Generic[K, R]):
    def __init__(self, send: Callable[[list[K]], Awaitable[dict[K, R]]]) -> None:
        """`send(items)` makes one call for `items` (distinct) and answers each of them."""
        self._send = send
        self._items: list[K] = []  # the next call's
        self._answer: asyncio.Future[dict[K, R]] | None = None  # the next call's answer
        self._runner: asyncio.Task[None] | None = None
        self.calls = 0  # calls made (tests count them)

    @property
    def waiting(self) -> list[K]:
        """The items waiting for the next call."""
        return list(self._items)

    async def call(self, item: K) -> R:
        """`item`'s answer, from a call made after this one asked."""
        if self._answer is None:
            self._answer = asyncio.get_running_loop().create_future()
        answer = self._answer
        if item not in self._items:
            self._items.append(item)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        return (await asyncio.shield(answer))[item]

    async def _run(self) -> None:
        while self._answer is not None:
            items, answer = self._items, self._answer
            self._items, self._answer = [], None  # callers from now on go in the next call
            self.calls += 1
            try:
                answer.set_result(await self._send(items))
            except asyncio.CancelledError:  # the loop is closing: so are its callers
                answer.cancel()
                raise
            except Exception as e:  # noqa: BLE001 — each caller raises it, as its own call would have
                answer.set_exception(e)
                answer.exception()  # retrieved: a caller that went away must not log it as lost

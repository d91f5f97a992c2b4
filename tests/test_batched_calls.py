"""providers/batched_calls.py: callers that ask while a call is under way share the next call; each
gets its own item's answer; a failed call fails exactly its batch; a caller that goes away leaves
its item in the call."""

from __future__ import annotations

import asyncio

import pytest

from providers.batched_calls import BatchedCalls
from tests.eventually import steps_until


class HeldSendFake:
    """A send that records each call's items and answers only when the test says."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def __call__(self, items: list[str]) -> dict[str, str]:
        self.batches.append(items)
        await self.release.wait()
        self.release.clear()
        if self.fail is not None:
            raise self.fail
        return {i: i.upper() for i in items}


async def test_callers_during_a_call_share_the_next_one() -> None:
    send = HeldSendFake()
    batched = BatchedCalls(send)
    first = asyncio.ensure_future(batched.call("a"))
    await steps_until(lambda: send.batches == [["a"]])
    rest = [asyncio.ensure_future(batched.call(i)) for i in ("b", "c", "b")]  # "b" twice: once in the call
    await steps_until(lambda: batched.waiting == ["b", "c"])
    send.release.set()
    assert await first == "A"
    await steps_until(lambda: len(send.batches) == 2)
    send.release.set()
    assert await asyncio.gather(*rest) == ["B", "C", "B"]
    assert send.batches == [["a"], ["b", "c"]] and batched.calls == 2


async def test_a_failed_call_fails_its_batch_only() -> None:
    send = HeldSendFake()
    batched = BatchedCalls(send)
    first = asyncio.ensure_future(batched.call("a"))
    await steps_until(lambda: len(send.batches) == 1)
    later = asyncio.ensure_future(batched.call("b"))
    await steps_until(lambda: batched.waiting == ["b"])
    send.fail = RuntimeError("refused")
    send.release.set()
    with pytest.raises(RuntimeError, match="refused"):
        await first
    send.fail = None
    await steps_until(lambda: len(send.batches) == 2)
    send.release.set()
    assert await later == "B"


async def test_a_caller_that_goes_away_leaves_its_item_in_the_call() -> None:
    send = HeldSendFake()
    batched = BatchedCalls(send)
    first = asyncio.ensure_future(batched.call("a"))
    await steps_until(lambda: len(send.batches) == 1)
    gone, stays = asyncio.ensure_future(batched.call("b")), asyncio.ensure_future(batched.call("c"))
    await steps_until(lambda: batched.waiting == ["b", "c"])
    gone.cancel()
    send.release.set()
    await first
    await steps_until(lambda: len(send.batches) == 2)
    send.release.set()
    assert await stays == "C" and send.batches[1] == ["b", "c"]

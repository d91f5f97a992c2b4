"""providers.all_of: every call finishes before a failure is raised (asyncio.gather's default
raised at the first and left the rest running, so which calls reached the cloud depended on timing)."""

from __future__ import annotations

import asyncio

import pytest

from providers.all_of import all_of


async def test_results_come_in_argument_order_whatever_order_the_calls_finish_in() -> None:
    async def after(delay: float, value: str) -> str:
        await asyncio.sleep(delay)
        return value

    assert await all_of(after(0.05, "slow"), after(0, "fast")) == ["slow", "fast"]


async def test_a_failure_is_raised_only_once_every_other_call_has_finished() -> None:
    finished: list[str] = []
    gate = asyncio.Event()

    async def refused() -> None:
        raise PermissionError("wrong key")

    async def still_talking(name: str) -> str:
        await gate.wait()  # held until the refusal has surely been raised by its own task
        finished.append(name)
        return name

    async def open_gate() -> None:
        await asyncio.sleep(0)
        gate.set()

    with pytest.raises(PermissionError, match="wrong key"):
        await all_of(refused(), still_talking("offerings"), still_talking("prices"), open_gate())
    assert finished == ["offerings", "prices"]


async def test_the_first_failure_in_argument_order_is_the_one_raised() -> None:
    async def fails(delay: float, error: Exception) -> None:
        await asyncio.sleep(delay)
        raise error

    with pytest.raises(KeyError):
        await all_of(fails(0.05, KeyError("first")), fails(0, ValueError("second")))

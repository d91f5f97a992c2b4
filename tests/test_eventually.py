"""The suite's one poll-until helper: what it returns, how it fails. Counter-based checks, so nothing
here depends on timing; only the failing cases use a tiny `within`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.eventually import eventually, eventually_sync, text_of


class Counter:
    """Falsy answers until the `n`th call, which answers `value`."""

    def __init__(self, n: int, value: object = "done") -> None:
        self.n, self.value, self.calls = n, value, 0

    def __call__(self) -> object:
        self.calls += 1
        return self.value if self.calls >= self.n else None

    async def aio(self) -> object:
        await asyncio.sleep(0)
        return self()


async def test_returns_the_first_truthy_value_of_a_sync_check() -> None:
    c = Counter(4, {"status": "ready"})
    assert await eventually(c, within=60, what="ready") == {"status": "ready"}
    assert c.calls == 4  # polled until then, not once more


async def test_awaits_an_async_check() -> None:
    c = Counter(3, 42)
    assert await eventually(c.aio, within=60, what="the answer") == 42
    assert c.calls == 3


async def test_a_truthy_first_answer_is_returned_without_a_second_check() -> None:
    c = Counter(1, [1])
    assert await eventually(c, within=60, what="x") == [1] and c.calls == 1


async def test_until_judges_the_value_and_returns_it_even_when_falsy() -> None:
    answers = iter(["pending", "pending", "running", None])
    assert await eventually(lambda: next(answers), until=lambda st: st == "running", within=60,
                            what="running") == "running"
    gone = await eventually(lambda: next(answers), until=lambda st: st is None, within=60, what="gone")
    assert gone is None
    with pytest.raises(AssertionError, match="last value: 'pending'"):
        await eventually(lambda: "pending", until=lambda st: st == "running", within=0.05, what="running")
    assert eventually_sync(lambda: 0, until=lambda n: n == 0, within=60, what="zero") == 0


class NotYet:
    """A falsy answer that says which call made it."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<not yet #{self.n}>"


async def test_the_failure_names_what_the_wait_and_the_last_value() -> None:
    calls = 0

    def never() -> NotYet:
        nonlocal calls
        calls += 1
        return NotYet(calls)

    with pytest.raises(AssertionError) as info:
        await eventually(never, within=0.05, what="the machine to boot", detail=lambda: "log: nothing")
    text = str(info.value)
    assert text.startswith("timed out waiting for the machine to boot: ") and "within=0.05s" in text
    assert f"{calls} checks over " in text and f"last value: <not yet #{calls}>" in text, text
    assert calls >= 2 and text.endswith("\nlog: nothing")  # checked once more at the deadline


async def test_an_exception_propagates_at_once() -> None:
    calls = 0

    def broken() -> object:
        nonlocal calls
        calls += 1
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await eventually(broken, within=60, what="x")
    assert calls == 1


async def test_an_assertion_in_the_check_fails_at_once_too() -> None:
    """A check that asserts (the job ended in the wrong status) fails with its own message, not a timeout."""
    def wrong() -> object:
        raise AssertionError("job ended failed")

    with pytest.raises(AssertionError, match="job ended failed"):
        await eventually(wrong, within=60, what="x")


async def test_ignored_exceptions_count_as_not_yet_and_show_in_the_failure() -> None:
    calls = 0

    def flaky() -> object:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("refused")
        return "up"

    assert await eventually(flaky, within=60, what="the server", ignore=(ConnectionError,)) == "up"

    def down() -> object:
        raise ConnectionError("still refused")

    refused = r"the server.*last exception: ConnectionError\('still refused'\)"
    with pytest.raises(AssertionError, match=refused):
        await eventually(down, within=0.05, what="the server", ignore=(ConnectionError,))


async def test_a_check_that_hangs_fails_naming_what() -> None:
    never = asyncio.Event()

    async def hangs() -> bool:
        await never.wait()
        return True

    with pytest.raises(AssertionError, match="the query"):
        await eventually(hangs, within=0.05, what="the query")


async def test_a_checks_own_timeout_error_is_its_own() -> None:
    async def times_out() -> bool:
        raise TimeoutError("the check's")

    with pytest.raises(TimeoutError, match="the check's"):
        await eventually(times_out, within=60, what="x")


def test_the_sync_twin_returns_fails_and_propagates_the_same_way() -> None:
    c = Counter(3, "line")
    assert eventually_sync(c, within=60, what="a line") == "line" and c.calls == 3
    with pytest.raises(AssertionError, match=r"'ready' printed.*last value: None"):
        eventually_sync(lambda: None, within=0.05, what="'ready' printed")
    with pytest.raises(ValueError):
        eventually_sync(lambda: int("x"), within=60, what="x")


def test_the_sync_twin_refuses_an_async_check() -> None:
    async def check() -> bool:
        return True

    with pytest.raises(TypeError, match="use eventually"):
        eventually_sync(check, within=60, what="x")  # type: ignore[unused-coroutine]


def test_text_of_a_file_not_yet_written_is_empty(tmp_path: Path) -> None:
    mark = tmp_path / "booted"
    assert text_of(mark) == ""
    mark.touch()  # as `echo booted > mark` leaves it before the write
    assert text_of(mark) == ""
    mark.write_text("booted\n")
    assert text_of(mark) == "booted\n"

"""activities.deps.heartbeating: an activity's heartbeats while it awaits, at most one per half
interval however often it is called (a poll loop calls it on every poll), never none while a long
await is pending, and none at an activity's very start (the server writes each beat; one at the
start tells it nothing the start did not)."""

from __future__ import annotations

import asyncio
import contextlib
import time

from temporalio.testing import ActivityEnvironment

from activities.deps import heartbeating
from tests.unread import collecting, unread_outcomes


async def test_a_poll_loop_of_short_awaits_heartbeats_once_per_half_interval() -> None:
    beats: list[object] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details[0])

    async def polls() -> None:
        for i in range(200):  # each returns at once: far less than half of 60 s apart
            await heartbeating(asyncio.sleep(0), 60, f"poll {i}")

    await env.run(polls)
    assert beats == []  # before: one beat per call, 200; then one, at the start


async def test_a_long_await_keeps_heartbeating_from_half_an_interval_in() -> None:
    beats: list[object] = []
    at: list[float] = []
    third = asyncio.Event()
    env = ActivityEnvironment()

    def beat(*details: object) -> None:
        beats.append(details[0])
        at.append(time.monotonic())
        if len(beats) == 3:
            third.set()

    env.on_heartbeat = beat

    async def waits() -> str:
        # Ends only once three beats were sent while it was pending (bounded: a hang fails).
        return await heartbeating(asyncio.wait_for(third.wait(), 30), 0.2, "waiting")

    started = time.monotonic()
    assert await env.run(waits) is True
    assert beats == ["waiting"] * 3
    # None at the start: the first half an interval in, the next an interval after it.
    assert at[0] - started >= 0.09 and at[1] - at[0] >= 0.19  # (asyncio may wake a hair early)


async def test_an_activity_first_beats_half_an_interval_in_each_activity_afresh() -> None:
    beats: list[object] = []

    async def one(name: str, pause_s: float) -> None:
        await heartbeating(asyncio.sleep(0), 0.2, f"{name} at its start")  # none: it just began
        await asyncio.sleep(pause_s)
        await heartbeating(asyncio.sleep(0), 0.2, f"{name} later")  # beats once the half interval passed

    for name in ("first", "second"):  # two activities, one right after the other: each begins afresh
        env = ActivityEnvironment()
        env.on_heartbeat = lambda *details: beats.append(details[0])
        await asyncio.create_task(env.run(one, name, 0.15))
    assert beats == ["first later", "second later"]


async def test_an_await_that_ends_in_an_error_of_its_own_when_cancelled_is_read() -> None:
    """The activity cancelled (a job cancelled while its machine boots): the awaited call's task is
    cancelled, and temporalio's update call then ends with an error of its own
    (WorkflowUpdateRPCTimeoutOrCancelledError), not as cancelled. Unread, asyncio logged it as "Task
    exception was never retrieved" (tests/jobs/test_jobs.py's cancel test, once in a fresh clone)."""
    class CancelledOwnWayFakeError(Exception):
        """FAKE: what the update call raises in place of the cancel."""

    started = asyncio.Event()

    async def update_fake() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # its error comes a step after the cancel, as the RPC's does
            raise CancelledOwnWayFakeError("Timeout or cancellation waiting for update") from None

    async def activity_body() -> None:
        await heartbeating(update_fake(), 60, "ready?")

    with unread_outcomes() as unread:
        async with collecting():
            body = asyncio.create_task(ActivityEnvironment().run(activity_body))
            await started.wait()
            body.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await body
            for _ in range(3):  # the awaited task finishes with its error, then is collected
                await asyncio.sleep(0)
    assert unread.seen == []

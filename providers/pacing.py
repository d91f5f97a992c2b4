"""Pacing an adapter's calls under a cloud's documented rate limits, so it is never throttled.

A `Pacer` spaces calls measured from the *end* of the previous one: the next request leaves at
least `interval` after the previous answer came back. The cloud stamped the previous request
before it answered, so whatever the network's jitter, the cloud sees the two at least `interval`
apart — no safety margin needed. The price is that calls through one pacer go one at a time, which
a limit of one request per second asks for anyway. Launches (a cloud's slower limit) also wait for
their own, longer interval, without holding up the other calls meanwhile.

One pacer per credential (`shared`), per event loop: every adapter of one API key in this process
(each connection's cached adapter, a second connection made with the same key) shares the key's
budget, as the cloud counts it. Other processes sharing the key are not covered; the worker spaces
launches across processes with Temporal's task-queue rate limit (worker.py).

`GPUPROV_CLOUD_TIME_SCALE` scales every interval, as the simulated clouds' `--time-scale` scales
their windows (fakeclouds/ratelimit.py): 1 (the default) for real clouds, 0.001 in tests, 0 off.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable

TIME_SCALE_ENV = "GPUPROV_CLOUD_TIME_SCALE"
# Told (cloud, seconds) whenever a call waited for its pacer: the worker's metrics count the waits
# (activities/metrics.py). None: nobody listens.
on_wait: Callable[[str, float], None] | None = None


def time_scale() -> float:
    """This process's `GPUPROV_CLOUD_TIME_SCALE` (1.0 when unset or not a number >= 0)."""
    try:
        scale = float(os.environ.get(TIME_SCALE_ENV, "1"))
    except ValueError:
        return 1.0
    return scale if scale >= 0 else 1.0


class Pacer:
    """Calls one at a time, each `interval_s` after the previous answer; launches also
    `launch_interval_s` after the previous launch's answer. Intervals are in documented seconds,
    scaled by `scale` (default: `time_scale()`)."""

    def __init__(self, interval_s: float, launch_interval_s: float = 0.0, *,
                 scale: float | None = None, cloud: str = "") -> None:
        self.cloud = cloud  # whose limits these are (the waits' metrics label)
        self.scale = time_scale() if scale is None else scale
        self.interval = interval_s * self.scale
        self.launch_interval = launch_interval_s * self.scale
        self._calls = asyncio.Lock()
        self._launches = asyncio.Lock()
        self._next_call = 0.0  # monotonic time before which no call may leave
        self._next_launch = 0.0
        self.launch_times: deque[float] = deque(maxlen=100)  # when recent launches left (tests read them)

    async def _until(self, when: float) -> None:
        delay = when - time.monotonic()
        if delay > 0:
            if on_wait is not None:
                on_wait(self.cloud, delay)
            await asyncio.sleep(delay)

    @contextlib.asynccontextmanager
    async def slot(self, *, launch: bool = False) -> AsyncIterator[None]:
        """Hold this while one request is sent and answered."""
        if self.scale == 0:  # no pacing at all (a simulation with its limits off): calls go at once
            yield
            return
        async with contextlib.AsyncExitStack() as stack:
            if launch:
                await stack.enter_async_context(self._launches)  # other calls go on meanwhile
                await self._until(self._next_launch)
            async with self._calls:
                await self._until(self._next_call)
                if launch:
                    self.launch_times.append(time.monotonic())
                try:
                    yield
                finally:
                    done = time.monotonic()
                    self._next_call = max(self._next_call, done + self.interval)
                    if launch:
                        self._next_launch = max(self._next_launch, done + self.launch_interval)


# credential digest -> pacer, per event loop (an asyncio.Lock belongs to the loop that first waits on it)
_SHARED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Pacer]] = weakref.WeakKeyDictionary()


def shared(cloud: str, endpoint: str, secret: str, interval_s: float,
           launch_interval_s: float = 0.0) -> Pacer:
    """The pacer of this credential on this endpoint, in this process and event loop. The secret is
    only hashed, never kept."""
    digest = hashlib.sha256(f"{cloud}\0{endpoint}\0{secret}".encode()).hexdigest()
    pacers = _SHARED.setdefault(asyncio.get_running_loop(), {})
    pacer = pacers.get(digest)
    if pacer is None or pacer.scale != time_scale():
        pacer = pacers[digest] = Pacer(interval_s, launch_interval_s, cloud=cloud)
    return pacer

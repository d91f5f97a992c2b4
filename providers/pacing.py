"""Pacing an adapter's calls under a cloud's documented rate limits, so it is never throttled.

A `Pacer` spaces calls measured from the *end* of the previous one: the next request leaves at
least `interval` after the previous answer came back. The cloud stamped the previous request
before it answered, so whatever the network's jitter, the cloud sees the two at least `interval`
apart — no safety margin needed. The price is that calls through one pacer go one at a time, which
a limit of one request per second asks for anyway. Launches (a cloud's slower limit) also wait for
their own, longer interval, without holding up the other calls meanwhile.

One pacer per credential (`shared`), per event loop: every adapter of one API key in this process
(each connection's cached adapter, a second connection made with the same key) shares the key's
budget, as the cloud counts it. The other processes of the host share it too once `shared_dir` is
set (each process sets it to GPUPROV_HOME/pacing: the API's processes, the workers of `make run`
and of docker-compose, whose containers share that volume): a call then also holds the key's lock
file there, which says when the host's next call (and launch) may leave. Processes on other hosts
share it where the database is PostgreSQL (`cross_host`, set by the same setup: store/pacing_slots.py):
a call then also holds the key's row lock there, which says when the next call (and launch) may leave
on the database server's clock. The worker also spaces launches across every worker with Temporal's
task-queue rate limit (worker.py).

`GPUPROV_CLOUD_TIME_SCALE` scales every interval, as the simulated clouds' `--time-scale` scales
their windows (fakeclouds/ratelimit.py): 1 (the default) for real clouds, 0.001 in tests, 0 off.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path

TIME_SCALE_ENV = "GPUPROV_CLOUD_TIME_SCALE"
# Told (cloud, seconds) whenever a call waited for its pacer: the worker's metrics count the waits
# (activities/metrics.py). None: nobody listens.
on_wait: Callable[[str, float], None] | None = None


# Where this host's processes pace their shared credentials together (module docstring); None: each
# process on its own. Set once by a process's setup, before its first cloud call.
shared_dir: Path | None = None
HOST_LOCK_POLL_S = 0.005  # how often a call waiting for another process's lock asks again

# Where every host's processes pace a key together: (lane, interval) -> a hold for one call, given the
# seconds to wait before sending (store/pacing_slots.py); None: pacing reaches no further than this host.
cross_host: Callable[[str, float], contextlib.AbstractAsyncContextManager[float]] | None = None


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
                 scale: float | None = None, cloud: str = "", host_lock: Path | None = None,
                 lane: str | None = None) -> None:
        self.cloud = cloud  # whose limits these are (the waits' metrics label)
        self.lane = lane  # the key's name across hosts (`cross_host`: a digest), or None: not shared
        # The lock files the host's processes share for this key (`shared_dir`), or None
        self.host_lock = host_lock
        self.scale = time_scale() if scale is None else scale
        self.interval = interval_s * self.scale
        self.launch_interval = launch_interval_s * self.scale
        self._host_calls = HostLock(host_lock.with_suffix(".calls"), self.interval) if host_lock else None
        self._host_launches = (HostLock(host_lock.with_suffix(".launches"), self.launch_interval)
                               if host_lock else None)
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

    async def _across_hosts(self, stack: contextlib.AsyncExitStack, kind: str, interval: float) -> None:
        """Hold this key's `kind` lane (calls, launches) across hosts for the stack's life, when
        shared, and wait the turn it gives."""
        hold = cross_host
        if hold is not None and self.lane is not None and interval > 0:
            wait = await stack.enter_async_context(hold(f"{self.lane}.{kind}", interval))
            await self._until(time.monotonic() + wait)

    @contextlib.asynccontextmanager
    async def slot(self, *, launch: bool = False) -> AsyncIterator[None]:
        """Hold this while one request is sent and answered."""
        if self.scale == 0:  # no pacing at all (a simulation with its limits off): calls go at once
            yield
            return
        async with contextlib.AsyncExitStack() as launching:
            host_launch = None
            if launch:
                await launching.enter_async_context(self._launches)  # other calls go on meanwhile
                await self._until(self._next_launch)
                if self._host_launches is not None:  # and the host's other processes' launches
                    host_launch = await launching.enter_async_context(self._host_launches.held())
                    await self._until(host_launch.next)
                await self._across_hosts(launching, "launches", self.launch_interval)  # other hosts'
            async with self._calls, contextlib.AsyncExitStack() as calling:
                await self._until(self._next_call)
                host_call = None
                if self._host_calls is not None:  # and the host's other processes' calls
                    host_call = await calling.enter_async_context(self._host_calls.held())
                    await self._until(host_call.next)
                await self._across_hosts(calling, "calls", self.interval)  # and other hosts' calls
                if launch:
                    self.launch_times.append(time.monotonic())
                try:
                    yield
                finally:
                    done = time.monotonic()
                    self._next_call = max(self._next_call, done + self.interval)
                    if host_call is not None:
                        host_call.next = max(host_call.next, done + self.interval)
                    if launch:
                        self._next_launch = max(self._next_launch, done + self.launch_interval)
                        if host_launch is not None:
                            host_launch.next = max(host_launch.next, done + self.launch_interval)


class HostSlot:
    """What a held `HostLock` says: the monotonic time before which the next call may not leave.
    Set `next` while holding it; it is written back when the lock is let go."""

    def __init__(self, next_: float) -> None:
        self.next = next_


class HostLock:
    """An exclusive lock among this host's processes (`flock` on `path`), holding one number: when
    the next call may leave, on CLOCK_MONOTONIC (`time.monotonic`), one clock for every process of
    the host. Taken by asking again every HOST_LOCK_POLL_S, so no thread ever blocks on it; let go
    when its holder is done or cancelled, or when its process dies (the kernel drops the lock)."""

    def __init__(self, path: Path, interval_s: float) -> None:
        self.path = path
        # A holder writes at most its answer's time plus this: a later time was written before the
        # host's last boot (CLOCK_MONOTONIC starts again), and is no wait owed.
        self.interval = interval_s

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[HostSlot]:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # its directory not made yet, or removed since (a home cleaned up)
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await asyncio.sleep(HOST_LOCK_POLL_S)
            try:
                slot = HostSlot(float(os.pread(fd, 64, 0).decode() or 0.0))
            except ValueError:  # torn or foreign content: no wait owed
                slot = HostSlot(0.0)
            if slot.next > time.monotonic() + self.interval:  # from before the host's last boot
                slot.next = 0.0
            try:
                yield slot
            finally:
                text = repr(slot.next).encode()
                os.pwrite(fd, text, 0)
                os.ftruncate(fd, len(text))
        finally:
            os.close(fd)  # also lets the lock go


# credential digest -> pacer, per event loop (an asyncio.Lock belongs to the loop that first waits on it)
_SHARED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Pacer]] = weakref.WeakKeyDictionary()


def shared(cloud: str, endpoint: str, secret: str, interval_s: float,
           launch_interval_s: float = 0.0) -> Pacer:
    """The pacer of this credential on this endpoint, in this process and event loop. The secret is
    only hashed, never kept."""
    digest = hashlib.sha256(f"{cloud}\0{endpoint}\0{secret}".encode()).hexdigest()
    pacers = _SHARED.setdefault(asyncio.get_running_loop(), {})
    pacer = pacers.get(digest)
    host_lock = shared_dir / digest if shared_dir is not None else None
    if pacer is None or pacer.scale != time_scale() or pacer.host_lock != host_lock:
        pacer = pacers[digest] = Pacer(interval_s, launch_interval_s, cloud=cloud, host_lock=host_lock,
                                       lane=digest)
    return pacer

"""One SSH connection per machine for all of an allocation's SSH steps.

WAIT_SSH logs in (checking or pinning the machine's host key, activities/machine_ssh.py) and leaves
the connection here; INSTALL_K3S reuses it; PROBE_GPUS, the last step before ready, uses it and
closes it. Before, each step made its own handshake — the key exchange is most of an SSH step's
CPU on both ends (bench (c)). The steps of one allocation run one after another, usually on the
worker that holds the connection; a step that runs on another worker (a retry elsewhere, a restart)
finds nothing here and logs in afresh, as before. Since FEWER_TRIPS_PATCH the three steps are one
activity (SET_UP_MACHINE), so they always share this worker's connection.

Bounded: at most `limit` connections are held (the least recently used is closed first), and one
unused for `idle_s` is closed at the next use of the pool — an allocation that failed between its
steps leaves nothing open for long. A held connection that died (the machine rebooted, the network
dropped it) is dropped and the command runs once more on a fresh login.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import asyncssh

# (allocation id, host, port, user): one machine of one allocation, as one login user.
Key = tuple[str, str, int, str]
Opener = Callable[[], AbstractAsyncContextManager[asyncssh.SSHClientConnection]]

LIMIT = 512
IDLE_S = 120.0


@dataclass
class _Held:
    conn: asyncssh.SSHClientConnection
    stack: contextlib.AsyncExitStack
    used_at: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class MachineSessions:
    def __init__(self, limit: int = LIMIT, idle_s: float = IDLE_S) -> None:
        self.limit, self.idle_s = limit, idle_s
        self._held: OrderedDict[Key, _Held] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    async def run(self, key: Key, opener: Opener, command: str, *,
                  keep: bool) -> asyncssh.SSHCompletedProcess:
        """Run `command` on the machine over the held connection, or one `opener` makes (login
        errors raise as the opener's do). `keep`: hold the connection for the allocation's next
        step; else close it after the command (the last step)."""
        await self._expire()
        held = self._held.get(key)
        if held is not None:
            async with held.lock:
                try:
                    result = await held.conn.run(command, check=False)
                except (asyncssh.Error, OSError):
                    await self._close(key)  # it died while held: a fresh login below
                else:
                    held.used_at = time.monotonic()
                    self._held.move_to_end(key)
                    if not keep:
                        await self._close(key)
                    return result
        held = await self._open(opener)
        try:
            result = await held.conn.run(command, check=False)
        except BaseException:
            await _dispose(held)
            raise
        if keep:
            await self._hold(key, held)
        else:
            await _dispose(held)
        return result

    async def close_all(self) -> None:
        for key in list(self._held):
            await self._close(key)

    async def _open(self, opener: Opener) -> _Held:
        stack = contextlib.AsyncExitStack()
        try:
            conn = await stack.enter_async_context(opener())
        except BaseException:
            await stack.aclose()
            raise
        return _Held(conn=conn, stack=stack)

    async def _hold(self, key: Key, held: _Held) -> None:
        # Held first, then the displaced ones closed: a cancel meanwhile leaves nothing unowned.
        replaced = self._held.pop(key, None)  # a concurrent step of the same allocation logged in too
        self._held[key] = held
        displaced = [replaced] if replaced is not None else []
        while len(self._held) > self.limit:
            displaced.append(self._held.pop(next(iter(self._held))))  # least recently used first
        for old in displaced:
            await _dispose(old)

    async def _expire(self) -> None:
        cutoff = time.monotonic() - self.idle_s
        for key in [k for k, h in self._held.items() if h.used_at < cutoff and not h.lock.locked()]:
            await self._close(key)

    async def _close(self, key: Key) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            await _dispose(held)


async def _dispose(held: _Held) -> None:
    """Close a connection no longer held, to the end even when the caller is cancelled meanwhile
    (a half-closed login left to the garbage collector closes on another task, noisily)."""
    async def close() -> None:
        with contextlib.suppress(Exception):  # closing what may be dead already
            await held.stack.aclose()

    task = asyncio.ensure_future(close())
    _closing.add(task)  # held until done: a task only the loop refers to may be collected mid-close
    task.add_done_callback(_closing.discard)
    await asyncio.shield(task)


_closing: set[asyncio.Future[None]] = set()

"""Logging in to an SSH host with a given key, through a bastion (proxy jump) when there is one.

Shared by the fleet probe (activities/fleet.py) and the SSH fleet adapter (providers/ssh_fleet.py):
the one place that knows how a fleet's host is reached. Keys are opened asyncssh keys, never text.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncssh


@dataclass(frozen=True)
class Bastion:
    host: str
    port: int
    user: str
    key: asyncssh.SSHKey


@dataclass(frozen=True)
class HostLogin:
    """How to log in to one host: its address, the fleet's port, user and key, and the bastion."""

    host: str
    port: int
    user: str
    key: asyncssh.SSHKey
    bastion: Bastion | None = None


class LoginFailed(Exception):
    """The bastion or the host could not be logged in to; `where` is "bastion" or "" (the host)."""

    def __init__(self, cause: BaseException, where: str = "") -> None:
        super().__init__(failure_reason(cause, where))
        self.cause, self.where = cause, where


def failure_reason(e: BaseException, where: str = "") -> str:
    """Why a login failed, in words (never the key)."""
    prefix = f"{where}: " if where else ""
    if isinstance(e, ConnectionRefusedError):
        why = "connection refused"
    elif isinstance(e, TimeoutError):
        why = "timed out"
    elif isinstance(e, asyncssh.PermissionDenied):
        why = "authentication failed (key refused)"
    elif isinstance(e, asyncssh.HostKeyNotVerifiable):
        why = "host key not verifiable"
    elif isinstance(e, asyncssh.ChannelOpenError):
        why = f"the bastion could not reach the host ({e.reason})"
    elif isinstance(e, asyncssh.Error):
        why = f"ssh error: {e.reason}"
    elif isinstance(e, OSError):
        why = e.strerror or str(e)
    else:
        why = str(e) or type(e).__name__
    return prefix + why


@asynccontextmanager
async def login(t: HostLogin, timeout_s: float) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """A connection to the host (tunnelled through the bastion when given), closed on exit.
    LoginFailed when the bastion or the host cannot be logged in to; errors inside the block pass
    through unchanged."""
    # The user's own hosts: no known_hosts kept here, no agent, no ~/.ssh/config of the worker's user.
    opts: dict[str, Any] = {"known_hosts": None, "connect_timeout": timeout_s, "agent_path": None,
                            "config": None}
    tunnel: asyncssh.SSHClientConnection | None = None
    try:
        if t.bastion is not None:
            b = t.bastion
            try:
                async with asyncio.timeout(timeout_s + 5):
                    tunnel = await asyncssh.connect(b.host, port=b.port, username=b.user, client_keys=[b.key],
                                                    **opts)
            except (OSError, asyncssh.Error, TimeoutError) as e:
                raise LoginFailed(e, "bastion") from None
        try:
            async with asyncio.timeout(timeout_s + 5):
                conn = await asyncssh.connect(t.host, port=t.port, username=t.user, client_keys=[t.key],
                                              tunnel=tunnel, **opts)
        except (OSError, asyncssh.Error, TimeoutError) as e:
            raise LoginFailed(e) from None
        try:
            yield conn
        finally:
            conn.close()
    finally:
        if tunnel is not None:
            tunnel.close()

"""Logging in to an SSH host with a given key, through a bastion (proxy jump) when there is one.

Shared by the fleet probe (activities/fleet.py), the SSH fleet adapter (providers/ssh_fleet.py) and
the SSH steps on a fleet's hosts: the one place that knows how a fleet's host is reached. Keys are
opened asyncssh keys, never text. Host keys: trust on first use, then only the pinned key
(providers/host_keys.py); what each server presented is left in `Seen` for the probe to pin.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncssh

from providers.host_keys import HostKeyPin


@dataclass(frozen=True)
class Bastion:
    host: str
    port: int
    user: str
    key: asyncssh.SSHKey
    host_key: str | None = None  # pinned (OpenSSH line); None: not yet, any key is accepted


@dataclass(frozen=True)
class HostLogin:
    """How to log in to one host: its address, the fleet's port, user and key, and the bastion."""

    host: str
    port: int
    user: str
    key: asyncssh.SSHKey
    bastion: Bastion | None = None
    host_key: str | None = None  # pinned (OpenSSH line); None: not yet, any key is accepted


@dataclass
class Seen:
    """The host keys the servers presented (OpenSSH lines), for pinning on first use."""

    host_key: str | None = None
    bastion_host_key: str | None = None


class LoginFailed(Exception):
    """The bastion or the host could not be logged in to; `where` is "bastion" or "" (the host),
    `reason` says why in words (a changed host key with both fingerprints)."""

    def __init__(self, cause: BaseException, where: str = "", changed: str | None = None) -> None:
        reason = (f"{where}: {changed}" if where else changed) if changed else failure_reason(cause, where)
        super().__init__(reason)
        self.cause, self.where, self.reason = cause, where, reason
        self.key_changed = changed is not None


# What a login's failure is called: a fixed vocabulary. Never what the peer sent (a non-SSH service's
# answer, a server's disconnect text) nor the OS's message for it: a fleet host's reason must not
# become a way to read or fingerprint other services (finding M2).
NOT_SSH = "not an SSH server (no SSH banner)"
CLOSED = "connection closed before SSH login"
_CHANNEL = {asyncssh.OPEN_CONNECT_FAILED: "the bastion could not reach the host",
            asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED: "the bastion does not forward connections",
            asyncssh.OPEN_RESOURCE_SHORTAGE: "the bastion is out of resources"}
_ERRNO = {errno.EHOSTUNREACH: "host unreachable", errno.ENETUNREACH: "network unreachable",
          errno.EADDRNOTAVAIL: "address not available", errno.ECONNRESET: CLOSED,
          errno.ECONNABORTED: CLOSED, errno.EPIPE: CLOSED, errno.ETIMEDOUT: "timed out"}


def failure_reason(e: BaseException, where: str = "") -> str:
    """Why a login failed, from a fixed vocabulary (never the key, the peer's words or the OS's)."""
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
        why = _CHANNEL.get(e.code, "the bastion could not open a channel to the host")
    elif isinstance(e, asyncssh.ProtocolNotSupported):
        why = "unsupported SSH protocol version"
    elif isinstance(e, asyncssh.ProtocolError):
        why = NOT_SSH
    elif isinstance(e, asyncssh.ConnectionLost):
        why = CLOSED
    elif isinstance(e, asyncssh.KeyExchangeFailed):
        why = "SSH key exchange failed"
    elif isinstance(e, asyncssh.Error):
        why = f"ssh error ({type(e).__name__})"
    elif isinstance(e, socket.gaierror):
        why = "the name does not resolve"
    elif isinstance(e, OSError):
        code = e.errno or 0
        why = _ERRNO.get(code) or f"connection failed ({errno.errorcode.get(code, 'OSError')})"
    else:
        why = f"failed ({type(e).__name__})"
    return prefix + why


@asynccontextmanager
async def login(t: HostLogin, timeout_s: float,
                seen: Seen | None = None) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """A connection to the host (tunnelled through the bastion when given), closed on exit.
    LoginFailed when the bastion or the host cannot be logged in to (or shows another key than the
    pinned one); errors inside the block pass through unchanged. `seen` gets the presented keys."""
    seen = seen if seen is not None else Seen()
    # The user's own hosts: no agent, no ~/.ssh/config of the worker's user; host keys by pin.
    opts: dict[str, Any] = {"connect_timeout": timeout_s, "agent_path": None, "config": None}
    pin = HostKeyPin(t.host_key)
    tunnel: asyncssh.SSHClientConnection | None = None
    try:
        if t.bastion is not None:
            b = t.bastion
            bpin = HostKeyPin(b.host_key)
            try:
                async with asyncio.timeout(timeout_s + 5):
                    tunnel = await asyncssh.connect(b.host, port=b.port, username=b.user, client_keys=[b.key],
                                                    **opts, **bpin.options())
            except (OSError, asyncssh.Error, TimeoutError) as e:
                raise LoginFailed(e, "bastion", bpin.changed()) from None
            seen.bastion_host_key = bpin.seen
        try:
            async with asyncio.timeout(timeout_s + 5):
                conn = await asyncssh.connect(t.host, port=t.port, username=t.user, client_keys=[t.key],
                                              tunnel=tunnel, **opts, **pin.options())
        except (OSError, asyncssh.Error, TimeoutError) as e:
            raise LoginFailed(e, "", pin.changed()) from None
        seen.host_key = pin.seen
        try:
            yield conn
        finally:
            conn.close()
    finally:
        if tunnel is not None:
            tunnel.close()

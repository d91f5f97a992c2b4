"""Trust on first use for the hosts gpuprov logs in to (SSH fleets and their bastions): the first
successful connection records the host key the server presented; every later connection accepts
that key only, so a host whose key changed (reinstalled — or someone in the middle) is refused
before gpuprov authenticates or runs anything there, with both fingerprints in the reason.

    pin = HostKeyPin(saved)                      # saved: the pinned key's OpenSSH line, or None
    conn = await asyncssh.connect(..., **pin.options())
    pin.seen                                     # what the server presented: record it if unpinned
    pin.changed()                                # on failure: "host key changed: …" or None

Re-trusting is forgetting the pin (the next connection pins again): an explicit user action.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

import asyncssh


def fingerprint(openssh_line: str | None) -> str | None:
    """`SHA256:…` of a stored public key line (None stays None), as `ssh-keygen -l` prints it: the
    SHA-256 of the key's blob, unpadded base64. Hashed from the line's blob, not parsed into a key
    (15–70 µs a key, per row of every instance page): only lines gpuprov pinned reach here, parsed
    when pinned; a line that is not one raises ValueError."""
    if not openssh_line:
        return None
    fields = openssh_line.split()
    if len(fields) < 2:
        raise ValueError("not an OpenSSH public key line")
    try:
        blob = base64.b64decode(fields[1], validate=True)
    except binascii.Error:
        raise ValueError("not an OpenSSH public key line: its key is not base64") from None
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class _Checker(asyncssh.SSHClient):
    def __init__(self, pin: HostKeyPin) -> None:
        self.pin = pin

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return self.pin.accepts(key)


class HostKeyPin:
    """One connection's host key check against `pinned` (an OpenSSH public key line; None: the
    first connection, any key is accepted and becomes `seen`)."""

    def __init__(self, pinned: str | None) -> None:
        self.pinned = asyncssh.import_public_key(pinned) if pinned else None
        self.presented: asyncssh.SSHKey | None = None

    def options(self) -> dict[str, Any]:
        """asyncssh.connect() keyword arguments: no known_hosts file, every key asked of us."""
        opts: dict[str, Any] = {"known_hosts": ([], [], []), "client_factory": lambda: _Checker(self)}
        if self.pinned is not None:  # ask for the pinned key's type: a server with several keys shows it
            opts["server_host_key_algs"] = [a.decode() for a in self.pinned.sig_algorithms]
        return opts

    def accepts(self, key: asyncssh.SSHKey) -> bool:
        self.presented = key
        return self.pinned is None or key.public_data == self.pinned.public_data

    @property
    def seen(self) -> str | None:
        """The presented key as an OpenSSH line (what to pin)."""
        if self.presented is None:
            return None
        return self.presented.export_public_key("openssh").decode().strip()

    def changed(self) -> str | None:
        """Why the connection was refused, if it was for a changed key."""
        if self.pinned is None or self.presented is None or self.accepts(self.presented):
            return None
        return (f"host key changed: got {self.presented.get_fingerprint('sha256')}, "
                f"expected {self.pinned.get_fingerprint('sha256')}")

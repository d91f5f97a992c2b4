"""Which SSH keys a simulated Modal sandbox accepts: exactly those its command installs.

A real sandbox runs its command in its container; the simulation runs no container, so it reads the
command instead and accepts what sshd would: the lines a shell command writes to
`/root/.ssh/authorized_keys` with `printf '%s\\n' KEY... > /root/.ssh/authorized_keys` before it
`exec`s `/usr/sbin/sshd -D`. Any other command (no sshd, no keys) is refused with INVALID_ARGUMENT
naming this limit: the simulation serves SSH sandboxes only.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import shlex
import time
from typing import Any

from fakeclouds.errors import Invalid
from fakeclouds.ssh import parse_public_key

SHELLS = ("/bin/sh", "sh", "/bin/bash", "bash")
AUTHORIZED_KEYS = "/root/.ssh/authorized_keys"
SSHD = "/usr/sbin/sshd"
LIMIT = (
    "the simulation serves SSH sandboxes only: the command must write the keys with "
    f"printf '%s\\n' KEY... > {AUTHORIZED_KEYS} and exec {SSHD} -D"
)


def digest(data: bytes) -> str:
    """22 characters of a content hash: an id of Modal's length for the same content."""
    return hashlib.sha256(data).hexdigest()[:22]


def keys_of(argv: list[str]) -> list[str]:
    """The public keys the command `argv` authorizes for root; Invalid when it serves no SSH."""
    if len(argv) != 3 or argv[0] not in SHELLS or argv[1] != "-c":
        raise Invalid(f"simulation limit: {LIMIT}")
    try:
        lines = [shlex.split(line) for line in argv[2].splitlines() if line.strip()]
    except ValueError as exc:
        raise Invalid(f"the sandbox command is not valid shell: {exc}") from None
    keys: list[str] = []
    for words in lines:
        if words[:2] == ["printf", "%s\\n"] and words[-2:] == [">", AUTHORIZED_KEYS]:
            keys = words[2:-2]
    if not keys or not lines[-1][:3] == ["exec", SSHD, "-D"]:
        raise Invalid(f"simulation limit: {LIMIT}")
    for key in keys:
        try:
            parse_public_key(key)
        except ValueError as exc:
            raise Invalid(f"{AUTHORIZED_KEYS}: {exc}") from None
    return keys


TOKEN_TTL_S = 3600


def issue(state: dict[str, Any]) -> str:
    """A new input-plane auth token (AuthTokenGet): an unsigned JWT whose `exp` the client reads to
    know when to ask again; remembered in `state` until it expires."""

    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    exp = int(time.time()) + TOKEN_TTL_S
    token = f"{part({'alg': 'none'})}.{part({'exp': exp, 'jti': secrets.token_hex(8)})}."
    tokens = state.setdefault("auth_tokens", {})
    for old in [t for t, e in tokens.items() if e < time.time()]:
        del tokens[old]
    tokens[token] = exp
    return token


def issued(state: dict[str, Any], token: str | None) -> bool:
    return bool(token) and state.get("auth_tokens", {}).get(token, 0) >= time.time()

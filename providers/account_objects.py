"""Account-level objects an adapter registers once and every later create reuses (an SSH key object,
named or fingerprinted): "ensure it exists" written once, and the installation's SSH key object.

Two creates of one installation may race to register the same object; the cloud then refuses the
second (a 400/409/422 the adapter maps to InvalidRequest: "already exists", "already in use"). That
refusal is adopted, not raised, when a second look finds the object; any other refusal stands.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from providers import ssh_keys
from providers.base import InvalidRequest

T = TypeVar("T")


async def ensure(find: Callable[[], Awaitable[T | None]], create: Callable[[], Awaitable[T]]) -> T:
    """What `find` finds (by name or fingerprint), else what `create` makes. When `create` is refused
    as invalid and `find` now finds the object (a concurrent create registered it first), that one;
    when it still finds none, the refusal is raised."""
    found = await find()
    if found is not None:
        return found
    try:
        return await create()
    except InvalidRequest:
        adopted = await find()
        if adopted is None:
            raise
        return adopted


def key_material(line: str) -> str:
    """`type base64` of an OpenSSH public key line (comment dropped): what identifies the key."""
    return " ".join(line.split()[:2])


def key_object_name(installation_id: str, public_key: str, max_length: int = 64) -> str:
    """The account SSH key object of an installation's key: one per (installation, key),
    `gpuprov-<installation>-<12 hex of the key's SHA-256>`. No allocation key (`gp-…-a<n>`) reads
    like those 12 hex characters, so a listing tells this object from a machine's."""
    digest = hashlib.sha256(key_material(public_key).encode()).hexdigest()[:12]
    return f"gpuprov-{installation_id}-{digest}"[:max_length]


async def ensure_key_object(held: Callable[[], Awaitable[list[tuple[str, str]]]],
                            register: Callable[[str, str], Awaitable[None]], *, provider: str,
                            installation_id: str, public_key: str, max_length: int = 64) -> str:
    """The name of an account SSH key object holding `public_key`: the installation's own
    (`key_object_name`), else one the account already holds under another name (registering the
    same key twice may be refused [unconfirmed]), else the installation's, registered now.
    `held` lists the account's objects as (name, public key); `register(name, line)` adds one."""
    try:
        line = ssh_keys.public_key_line(public_key)
    except ssh_keys.KeyRefused as e:
        raise InvalidRequest(f"{provider}: the installation's SSH key was refused: {e}") from None
    material, name = key_material(line), key_object_name(installation_id, line, max_length)

    async def find() -> str | None:
        same = [n for n, public in await held() if key_material(public) == material and n]
        return name if name in same else (same[0] if same else None)

    async def make() -> str:
        await register(name, line)
        return name

    return await ensure(find, make)  # a concurrent create's is adopted

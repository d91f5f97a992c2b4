"""The name every gpuprov resource carries on clouds that find things by name: `gpuprov-<installation>-
<key>`. It is both the ownership mark (the prefix) and the idempotency key (a create looks it up before
launching), so it must be the same for the same key on every worker, forever."""

from __future__ import annotations

import hashlib

from providers.base import InvalidRequest

HASH_CHARS = 8


def prefix(installation_id: str) -> str:
    return f"gpuprov-{installation_id}-"


def owned_name(installation_id: str, key: str, max_length: int, *, what: str) -> str:
    """`gpuprov-<installation>-<key>`, at most `max_length` chars. A key too long for that is shortened
    deterministically (head + "-" + 8 hex chars of its SHA-256), so the same key always yields the
    same name. `what` names the cloud's object for the refusal ("a Lambda Cloud instance name")."""
    head = prefix(installation_id)
    if len(head) + len(key) <= max_length:
        return head + key
    room = max_length - len(head) - 1 - HASH_CHARS
    if room < 1:
        raise InvalidRequest(f"installation id {installation_id!r} is too long for {what}")
    return f"{head}{key[:room]}-{hashlib.sha256(key.encode()).hexdigest()[:HASH_CHARS]}"

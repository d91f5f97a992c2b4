"""Short random ids for rows and cloud resources: [a-z0-9], starting with a letter (safe as a cloud
name or tag)."""

from __future__ import annotations

import secrets as _random

_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def new_id(length: int = 10) -> str:
    """A short random id of [a-z0-9], starting with a letter (safe as a cloud name/tag)."""
    first = _random.choice(_ALPHABET[:26])
    return first + "".join(_random.choice(_ALPHABET) for _ in range(length - 1))

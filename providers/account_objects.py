"""Account-level objects an adapter registers once and every later create reuses (an SSH key object,
named or fingerprinted): "ensure it exists" written once.

Two creates of one installation may race to register the same object; the cloud then refuses the
second (a 400/409/422 the adapter maps to InvalidRequest: "already exists", "already in use"). That
refusal is adopted, not raised, when a second look finds the object; any other refusal stands.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

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

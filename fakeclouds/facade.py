"""What a simulated cloud declares about itself: one `Facade` per provider API, defined as
`FACADE` in its module (fakeclouds/<cloud>_api.py) and found through the cloud registry
(providers/registry.py, `CloudEntry.simulation`). The server mounts every registered facade;
`make run` connects each one with the credentials `credentials(token)` gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import APIRouter

    from fakeclouds.engine import Engine


@dataclass(frozen=True)
class Facade:
    name: str  # the cloud id it simulates (registry)
    prefix: str  # where the server mounts it, e.g. "/lambda/api/v1"
    display_name: str  # e.g. "Lambda Cloud (simulated)"
    build_router: Callable[[Engine, str], APIRouter]  # (engine, the facade's valid token)
    # The adapter's credential fields for this simulation's token (what `make run` connects with).
    credentials: Callable[[str], dict[str, Any]]

"""What the API process's garbage collector leaves out of its full walks.

Python's full collection walks every object in the oldest generation, and stalls every request in
flight while it does. Start-up's heap (the app, its routes and models, every imported module:
~220,000 objects) is frozen by the lifespan (`long_lived_frozen`). What the routes build on first
use stays: FastAPI's dependants, pydantic's validators and serializers, SQLAlchemy's compiled
statements — ~31,000 objects once the console's lists had each been served, the same count minutes
later (a `gc.get_objects(2)` census of `bench.api_scale`'s API process). Every full collection
walked them again: 15 in one run, 5.5-23 ms each, growing as the routes warmed (bench/RESULTS.md,
the thirty-fourth round), each one a stall of that length for the requests it caught — the size of
the console's p99 target (20 ms) on its own.

`FrozenWhenWarm` freezes once more after the process has served its first 100 and its first 1,000
requests. A frozen object is never walked again, so it is never freed if it later becomes garbage in
a reference cycle: only what is alive at those two moments can be lost that way, once, not what
requests allocate afterwards (still collected as before)."""

from __future__ import annotations

import gc
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

WARM_AFTER = (100, 1_000)  # requests served


def long_lived_frozen() -> None:
    """Collect, then move what survived out of the collector's sight."""
    gc.collect()
    gc.freeze()


class FrozenWhenWarm:
    """Freeze the heap again after the `after`-th requests (HTTP), each once, once its answer is sent:
    that request's own time is not stretched by the collection."""

    def __init__(self, app: ASGIApp, after: Sequence[int] = WARM_AFTER) -> None:
        self.app = app
        self._left = sorted(after)
        self.served = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
        if scope["type"] == "http" and self._left:
            self.served += 1
            if self.served >= self._left[0]:
                self._left.pop(0)
                long_lived_frozen()

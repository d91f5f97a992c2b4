"""The workflow loop's "… exception was never retrieved" errors: a task (or child handle) of a
workflow whose failure nobody read is logged as an ERROR traceback when it is collected while the
workflow is in the worker's memory (the SDK says nothing for one collected at the run's eviction).
An unread task sits in a reference cycle, so it is collected at the garbage collector's next pass —
`collecting()` makes that a pass every 0.1 s while a test's workflows run, not whenever."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Iterator


class UnreadOutcomes(logging.Handler):
    """Collects the "exception was never retrieved" errors logged while installed."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "exception was never retrieved" in record.getMessage():
            self.seen.append(record.getMessage())


@contextlib.contextmanager
def unread_outcomes() -> Iterator[UnreadOutcomes]:
    handler = UnreadOutcomes()
    logging.getLogger().addHandler(handler)
    try:
        yield handler
    finally:
        logging.getLogger().removeHandler(handler)


@contextlib.asynccontextmanager
async def collecting(every_s: float = 0.1) -> AsyncIterator[None]:
    """A garbage collector's pass every `every_s` while the block runs, and one at its end — over
    what the block makes only: everything older is frozen (`gc.freeze`) meanwhile, so a pass costs
    the test's own objects, not the whole session's heap (which would hold the GIL, and the
    in-process worker with it, for as long as a full collection takes)."""
    async def passes() -> None:
        while True:
            gc.collect()
            await asyncio.sleep(every_s)

    gc.freeze()
    task = asyncio.create_task(passes())
    try:
        yield
    finally:
        task.cancel()
        gc.collect()
        gc.unfreeze()

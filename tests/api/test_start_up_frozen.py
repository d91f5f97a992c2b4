"""What start-up made leaves the garbage collector's full walks, in the API (api/frozen_heap.py
`long_lived_frozen`, run by its lifespan, and again once warm) and the worker
(worker.freeze_start_up): each walk of that heap stalled every request in flight for 100-200 ms
(README, Benchmarks). What comes after is still collected. Checked by what the collector tracks,
not by timing."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

import worker
from api.app import create_app
from api.deps import AppDeps
from api.frozen_heap import WARM_AFTER
from store.secrets import SecretBox


class Cycle:
    """An object only the cycle collector can free (it refers to itself)."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """Nothing frozen before the test; afterwards this process's heap as it was (a test process
    keeps collecting what its tests leave)."""
    frozen_before = gc.get_freeze_count()
    gc.unfreeze()
    yield
    if not frozen_before:
        gc.unfreeze()


def tracked(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


def check_freezes_then_collects(start_up: Callable[[], Any]) -> None:
    made_before = Cycle()
    assert tracked(made_before) and gc.get_freeze_count() == 0
    start_up()
    assert gc.get_freeze_count() > 10_000  # the imported modules, the app: all of it
    assert not tracked(made_before)  # out of every generation the full collection walks
    assert_later_garbage_collected()  # made after start-up: still collected


def assert_later_garbage_collected() -> None:
    later = Cycle()
    gone = weakref.ref(later)
    del later
    gc.collect()
    assert gone() is None


def test_the_apis_start_up_freezes_what_it_made_and_later_garbage_is_collected(
        unfrozen: None, engine: sa.Engine, box: SecretBox) -> None:
    app = create_app(AppDeps(engine=engine, box=box, api_token="t", installation_id="inst0001",
                             workflows=None))  # type: ignore[arg-type]

    def start_up() -> None:
        with TestClient(app) as c:  # runs the lifespan
            assert c.get("/healthz").status_code == 200

    check_freezes_then_collects(start_up)


def test_the_workers_freeze_leaves_later_garbage_collected(unfrozen: None) -> None:
    check_freezes_then_collects(worker.freeze_start_up)


def test_the_api_freezes_again_once_warm(unfrozen: None, engine: sa.Engine, box: SecretBox) -> None:
    """What requests leave alive once served (a route's validators, its compiled statements) is
    frozen after the first WARM_AFTER requests; what later requests leave is still collected."""
    app = create_app(AppDeps(engine=engine, box=box, api_token="t", installation_id="inst0001",
                             workflows=None))  # type: ignore[arg-type]
    with TestClient(app) as c:
        assert c.get("/healthz").status_code == 200  # served after the lifespan froze start-up
        built_on_first_use = Cycle()
        for _ in range(WARM_AFTER[0] - 2):
            c.get("/healthz")
        assert tracked(built_on_first_use)  # 99 served: not yet
        c.get("/healthz")
        assert not tracked(built_on_first_use)  # the 100th: frozen with what else is alive
        assert_later_garbage_collected()

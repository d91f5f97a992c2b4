"""One acceptance run at a time per connection (store/acceptance_runs.py take_lane), on SQLite and
PostgreSQL: the lane is taken once however many ask at the same moment, its run's result or a start
that failed lets it go, and it is taken over only from the run it names."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from messages.acceptance import (
    STEPS,
    AcceptanceResult,
    AcceptanceState,
    AcceptanceStep,
    RecordAcceptanceInput,
)
from store import acceptance_runs, migrate


@pytest.fixture
def db(engine: sa.Engine) -> sa.Engine:
    migrate.upgrade(engine)
    return engine


def started(db: sa.Engine, run_id: str, connection_id: str = "c1") -> None:
    with Session(db) as s:
        acceptance_runs.save(s, RecordAcceptanceInput(run_id=run_id, project="p", connection_id=connection_id,
                                                      state=AcceptanceState(run_id=run_id, cloud="lambda")))


def lanes(db: sa.Engine) -> list[tuple[str, str]]:
    with db.connect() as c:
        return [tuple(r) for r in c.execute(sa.text("SELECT connection_id, run_id FROM acceptance_lane"))]


def take(db: sa.Engine, run_id: str, *, holder: str | None = None, connection_id: str = "c1") -> str | None:
    """None when `run_id` took the lane, else the run that holds it."""
    with Session(db) as s:
        lane = acceptance_runs.take_lane(s, connection_id, run_id, holder=holder)
    return None if lane is None else lane.run_id


def test_many_asking_at_once_one_takes_the_lane(db: sa.Engine) -> None:
    runs = [f"acc-{i:012d}" for i in range(8)]
    answers: dict[str, str | None] = {}
    go = threading.Barrier(len(runs))

    def ask(run_id: str) -> None:
        go.wait()
        answers[run_id] = take(db, run_id)

    threads = [threading.Thread(target=ask, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(answers) == len(runs), "a take failed (its thread's traceback is above)"
    [winner] = [r for r, holder in answers.items() if holder is None]
    assert all(holder == winner for r, holder in answers.items() if r != winner)
    assert lanes(db) == [("c1", winner)]
    assert take(db, "acc-other", connection_id="c2") is None  # a lane per connection


def test_the_result_or_a_failed_start_lets_it_go(db: sa.Engine) -> None:
    started(db, "acc-1")
    assert take(db, "acc-1") is None
    steps = [AcceptanceStep(name=n, outcome="passed", seconds=1.0) for n in STEPS]
    result = AcceptanceResult(cloud="lambda", adapter_version="v1", account="simulated", steps=steps,
                              started_at=datetime(2030, 1, 1, tzinfo=UTC))
    with Session(db) as s:
        acceptance_runs.save(s, RecordAcceptanceInput(  # a record on the way: still held
            run_id="acc-1", project="p", connection_id="c1",
            state=AcceptanceState(run_id="acc-1", cloud="lambda")))
    assert lanes(db) == [("c1", "acc-1")]
    with Session(db) as s:
        acceptance_runs.save(s, RecordAcceptanceInput(
            run_id="acc-1", project="p", connection_id="c1", result=result,
            state=AcceptanceState(run_id="acc-1", cloud="lambda", done=True, result=result)))
    assert lanes(db) == []

    started(db, "acc-2")
    assert take(db, "acc-2") is None
    with Session(db) as s:
        acceptance_runs.forget(s, "acc-2")
    assert lanes(db) == []


def test_taken_over_only_from_the_run_it_names(db: sa.Engine) -> None:
    assert take(db, "acc-1") is None
    assert take(db, "acc-2") == "acc-1"
    assert take(db, "acc-3", holder="acc-9") == "acc-1", "not the holder any more: nothing taken"
    assert take(db, "acc-2", holder="acc-1") is None
    assert lanes(db) == [("c1", "acc-2")]
    assert take(db, "acc-3", holder="acc-1") == "acc-2", "taken over since by another"

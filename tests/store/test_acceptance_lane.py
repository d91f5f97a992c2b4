"""One acceptance run at a time per cloud account (store/acceptance_runs.py take_lane, lane_key), on
SQLite and PostgreSQL: the lane is taken once however many ask at the same moment, its run's result or
a start that failed lets it go, it is taken over only from the run it names, and 0037 re-keyed the
lanes 0036 held by connection."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from alembic import command
from sqlmodel import Session

from messages.acceptance import (
    STEPS,
    AcceptanceResult,
    AcceptanceState,
    AcceptanceStep,
    RecordAcceptanceInput,
)
from store import acceptance_runs, migrate
from store.models import Connection


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
        return [tuple(r) for r in c.execute(sa.text("SELECT account_key, run_id FROM acceptance_lane"))]


def take(db: sa.Engine, run_id: str, *, holder: str | None = None, key: str = "k1") -> str | None:
    """None when `run_id` took the lane, else the run that holds it."""
    with Session(db) as s:
        lane = acceptance_runs.take_lane(s, key, run_id, holder=holder)
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
    assert lanes(db) == [("k1", winner)]
    assert take(db, "acc-other", key="k2") is None  # a lane per account


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
    assert lanes(db) == [("k1", "acc-1")]
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
    assert lanes(db) == [("k1", "acc-2")]
    assert take(db, "acc-3", holder="acc-1") == "acc-2", "taken over since by another"


def _connection(cid: str, provider: str, account: str | None) -> Connection:
    return Connection(id=cid, project="p", provider=provider, name=cid, account=account, secret=b"sealed")


def test_one_account_is_one_lane_whichever_connection_names_it() -> None:
    same = [_connection("c1", "lambda", "Lambda Cloud API key 1f2e"),
            _connection("c2", "lambda", "Lambda Cloud API key 1f2e")]  # one key connected twice
    assert acceptance_runs.lane_key(same[0]) == acceptance_runs.lane_key(same[1])
    others = [_connection("c3", "lambda", "Lambda Cloud API key 9a9a"),  # another key
              _connection("c4", "runpod", "Lambda Cloud API key 1f2e"),  # another cloud's identity
              _connection("c5", "lambda", None), _connection("c6", "lambda", None)]  # none verified
    keys = {acceptance_runs.lane_key(c) for c in [same[0], *others]}
    assert len(keys) == 5 and all(len(k) == 32 for k in keys)
    assert not any("1f2e" in k for k in keys)


def test_0037_rekeys_the_lanes_0036_held_by_connection(engine: sa.Engine) -> None:
    """Lanes held when the deployment upgrades keep their runs; of two runs on one account, the one
    that took its lane first keeps it. The downgrade gives each back its run's connection."""
    migrate.upgrade(engine, "0036")
    conns = [_connection("c1", "lambda", "key A"), _connection("c2", "lambda", "key A"),
             _connection("c3", "aws", None)]
    keys = [acceptance_runs.lane_key(c) for c in conns]
    with Session(engine) as s:
        s.add_all(conns)
        s.commit()
    for run_id, conn in (("acc-1", "c1"), ("acc-2", "c2"), ("acc-3", "c3")):
        started(engine, run_id, conn)
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    with engine.begin() as c:
        for i, (conn, run_id) in enumerate((("c2", "acc-2"), ("c1", "acc-1"), ("c3", "acc-3"))):
            c.execute(sa.text("INSERT INTO acceptance_lane (connection_id, run_id, taken_at) "
                              "VALUES (:c, :r, :at)"),
                      {"c": conn, "r": run_id, "at": t0 + timedelta(seconds=i)})
    migrate.upgrade(engine)
    assert sorted(lanes(engine)) == sorted([(keys[1], "acc-2"), (keys[2], "acc-3")])
    assert take(engine, "acc-4", key=keys[0]) == "acc-2"

    command.downgrade(migrate.alembic_config(engine), "0036")
    with engine.connect() as c:
        back = c.execute(sa.text("SELECT connection_id, run_id FROM acceptance_lane")).all()
    assert sorted(tuple(r) for r in back) == [("c2", "acc-2"), ("c3", "acc-3")]

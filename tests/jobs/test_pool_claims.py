"""A pool job's claim on a pool machine (store/pool_claims.py): two jobs claiming the one free machine
at once — one wins, the other waits; the end of the winner frees it; a retried claim gets the same
machine back; a machine not ready is never claimed."""

from __future__ import annotations

import threading
from pathlib import Path

import sqlalchemy as sa
from sqlmodel import Session

from messages.pool import pool_allocation_id
from store import pool_claims
from store.models import Instance, Job, Pool
from tests import migrated


def _engine(tmp_path: Path) -> sa.Engine:
    engine = migrated.sqlite_engine(tmp_path / "claims.db")
    return engine


def _setup(engine: sa.Engine) -> tuple[str, str]:
    ready = pool_allocation_id("pool01", "web", 0, 1)
    booting = pool_allocation_id("pool01", "web", 1, 1)
    with Session(engine) as s:
        s.add(Pool(id="pool01", project="default", name="web", cloud="lambda", min_size=0, max_size=2, size=2,
                   workflow_id="pool-pool01"))
        for aid, status in ((ready, "ready"), (booting, "provisioning")):
            s.add(Instance(id=aid, provider="lambda", connection_id="c", workflow_id=f"alloc-{aid}",
                           status=status, ssh_host="127.0.0.1", ssh_port=22, ssh_user="ubuntu"))
        for j in ("ja", "jb"):
            s.add(Job(id=j, name=j, type="task", command="true", requested_by="t", workflow_id=f"job-{j}",
                      status="provisioning"))
        s.commit()
    return ready, booting


def test_two_claims_for_one_free_machine_one_wins(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    ready, _ = _setup(engine)
    start = threading.Barrier(2)
    got: dict[str, str | None] = {}

    def claim(job_id: str) -> None:
        with Session(engine) as s:
            start.wait()
            c = pool_claims.claim(s, job_id, "pool01")
            got[job_id] = c.machine.id if c.machine is not None else None

    threads = [threading.Thread(target=claim, args=(j,)) for j in ("ja", "jb")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(got.values(), key=lambda m: m is None) == [ready, None], got  # one wins, one waits
    winner = next(j for j, m in got.items() if m == ready)
    loser = "jb" if winner == "ja" else "ja"
    with Session(engine) as s:
        assert pool_claims.busy(s, [ready]) == {ready}
        again = pool_claims.claim(s, winner, "pool01")  # a retried claim: the same machine
        assert again.machine is not None and again.machine.id == ready
        assert pool_claims.claim(s, loser, "pool01").machine is None
        job = s.get(Job, winner)
        assert job is not None
        job.status = "succeeded"  # its end releases the claim
        s.add(job)
        s.commit()
        assert pool_claims.busy(s, [ready]) == set()
        c = pool_claims.claim(s, loser, "pool01")
        assert c.machine is not None and c.machine.id == ready
    engine.dispose()


def test_a_deleted_pool_is_no_place_to_wait(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    _setup(engine)
    with Session(engine) as s:
        pool = s.get(Pool, "pool01")
        assert pool is not None
        pool.status = "deleting"
        s.add(pool)
        s.commit()
        c = pool_claims.claim(s, "ja", "pool01")
        assert c.machine is None and c.gone is not None and "deleted" in c.gone
    engine.dispose()

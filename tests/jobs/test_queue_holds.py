"""Held jobs in the queue (store/queue.py): a paused group's jobs keep their place and PRI but are
not admitted, and block no one behind them; a project whose daily budget is reached gets no grant
until it is lifted. On the session's SQLite database, with projects of the test's own."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from messages.job import JobStatus
from store import policies, queue, spend
from store.models import Job, JobLimit, utcnow
from tests.migrated import sqlite_engine


def _job(s: Session, project: str, name: str, type_: str, age_min: int, priority: int = 0,
         gpus: int = 1, price: float | None = None) -> str:
    job = Job(id=f"{project}-{name}", project=project, name=name, type=type_, command="true",
              requested_by="t", gpu="a10", gpu_count=gpus, workflow_id="w", priority=priority,
              created_at=utcnow() - timedelta(minutes=age_min), max_price_per_hour=price)
    s.add(job)
    s.commit()
    return job.id


def test_a_paused_group_is_passed_over_keeps_its_place_and_is_admitted_once_resumed(
        db_engine: sa.Engine) -> None:
    p = f"hold-{uuid.uuid4().hex[:6]}"
    with Session(db_engine) as s:
        queue.set_limits(s, p, max_gpus=1, max_usd_per_hour=None)
        ppo = _job(s, p, "ppo", "ppo", age_min=10)  # first in line, of the grpo group
        dpo = _job(s, p, "dpo", "dpo", age_min=5)
        row, made = queue.pause(s, p, "grpo", by="pol1", run_id="r1")
        assert made and (row.by, row.run_id) == ("pol1", "r1")
        _, again = queue.pause(s, p, "grpo", by="pol2", run_id="r2")
        assert not again and queue.pauses(s, p)[(p, "grpo")].by == "pol1"  # the first pause stays

        assert not queue.admit(s, ppo)
        assert queue.admit(s, dpo)  # the paused job ahead of it blocks nothing
        pri = queue.positions(s)
        assert ppo in pri and dpo not in pri  # still waiting, in its place
        held = queue.held(s, [s.get(Job, ppo)])  # type: ignore[list-item]
        assert "grpo queue of project" in (held.why(s.get(Job, ppo)) or "")  # type: ignore[arg-type]

        assert queue.resume(s, p, "grpo") and not queue.resume(s, p, "grpo")
        assert not queue.admit(s, ppo)  # resumed, but the 1 GPU is held by the dpo job
        done = s.get(Job, dpo)
        assert done is not None
        queue.release(done)
        s.add(done)
        s.commit()
        assert queue.admit(s, ppo)


def test_a_project_over_its_daily_budget_gets_no_grant_until_it_is_lifted(db_engine: sa.Engine) -> None:
    p, other = f"bud-{uuid.uuid4().hex[:6]}", f"bud-{uuid.uuid4().hex[:6]}"
    now = utcnow()
    with Session(db_engine) as s:
        spend.open_interval(s, key=f"gp-{p}-a1", instance_id=p, project=p, connection_id="c",
                            provider="fake", rate_per_hour=1000.0,
                            started_at=max(now - timedelta(minutes=30),
                                           now.replace(hour=0, minute=0, second=0)))
        policies.set_budget(s, p, 1.0)
        policies.set_budget(s, other, 1000.0)  # a budget not reached holds nothing
        mine, theirs = _job(s, p, "e", "eval", age_min=3), _job(s, other, "e", "eval", age_min=2)
        assert not queue.admit(s, mine)
        assert queue.admit(s, theirs)
        why = queue.held(s, [s.get(Job, mine)]).why(s.get(Job, mine))  # type: ignore[arg-type, list-item]
        assert why is not None and "daily budget of $1.00" in why
        policies.set_budget(s, p, None)
        assert queue.admit(s, mine)


def test_waits_says_of_a_job_in_hand_what_positions_numbers(db_engine: sa.Engine) -> None:
    """`queue.waits` (a job's detail asks it before walking the queue for its PRI) agrees with the
    queue's own selection on every status, a granted job, and a type that never queues."""
    p = f"waits-{uuid.uuid4().hex[:6]}"
    with Session(db_engine) as s:
        ids = []
        for n, (status, granted, type_) in enumerate(
                [(st.value, g, t) for st in JobStatus for g in (False, True) for t in ("sft", "serving")]):
            job_id = _job(s, p, f"j{n}", type_, age_min=n)
            job = s.get(Job, job_id)
            assert job is not None
            job.status, job.granted_at = status, utcnow() if granted else None
            s.add(job)
            ids.append(job_id)
        s.commit()
        jobs = [s.get(Job, i) for i in ids]
        waiting = {j.id for j in jobs if j is not None and queue.waits(j)}
        assert waiting == set(queue.positions(s, p))
        assert len(waiting) == 1  # queued, not granted, a queueable type: the one combination


def test_a_job_over_a_limit_on_its_own_is_passed_over_and_blocks_no_one(db_engine: sa.Engine) -> None:
    """A limit lowered under a queued job: that job could start only once it is raised again, so the
    jobs behind it — of its project, and of every project behind an installation's limit — go first."""
    p, other = f"alone-{uuid.uuid4().hex[:6]}", f"alone-{uuid.uuid4().hex[:6]}"
    with Session(db_engine) as s:
        before = s.get(JobLimit, queue.GLOBAL)
        kept = (before.max_gpus, before.max_usd_per_hour) if before is not None else (None, None)
        big = _job(s, p, "big", "sft", age_min=10, priority=900, gpus=3)  # first in line
        mine = _job(s, p, "next", "sft", age_min=5, priority=900)
        queue.set_limits(s, p, max_gpus=2, max_usd_per_hour=None)  # lowered under the queued job
        reasons = queue.waiting_reasons(s)
        assert reasons[big] == (f"{queue.NEVER_FITS}: over project {p}'s limit of 2 GPUs (this job needs 3)")
        assert reasons[mine] == queue.FITS_NOW
        assert not queue.admit(s, big) and queue.admit(s, mine)

        # The installation's limit, one GPU over what the session's other tests hold now: the job
        # behind, of another project, takes that GPU; the big one stays in its place meanwhile.
        queue.set_limits(s, p, max_gpus=None, max_usd_per_hour=None)
        held_now = queue.in_use(s)[1].gpus
        row = s.get(Job, big)
        assert row is not None
        row.gpu_count = held_now + 2
        s.add(row)
        s.commit()
        theirs = _job(s, other, "e", "eval", age_min=4, priority=900)
        try:
            queue.set_limits(s, queue.GLOBAL, max_gpus=held_now + 1, max_usd_per_hour=None)
            assert queue.waiting_reasons(s)[big] == (
                f"{queue.NEVER_FITS}: over the installation's limit of {held_now + 1} GPUs "
                f"(this job needs {held_now + 2})")
            assert not queue.admit(s, big) and queue.admit(s, theirs)
            assert big in queue.positions(s)  # still waiting, in its place
            queue.set_limits(s, queue.GLOBAL, max_gpus=2 * held_now + 3, max_usd_per_hour=None)  # raised
            assert queue.admit(s, big)
        finally:
            queue.set_limits(s, queue.GLOBAL, *kept)


@pytest.mark.parametrize("paused", [False, True])
def test_a_pages_reasons_are_the_whole_walks(tmp_path: Path, paused: bool) -> None:
    """A job list explains its page's waiting jobs with a walk that stops once they are explained,
    asks no job whether it is held when nothing is paused or over budget, and looks a job's own limits
    up once per what it asks: each reason is the one the whole walk gives. A queue of its own (random,
    seeded) on a database of its own: projects with a GPU limit, a $/h limit, none; the installation's
    limit; jobs that never fit; priorities; a paused group."""
    rng = random.Random(24)
    engine = sqlite_engine(tmp_path / "queue.db")
    projects = ["gpus", "dollars", "free"]
    with Session(engine) as s:
        queue.set_limits(s, "gpus", max_gpus=4, max_usd_per_hour=None)
        queue.set_limits(s, "dollars", max_gpus=None, max_usd_per_hour=6.0)
        queue.set_limits(s, queue.GLOBAL, max_gpus=30, max_usd_per_hour=None)
        ids = []
        for i in range(120):
            project = rng.choice(projects)
            ids.append(_job(s, project, f"j{i}", rng.choice(["sft", "dpo", "grpo", "eval"]),
                            age_min=rng.randint(0, 600), priority=rng.choice([0, 0, 0, 1, 5]),
                            gpus=rng.choice([1, 1, 2, 4, 8]), price=rng.choice([0.5, 1.5, 7.0])))
        if paused:
            queue.pause(s, "gpus", "grpo", by="api")
        whole = queue.waiting_reasons(s)
        limits = queue.load_limits(s)
        for job in s.exec(select(Job).where(col(Job.id).in_(whole))).all():  # its own limits, asked anew
            never = limits.never_fits(job.project, queue.gpus_of(job), queue.usd_of(job)) is not None
            assert whole[job.id].startswith(queue.NEVER_FITS) == never, job.id
        group = [i for i in queue.positions(s)
                 if i.startswith("gpus-") and rows_type(s, i) in ("grpo", "ppo")]
        assert group, "the queue holds jobs of the group paused"
        # A paused job is passed over (the walk gives it no reason); every other waiting job has one.
        assert [i for i in group if i in whole] == ([] if paused else group)
        order = list(queue.positions(s))
        kinds = (queue.NEVER_FITS, "waiting for capacity", queue.FITS_NOW, "behind job",
                 "behind a job ahead in the queue")
        assert [k for k in kinds if not any(r.startswith(k) for r in whole.values())] == []
        rows = {job.id: job for job in s.exec(select(Job).where(col(Job.id).in_(ids))).all()}
        for page in (order[:5], order[-5:], order[40:45], rng.sample(order, 12), [order[-1]]):
            explained = queue.held(s, [rows[i] for i in page])
            assert {i: explained.reason(rows[i]) for i in page} == {
                i: explained.why(rows[i]) or whole[i] for i in page}
    engine.dispose()


def rows_type(s: Session, job_id: str) -> str:
    job = s.get(Job, job_id)
    assert job is not None
    return job.type

"""A project's PRI numbers (store/queue.py `positions`), read from its own waiting jobs, are the
installation's one queue order filtered to the project — whatever other projects wait, at equal
priorities (round-robin between projects) and equal creation times (the id breaks ties) — on SQLite
and on PostgreSQL."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session

from store import queue
from store.models import Job

T0 = datetime(2026, 12, 1, tzinfo=UTC)
PROJECTS = ["mine", "busy", "quiet"]


def test_a_projects_numbers_are_the_installation_order_filtered_to_it(migrated: sa.Engine) -> None:
    rng = random.Random(24)
    with Session(migrated) as s:
        for n in range(150):
            project = rng.choice(PROJECTS + ["busy"] * 3)  # one project with most of the queue
            status = rng.choice(["queued"] * 4 + ["running", "succeeded"])
            at = T0 + timedelta(minutes=rng.randint(0, 5))  # many equal times: ties on the id
            s.add(Job(id=f"j{n:03d}", project=project, name="j", type=rng.choice(["sft", "grpo", "task"]),
                      command="true", requested_by="t", workflow_id=f"job-{n}", status=status,
                      priority=rng.choice([0, 0, 5, 10]), created_at=at))
        s.commit()
        everyone = queue.queue_order(queue.waiting_jobs(s))  # the installation's one order
        assert len({j.project for j in everyone}) == len(PROJECTS)
        for project in PROJECTS:
            filtered = [j.id for j in everyone if j.project == project]
            assert queue.positions(s, project) == {i: n for n, i in enumerate(filtered, start=1)}, project
        assert queue.positions(s) == {j.id: n for n, j in enumerate(everyone, start=1)}

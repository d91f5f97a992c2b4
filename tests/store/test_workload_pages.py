"""The Workload Queue's pages, sorted and cut by the database (store/workloads.py `page_keys`), on
SQLite and on PostgreSQL: every page together is the queue in its order — active first, then
newest, the id breaking ties (equal creation times included) — each row once; and the pills'
counts per kind, of one project only."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session

from store import workloads
from store.models import Job, ReportedWorkload

STATUSES = ["queued", "provisioning", "running", "succeeded", "failed", "cancelled"]
KINDS = ["sft", "dpo", "grpo", "serving", "eval", "task", "synthetic"]
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _seed(session: Session) -> list[tuple[str, str, bool, datetime]]:
    rng = random.Random(25)
    expected = []
    for n in range(60):
        project = "mine" if n % 4 else "other"
        at = T0 + timedelta(minutes=rng.choice([0, 1, 2, 3]))  # many equal times: ties on the id
        status, kind = rng.choice(STATUSES), rng.choice(KINDS)
        if n % 3:
            session.add(Job(id=f"j{n:03d}", project=project, name="j", type=kind, command="true",
                            requested_by="t", workflow_id=f"job-{n}", status=status, created_at=at,
                            updated_at=at))
            row_id = f"job:j{n:03d}"
        else:
            session.add(ReportedWorkload(project=project, id=f"r{n:03d}", name="r", kind=kind, status=status,
                                         source="training", created_at=at, updated_at=at))
            row_id = f"r{n:03d}"
        if project == "mine":
            expected.append((row_id, kind, status in workloads.ACTIVE_STATUSES, at))
    session.commit()
    return sorted(expected, key=lambda r: (not r[2], -r[3].timestamp(), r[0]))


def test_pages_follow_the_queue_order_and_count_per_kind(migrated: sa.Engine) -> None:
    with Session(migrated) as session:
        expected = _seed(session)
        got, offset = [], 0
        while page := workloads.page_keys(session, "mine", None, offset, 7):
            got += [(i, k, a, at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC))
                    for i, k, a, at in page]
            offset += 7
        assert got == expected
        sft = workloads.page_keys(session, "mine", ["sft", "dpo"], 0, 100)
        assert [k[0] for k in sft] == [r[0] for r in expected if r[1] in ("sft", "dpo")]
        counts = workloads.kind_counts(session, "mine")
        assert counts == {k: sum(1 for r in expected if r[1] == k) for k in {r[1] for r in expected}}

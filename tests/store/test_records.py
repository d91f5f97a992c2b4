"""The console's lists read rows as records (store/records.py), not ORM objects: on SQLite and on
PostgreSQL each record reads, by attribute, what the model's object reads for the same row, and a
list's query keeps its project's rows only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from api.fields import aware
from store import jobs as job_store
from store import workloads
from store.models import Instance, Job, ReportedWorkload
from store.records import bound_records, records

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _utc(value: object) -> object:
    """SQLite hands back naive timestamps (every stored one UTC): compare them as UTC."""
    return aware(value) if isinstance(value, datetime) else value


def _same(record: object, orm: object, columns: tuple[Any, ...]) -> None:
    for c in columns:
        key = c.key
        assert key is not None
        assert _utc(getattr(record, key)) == _utc(getattr(orm, key)), key


def _seed(session: Session) -> None:
    for n, project in enumerate(["mine", "mine", "other"]):
        session.add(Instance(id=f"i{n}", project=project, provider="lambda", connection_id="c",
                             workflow_id="w", gpu="H100", gpu_count=2, region="us-east-1",
                             offer_region="us-east-3", gpus_found=[{"name": "NVIDIA H100"}] * 2))
        session.add(Job(id=f"j{n}", project=project, name=f"job {n}", type="sft", command="sealed",
                        requested_by="t", workflow_id=f"job-{n}", status="running", allocation_id=f"i{n}",
                        attempts=n + 1, started_at=T0, created_at=T0 - timedelta(minutes=n), updated_at=T0))
        session.add(ReportedWorkload(project=project, id=f"r{n}", name="r", kind="eval",
                                     status="queued" if n else "running", source="training", created_at=T0,
                                     updated_at=T0, progress_pct=12.5))
    session.commit()


def test_a_list_reads_the_same_as_the_models_objects(migrated: sa.Engine) -> None:
    with Session(migrated) as session:
        _seed(session)
        jobs = workloads.jobs_by_id(session, "mine", ["j0", "j1", "j2"])  # j2 is another project's
        assert sorted(j.id for j in jobs) == ["j0", "j1"]
        for j in jobs:
            _same(j, session.get(Job, j.id), workloads.JOB_ROW_COLUMNS)
        machines = workloads.machines_of(session, jobs)
        assert sorted(machines) == ["i0", "i1"]
        for iid, m in machines.items():
            _same(m, session.get(Instance, iid), workloads.MACHINE_COLUMNS)
        shown = workloads.reported_shown(session, "mine", ["r0"], "queued")  # r0, and every queued one
        assert [r.id for r in shown] == ["r0", "r1"]
        for r in shown:
            _same(r, session.get(ReportedWorkload, ("mine", r.id)), workloads.REPORTED_COLUMNS)


def test_a_jobs_gpu_readings_as_records(migrated: sa.Engine) -> None:
    with Session(migrated) as session:
        session.add(Job(id="g", name="n", type="sft", command="sealed", requested_by="t", workflow_id="w"))
        session.commit()
        for i in range(3):
            job_store.add_gpu_reading(session, "g", T0 + timedelta(seconds=i),
                                      [(10 * i, 100, 200), (5, 6, 200)])
        readings = job_store.gpu_readings(session, "g", n=2)  # the last two readings, oldest first
        got = [(_utc(r.at), r.gpu, r.utilization_pct, r.memory_used_mib, r.memory_total_mib)
               for r in readings]
        assert got == [
            (T0 + timedelta(seconds=1), 0, 10.0, 100, 200), (T0 + timedelta(seconds=1), 1, 5.0, 6, 200),
            (T0 + timedelta(seconds=2), 0, 20.0, 100, 200), (T0 + timedelta(seconds=2), 1, 5.0, 6, 200)]


def test_each_shape_of_select_gets_its_own_record(migrated: sa.Engine) -> None:
    with Session(migrated) as session:
        _seed(session)
        ids = records(session.execute(sa.select(col(Job.id)).order_by(col(Job.id))).all())
        pairs = records(session.execute(select(col(Job.id), col(Job.status)).order_by(col(Job.id))).all())
        assert [r.id for r in ids] == ["j0", "j1", "j2"] and type(ids[0])._fields == ("id",)
        assert [(r.id, r.status) for r in pairs] == [("j0", "running"), ("j1", "running"), ("j2", "running")]
        # A statement built once, its values bound: the same records, each call its own values.
        built = sa.select(col(Job.id), col(Job.status)).where(
            col(Job.id).in_(sa.bindparam("ids", expanding=True))).order_by(col(Job.id))
        assert [r.id for r in bound_records(session, built, {"ids": ["j2", "j0"]})] == ["j0", "j2"]
        assert [r.id for r in bound_records(session, built, {"ids": ["j1"]})] == ["j1"]
        assert bound_records(session, built, {"ids": []}) == []
        assert records([]) == []

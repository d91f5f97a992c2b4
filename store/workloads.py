"""Query helpers for the Workload Queue's sources: reported workloads (store/models.py
ReportedWorkload, work run elsewhere) and gpuprov's own managed jobs with their machines."""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlmodel import Session, col, select

from store.models import Instance, Job, ReportedWorkload, table_of, utcnow
from store.records import bound_records

# A managed job's row id in the Workload Queue is this prefix and its id (api/routers/workloads.py).
JOB_ROW_PREFIX = "job:"

# A row's place in the Workload Queue: (id, kind, status, created_at), of a job or a reported workload.
Key = tuple[str, str, str, datetime | None]
REPORTED_COLUMNS = tuple(table_of(ReportedWorkload).columns)


def get_reported(session: Session, project: str, workload_id: str) -> ReportedWorkload | None:
    return session.get(ReportedWorkload, (project, workload_id))


def reported_of(session: Session, project: str) -> Sequence[ReportedWorkload]:
    return session.exec(select(ReportedWorkload).where(ReportedWorkload.project == project)
                        .order_by(col(ReportedWorkload.created_at), col(ReportedWorkload.id))).all()


def report(session: Session, project: str, workload_id: str,
           fields: dict[str, Any]) -> tuple[ReportedWorkload, bool]:
    """Insert or replace the reported workload and commit; True when it is new. `created_at` is
    the first report's: a later report updates the row, it does not make it newer."""
    row = session.get(ReportedWorkload, (project, workload_id))
    created = row is None
    if row is None:
        row = ReportedWorkload(project=project, id=workload_id, **fields)
    else:
        for name, value in fields.items():
            setattr(row, name, value)
        row.updated_at = utcnow()
    session.add(row)
    session.commit()
    session.refresh(row)
    return row, created


def forget(session: Session, project: str, workload_id: str) -> bool:
    row = session.get(ReportedWorkload, (project, workload_id))
    if row is None:
        return False
    session.delete(row)
    session.commit()
    return True


# What a queue row shows of a job's machine (api/routers/workloads.py: where it runs, its GPUs).
MACHINE_COLUMNS = tuple(col(c) for c in (Instance.id, Instance.provider, Instance.offer_region,
                                          Instance.region, Instance.gpus_found, Instance.gpu,
                                          Instance.gpu_count))
# What a queue row shows of a job (JobOut, the whole job, is GET /jobs/{id}'s).
JOB_ROW_COLUMNS = tuple(col(c) for c in (
    Job.id, Job.name, Job.type, Job.status, Job.gpu, Job.gpu_count, Job.allocation_id, Job.requested_by,
    Job.attempts, Job.started_at, Job.ended_at, Job.created_at, Job.updated_at))
# The Workload Queue's reads of a page's rows, built once (`bound_records`): the machines of its jobs,
# the project's jobs by id, and its reported workloads by id with every queued one (their PRI).
_MACHINES = sa.select(*MACHINE_COLUMNS).where(col(Instance.id).in_(sa.bindparam("ids", expanding=True)))
_JOBS_BY_ID = sa.select(*JOB_ROW_COLUMNS).where(col(Job.project) == sa.bindparam("project"),
                                                col(Job.id).in_(sa.bindparam("ids", expanding=True)))
_REPORTED_SHOWN = sa.select(*REPORTED_COLUMNS).where(
    col(ReportedWorkload.project) == sa.bindparam("project"),
    sa.or_(col(ReportedWorkload.id).in_(sa.bindparam("ids", expanding=True)),
           col(ReportedWorkload.status) == sa.bindparam("queued")),
).order_by(col(ReportedWorkload.created_at), col(ReportedWorkload.id))


def machines_of(session: Session, jobs: Sequence[Job]) -> dict[str, Instance]:
    """The jobs' machines by allocation id: records of MACHINE_COLUMNS (store/records.py), read by
    attribute as an Instance is."""
    ids = [j.allocation_id for j in jobs if j.allocation_id]
    if not ids:
        return {}
    return {i.id: i for i in bound_records(session, _MACHINES, {"ids": ids})}


def job_keys(session: Session, project: str) -> list[Key]:
    """The project's managed jobs as list keys: what the queue sorts, counts and pages by, read
    without the rows themselves (which are built for the page shown only)."""
    stmt = select(Job.id, Job.type, Job.status, Job.created_at).where(Job.project == project)
    return [tuple(r) for r in session.exec(stmt).all()]  # type: ignore[misc]


def reported_keys(session: Session, project: str) -> list[Key]:
    stmt = select(ReportedWorkload.id, ReportedWorkload.kind, ReportedWorkload.status,
                  ReportedWorkload.created_at).where(ReportedWorkload.project == project)
    return [tuple(r) for r in session.exec(stmt).all()]  # type: ignore[misc]


# Active first (a queued, provisioning or running row), then newest, the id breaking ties.
ACTIVE_STATUSES = ("queued", "provisioning", "running")


def page_keys(session: Session, project: str, kinds: Collection[str] | None, offset: int,
              limit: int) -> list[tuple[str, str, bool, datetime | None]]:
    """One page of the project's Workload Queue as (row id, kind, active, created_at), jobs (row id
    `job_prefix` + id) and reported workloads together in the queue's order, sorted and cut by the
    database: only the page's keys are read, however many rows the project has."""
    params: dict[str, Any] = {"project": project, "offset": offset, "limit": limit}
    if kinds is not None:
        params["kinds"] = list(kinds)
    rows = session.connection().execute(_page_keys_statement(kinds is not None), params)
    return [(i, k, bool(a), at) for i, k, a, at in rows]


@functools.cache
def _page_keys_statement(of_kinds: bool) -> sa.Select[Any]:
    """`page_keys`' statement, built once (building it cost more than running it): `project`,
    `offset`, `limit` and, when `of_kinds`, `kinds` bound. Each part reads the (project, kind,
    status, created_at, id) index alone (migration 0033)."""
    def part(id_: Any, kind: Any, status: Any, created: Any, owner: Any) -> sa.Select[Any]:
        active = sa.case((status.in_(ACTIVE_STATUSES), 1), else_=0)
        stmt = sa.select(id_.label("id"), kind.label("kind"), active.label("active"), created.label("at"))
        stmt = stmt.where(owner == sa.bindparam("project"))
        return stmt.where(kind.in_(sa.bindparam("kinds", expanding=True))) if of_kinds else stmt

    jobs = part(sa.literal(JOB_ROW_PREFIX) + col(Job.id), col(Job.type), col(Job.status), col(Job.created_at),
                col(Job.project))
    reported = part(col(ReportedWorkload.id), col(ReportedWorkload.kind), col(ReportedWorkload.status),
                    col(ReportedWorkload.created_at), col(ReportedWorkload.project))
    both = sa.union_all(jobs, reported).subquery()
    return (sa.select(both.c.id, both.c.kind, both.c.active, both.c.at)
            .order_by(both.c.active.desc(), both.c.at.desc().nulls_first(), both.c.id)
            .offset(sa.bindparam("offset", type_=sa.Integer)).limit(sa.bindparam("limit", type_=sa.Integer)))


def kind_counts(session: Session, project: str) -> dict[str, int]:
    """How many of the project's jobs and reported workloads there are of each kind (a job's type)."""
    counts: dict[str, int] = {}
    for kind, n in session.connection().execute(_kind_counts_statement(), {"project": project}):
        counts[str(kind)] = counts.get(str(kind), 0) + int(n)
    return counts


@functools.cache
def _kind_counts_statement() -> sa.Executable:
    """`kind_counts`' one statement, built once (`project` bound): the jobs' counts by kind and the
    reported workloads', one after the other (a kind may come twice: the caller adds them)."""
    parts = ((col(Job.type), col(Job.project)), (col(ReportedWorkload.kind), col(ReportedWorkload.project)))
    return sa.union_all(*(sa.select(kind.label("kind"), sa.func.count().label("n"))
                          .where(owner == sa.bindparam("project")).group_by(kind) for kind, owner in parts))


def jobs_by_id(session: Session, project: str, ids: Collection[str]) -> Sequence[Job]:
    """The project's jobs of `ids` as queue rows show them: records of JOB_ROW_COLUMNS."""
    if not ids:
        return []
    return cast(list[Job], bound_records(session, _JOBS_BY_ID, {"project": project, "ids": list(ids)}))


def reported_shown(session: Session, project: str, ids: Collection[str],
                   queued: str) -> Sequence[ReportedWorkload]:
    """The project's reported workloads of `ids`, and every one with status `queued` (a queued one's
    PRI is its place among them all), oldest first as `reported_of`; records (store/records.py)."""
    values = {"project": project, "ids": list(ids), "queued": queued}
    return cast(list[ReportedWorkload], bound_records(session, _REPORTED_SHOWN, values))

"""The Workload Queue (the studio seed's "Workload Queue tab"): everything consuming compute on the
project's behalf, in one list with the filter pills' counts in the same response.

Rows come from every source the seed merges: gpuprov's own managed jobs (/api/compute/jobs, rows
`job:<id>`), and work run elsewhere reported in with `PUT /workloads/{id}` (training runs, deployed
models, other services' synthetic runs). Sorted active first (queued, provisioning, running), then
newest. PRI is a waiting job's global position in the job queue (store/queue.py), a queued reported
workload's place among the project's reported ones (the same order, messages/workloads.py); serving
and tasks read "—" (null). A job's detail adds its last log lines and its GPUs' metrics."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Response, status
from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, field_validator
from sqlmodel import Session

from api.auth import CallerDep
from api.deps import ReadSessionDep, SessionDep
from api.errors import shown
from api.fields import Name, Strict, Timestamp, aware
from api.pagination import Page, PageDep, offset_cursor, offset_of
from api.responses import json_response
from api.routers.jobs import AttemptOut, JobOut, RetryOut
from api.shared_bodies import instance_gpu_label
from messages.workloads import (
    ACTIVE,
    GROUP,
    QUEUEABLE,
    TYPE_LABEL,
    Waiting,
    WorkloadFilter,
    WorkloadKind,
    WorkloadStatus,
    gpu_label,
    method_label,
    positions,
)
from providers import registry
from providers.base import InvalidRequest
from store import jobs as job_store
from store import queue
from store import workloads as store
from store.models import Instance, Job, ReportedWorkload, utcnow

router = APIRouter(prefix="/workloads", tags=["workloads"])

WorkloadId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
                                 description="the reporter's own id: letters, digits, '.', '_', '-'")]
# A managed job's row is `job:<job id>`: the `:` no reported id may hold keeps the two apart.
JOB_PREFIX = store.JOB_ROW_PREFIX
RowId = Annotated[str, Path(pattern=r"^(job:)?[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
                            description="a reported workload's id, or `job:<job id>` for a managed job")]
LOCAL_CLUSTER = "local cluster"
LOG_LINES_SHOWN = 50  # of a job's output, in its detail
METRICS_SHOWN = 60  # GPU readings in a job's detail (the last ones)
Source = Literal["training", "model", "synthetic", "other"]


ETA_SKEW = timedelta(minutes=1)  # a reporter's clock may be this far behind ours
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _date_time_text(v: object) -> object:
    """Only a date-time string, as the schema says: pydantic alone would take 0 (or "0") as the
    epoch, a bare date as midnight."""
    if not isinstance(v, str | datetime) or isinstance(v, str) and not _DATE_TIME.match(v):
        raise ValueError("an RFC 3339 date-time string, e.g. 2026-12-01T21:30:00Z")
    return v


def _not_past(v: datetime) -> datetime:
    at = aware(v)
    assert at is not None
    if at < utcnow() - ETA_SKEW:
        raise ValueError("an ETA is when the workload is expected to end: not in the past")
    return at


EtaAt = Annotated[datetime, BeforeValidator(_date_time_text), AfterValidator(_not_past)]


class WorkloadReport(Strict):
    """A workload run elsewhere, as its owner reports it (every report replaces the last)."""

    name: Name
    kind: WorkloadKind = Field(description="sft, dpo, grpo, ppo, serving, eval, task, kb_compile, synthetic",
                               strict=False)
    status: WorkloadStatus = Field(strict=False)
    source: Source = "other"
    gpu: Annotated[str, Field(min_length=1, max_length=40)] | None = None
    gpu_count: Annotated[int, Field(ge=1, le=4096)] | None = None
    location: Name | None = Field(None, description="`local cluster` or the cloud backend it runs on")
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    progress_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    eta_at: EtaAt | None = Field(None, strict=False,
                                 description="when it is expected to end: an RFC 3339 date-time "
                                             "string, not in the past (a minute of clock skew "
                                             "allowed); a number or other text is a 422")
    requested_by: Name | None = None

    @field_validator("gpu")
    @classmethod
    def _gpu_shape(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._()-]*", v):
            raise ValueError("a GPU name is letters, digits, spaces and . _ ( ) -")
        return v


class WorkloadOut(BaseModel):
    """One row of the table, in the seed's columns."""

    id: str = Field(description="a reported workload's own id, or `job:<job id>` for a managed job")
    pri: int | None = Field(description="queue position (queued training, eval, synthetic); null reads —")
    workload: str = Field(description="the run / deployment name")
    type: str = Field(description="SFT (SFT/DPO), GRPO (GRPO/PPO), Serving, Eval, Task, Synthetic")
    method: str = Field(description="the underlying kind, e.g. `kb compile`")
    kind: WorkloadKind
    status: WorkloadStatus
    active: bool
    gpu: str | None = Field(description="e.g. `4× H100`")
    location: str | None = Field(description="`local cluster` (an SSH fleet host) or the cloud backend "
                                             "and region; null while not placed")
    progress_pct: float | None
    eta_at: Timestamp | None = Field(description="null unless its reporter knows it")
    elapsed_s: float | None = Field(None, description="a job's time running (to its end, or now)")
    requested_by: str | None
    source: str = Field(description="who put it in the list: `job` (a managed job, /api/compute/jobs), "
                                    "or reported: training, model, synthetic, other")
    job_id: str | None = Field(None, description="the managed job (GET /api/compute/jobs/{id})")
    attempts: int | None = Field(None, description="a managed job's attempts so far (more than 1: it was "
                                                   "restarted on a new machine, its `retry` policy); "
                                                   "null for a reported workload")
    created_at: Timestamp
    updated_at: Timestamp


class GpuSampleOut(BaseModel):
    gpu: int = Field(description="the GPU's place in nvidia-smi's order")
    utilization_pct: float
    memory_used_mib: int
    memory_total_mib: int


class GpuReadingOut(BaseModel):
    at: Timestamp
    gpus: list[GpuSampleOut]


class WorkloadDetail(WorkloadOut):
    """The row opened: a managed job's last log lines and where to follow its log, and its GPUs'
    utilisation and memory sampled with nvidia-smi while it runs (oldest first). A reported
    workload has neither: gpuprov does not run it."""

    log_lines: list[str] = Field(default_factory=list, description="the last lines of its output")
    log_offset: int | None = Field(None, description="the byte offset just past those lines")
    log_url: str | None = Field(None, description="its log, streamed from after those lines")
    metrics: list[GpuReadingOut] = Field(default_factory=list)
    retry: RetryOut | None = Field(None, description="a managed job's retry policy, as asked; null: none")
    attempt_history: list[AttemptOut] = Field(
        default_factory=list, description="a managed job with a retry policy: each attempt, its machine "
                                          "and how it ended")


class WorkloadsPage(Page[WorkloadOut]):
    counts: dict[WorkloadFilter, int] = Field(description="the filter pills' live counts, ALL included")


def _at(ts: datetime) -> datetime:
    return aware(ts) or utcnow()


def _reported_rows(reported: list[ReportedWorkload]) -> list[WorkloadOut]:
    # Reported workloads wait in their reporters' queues, not gpuprov's: PRI orders them among
    # themselves (the same order as the job queue's).
    waiting = [Waiting(id=r.id, project=r.project, priority=r.priority, created_at=_at(r.created_at))
               for r in reported if r.status == WorkloadStatus.QUEUED and WorkloadKind(r.kind) in QUEUEABLE]
    pri = positions(waiting)
    rows = []
    for r in reported:
        kind, state = WorkloadKind(r.kind), WorkloadStatus(r.status)
        rows.append(WorkloadOut(
            id=r.id, pri=pri.get(r.id), workload=r.name, type=TYPE_LABEL[GROUP[kind]],
            method=method_label(kind), kind=kind, status=state, active=state in ACTIVE,
            gpu=gpu_label(r.gpu, r.gpu_count), location=r.location, progress_pct=r.progress_pct,
            eta_at=aware(r.eta_at), requested_by=r.requested_by, source=r.source,
            created_at=_at(r.created_at), updated_at=_at(r.updated_at)))
    return rows


def job_row_id(job_id: str) -> str:
    """A job's row id. Reported ids cannot hold `:` (WorkloadId), so no report can take it."""
    return f"{JOB_PREFIX}{job_id}"


def _location(job: Job, machine: Instance | None) -> str | None:
    """`local cluster` on an SSH fleet host, else the cloud's name and the region once known."""
    if machine is None or job.status == WorkloadStatus.QUEUED:
        return None
    if registry.is_fleet(machine.provider):
        return LOCAL_CLUSTER
    try:
        name = registry.capabilities(machine.provider).display_name
    except (InvalidRequest, ImportError):  # a cloud no longer installed: its id
        name = machine.provider
    region = machine.offer_region or machine.region
    return f"{name} · {region}" if region else name


def _job_rows(jobs: list[Job], machines: dict[str, Instance], pri: dict[str, int]) -> list[WorkloadOut]:
    now = utcnow()
    rows = []
    for j in jobs:
        kind, state = WorkloadKind(j.type), WorkloadStatus(j.status)
        machine = machines.get(j.allocation_id) if j.allocation_id else None
        started = aware(j.started_at)
        until = aware(j.ended_at) or now
        elapsed = None if started is None else max(0.0, (until - started).total_seconds())
        rows.append(WorkloadOut(
            id=job_row_id(j.id), pri=pri.get(j.id), workload=j.name, type=TYPE_LABEL[GROUP[kind]],
            method=method_label(kind), kind=kind, status=state, active=state in ACTIVE,
            gpu=_job_gpu(j, machine), location=_location(j, machine),
            progress_pct=None, eta_at=None, elapsed_s=elapsed, requested_by=j.requested_by, source="job",
            job_id=j.id, attempts=j.attempts or 1, created_at=_at(j.created_at),
            updated_at=_at(j.updated_at)))
    return rows


def _job_gpu(job: Job, machine: Instance | None) -> str | None:
    """As the job asked (`2× H100`); a job that named no GPU shows its machine's, once it has one
    (as its GPU check found them, else as the machine was asked: GET /instances' `gpu_label`)."""
    asked = gpu_label(job.gpu, job.gpu_count)
    if asked is not None or machine is None:
        return asked
    return instance_gpu_label(machine)


@dataclass(frozen=True)
class _Place:
    """A row's place in the list — what it is sorted, counted and paged by — read without the row."""

    id: str  # the row's id (`job:<id>` for a job)
    kind: WorkloadKind
    active: bool
    created_at: datetime


def _places(session: Session, project: str, kinds: list[WorkloadKind] | None, offset: int,
            limit: int) -> list[_Place]:
    """The places of one page of rows: active first, then newest (the id breaks ties: pages never
    skip or repeat a row), of `kinds` (None: all). The database sorts and cuts (store/workloads.py
    `page_keys`); only the page's rows are built: building every row of a project with thousands
    of jobs made each request take seconds, and sorting every key in Python tens of milliseconds."""
    named = None if kinds is None else [k.value for k in kinds]
    keys = store.page_keys(session, project, named, offset, limit)
    return [_Place(i, WorkloadKind(k), active, _at(c)) for i, k, active, c in keys]  # type: ignore[arg-type]


def _rows_at(session: Session, project: str, places: list[_Place]) -> list[WorkloadOut]:
    """The rows at `places`, in their order."""
    job_ids = [p.id.removeprefix(JOB_PREFIX) for p in places if p.id.startswith(JOB_PREFIX)]
    jobs = list(store.jobs_by_id(session, project, job_ids))
    pri = queue.positions(session, project) if jobs else {}  # within the project: not other tenants'
    reported_ids = [p.id for p in places if not p.id.startswith(JOB_PREFIX)]
    reported = (list(store.reported_shown(session, project, reported_ids, WorkloadStatus.QUEUED))
                if reported_ids else [])
    machines = store.machines_of(session, jobs)
    built = {w.id: w for w in _reported_rows(reported) + _job_rows(jobs, machines, pri)}
    return [built[p.id] for p in places if p.id in built]  # one forgotten meanwhile is not shown


def _counts(session: Session, project: str) -> dict[WorkloadFilter, int]:
    counts = dict.fromkeys(WorkloadFilter, 0)
    for kind, n in store.kind_counts(session, project).items():
        counts[WorkloadFilter.ALL] += n
        counts[GROUP[WorkloadKind(kind)]] += n
    return counts


def _gpu_readings(session: Session, job_id: str) -> list[dict[str, Any]]:
    """GpuReadingOut's fields, oldest first: WorkloadDetail validates them all in one call."""
    by_at: dict[datetime, list[dict[str, Any]]] = {}
    for s in job_store.gpu_readings(session, job_id, METRICS_SHOWN):
        by_at.setdefault(s.at, []).append({
            "gpu": s.gpu, "utilization_pct": s.utilization_pct, "memory_used_mib": s.memory_used_mib,
            "memory_total_mib": s.memory_total_mib})
    return [{"at": at, "gpus": gpus} for at, gpus in by_at.items()]  # `at` made UTC as it validates


def _job_detail(session: Session, project: str, job_id: str) -> WorkloadDetail | None:
    job = session.get(Job, job_id)
    if job is None or job.project != project:
        return None
    # Only a waiting job has a PRI: the others' detail does not walk the project's queue.
    pri = queue.positions(session, project) if queue.waits(job) else {}
    [row] = _job_rows([job], store.machines_of(session, [job]), pri)
    lines, offset = job_store.log_tail(session, job_id, LOG_LINES_SHOWN)
    out = JobOut.of(job)  # its retry policy and attempts, as GET /jobs/{id} shows them
    return WorkloadDetail(**row.model_dump(), log_offset=offset, log_lines=lines,
                          log_url=f"/api/compute/jobs/{job_id}/logs?follow=true&offset={offset}",
                          metrics=_gpu_readings(session, job_id), retry=out.retry,
                          attempt_history=out.attempt_history)


def _reported_row(session: Session, project: str, workload_id: str) -> WorkloadOut | None:
    rows = _reported_rows(list(store.reported_of(session, project)))  # its PRI is among them all
    return next((w for w in rows if w.id == workload_id), None)


@router.get("", response_model=WorkloadsPage)
def list_workloads(session: ReadSessionDep, caller: CallerDep, page: PageDep,
                   type: Annotated[WorkloadFilter, Query(description="a filter pill")] = WorkloadFilter.ALL,
                   ) -> Response:
    """The project's workloads — its managed jobs and the workloads reported in — active first then
    newest, filtered by a pill, with every pill's count over both."""
    start = offset_of("workloads", page, query=type.value)
    kinds = None if type == WorkloadFilter.ALL else [k for k in WorkloadKind if GROUP[k] == type]
    places = _places(session, caller.project, kinds, start, page.limit + 1)  # one more: is there a next?
    following = offset_cursor("workloads", start + page.limit, len(places) > page.limit, query=type.value)
    return json_response(WorkloadsPage(items=_rows_at(session, caller.project, places[:page.limit]),
                                       next_cursor=following, counts=_counts(session, caller.project)))


@router.get("/{workload_id}", response_model=WorkloadDetail,
            responses={404: {"description": "no such workload"}})
def get_workload(workload_id: RowId, session: ReadSessionDep, caller: CallerDep) -> WorkloadDetail:
    """One workload opened: the row, and for a managed job its last log lines, its log stream's URL
    and its GPU metrics."""
    if workload_id.startswith(JOB_PREFIX):
        detail = _job_detail(session, caller.project, workload_id.removeprefix(JOB_PREFIX))
        if detail is not None:
            return detail
    else:
        row = _reported_row(session, caller.project, workload_id)
        if row is not None:
            return WorkloadDetail(**row.model_dump())
    raise HTTPException(status.HTTP_404_NOT_FOUND, f"no workload {shown(workload_id)} in this project")


@router.put("/{workload_id}", response_model=WorkloadOut,
            responses={201: {"description": "reported for the first time"}})
def report_workload(workload_id: WorkloadId, body: WorkloadReport, session: SessionDep, caller: CallerDep,
                    response: Response) -> WorkloadOut:
    """Report (or update) a workload run elsewhere, so the queue is the one list. 201 the first time."""
    _, created = store.report(session, caller.project, workload_id, body.model_dump())
    if created:
        response.status_code = status.HTTP_201_CREATED
    row = _reported_row(session, caller.project, workload_id)
    assert row is not None  # just stored, in this session
    return row


@router.delete("/{workload_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={404: {"description": "no such reported workload"}})
def forget_workload(workload_id: WorkloadId, session: SessionDep, caller: CallerDep) -> None:
    """Take a reported workload off the list (its owner ended it)."""
    if not store.forget(session, caller.project, workload_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"no reported workload {workload_id!r} in this project")

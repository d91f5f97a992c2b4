"""The Workload Queue (the studio seed's "Workload Queue tab"): everything consuming compute on the
project's behalf, in one list with the filter pills' counts in the same response.

Rows come from every source the seed merges: work run elsewhere and reported in with
`PUT /workloads/{id}` (training runs, deployed models, other services' synthetic runs). Sorted
active first (queued, provisioning, running), then newest. PRI is a queued queueable workload's
global position (messages/workloads.py queue_order); serving and tasks read "—" (null)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Path, Query, Response, status
from pydantic import BaseModel, Field, field_validator

from api.deps import CallerDep, SessionDep
from api.pagination import Page, PageDep, offset_page
from api.schemas import Name, Strict, aware
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
from store import workloads as store
from store.models import ReportedWorkload, utcnow

router = APIRouter(prefix="/workloads", tags=["workloads"])

WorkloadId = Annotated[str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
                                 description="the reporter's own id: letters, digits, '.', '_', '-'")]
Source = Literal["training", "model", "synthetic", "other"]


class WorkloadReport(Strict):
    """A workload run elsewhere, as its owner reports it (every report replaces the last)."""

    name: Name
    kind: WorkloadKind = Field(description="sft, dpo, grpo, ppo, serving, eval, task, kb_compile, synthetic")
    status: WorkloadStatus
    source: Source = "other"
    gpu: Annotated[str, Field(min_length=1, max_length=40)] | None = None
    gpu_count: Annotated[int, Field(ge=1, le=4096)] | None = None
    location: Name | None = Field(None, description="`local cluster` or the cloud backend it runs on")
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    progress_pct: Annotated[float, Field(ge=0, le=100)] | None = None
    eta_at: datetime | None = None
    requested_by: Name | None = None

    @field_validator("gpu")
    @classmethod
    def _gpu_shape(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._()-]*", v):
            raise ValueError("a GPU name is letters, digits, spaces and . _ ( ) -")
        return v


class WorkloadOut(BaseModel):
    """One row of the table, in the seed's columns."""

    id: str
    pri: int | None = Field(description="queue position (queued training, eval, synthetic); null reads —")
    workload: str = Field(description="the run / deployment name")
    type: str = Field(description="SFT (SFT/DPO), GRPO (GRPO/PPO), Serving, Eval, Task, Synthetic")
    method: str = Field(description="the underlying kind, e.g. `kb compile`")
    kind: WorkloadKind
    status: WorkloadStatus
    active: bool
    gpu: str | None = Field(description="e.g. `4× H100`")
    location: str | None
    progress_pct: float | None
    eta_at: datetime | None
    requested_by: str | None
    source: str = Field(description="who put it in the list: training, model, synthetic, other (reported)")
    created_at: datetime
    updated_at: datetime


class WorkloadsPage(Page[WorkloadOut]):
    counts: dict[WorkloadFilter, int] = Field(description="the filter pills' live counts, ALL included")


def _at(ts: datetime) -> datetime:
    return aware(ts) or utcnow()


def _rows(reported: list[ReportedWorkload]) -> list[WorkloadOut]:
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
    # active first, then newest
    rows.sort(key=lambda w: (not w.active, -w.created_at.timestamp(), w.id))
    return rows


def _counts(rows: list[WorkloadOut]) -> dict[WorkloadFilter, int]:
    counts = dict.fromkeys(WorkloadFilter, 0)
    counts[WorkloadFilter.ALL] = len(rows)
    for w in rows:
        counts[GROUP[w.kind]] += 1
    return counts


@router.get("", response_model=WorkloadsPage)
def list_workloads(session: SessionDep, caller: CallerDep, page: PageDep,
                   type: Annotated[WorkloadFilter, Query(description="a filter pill")] = WorkloadFilter.ALL,
                   ) -> WorkloadsPage:
    """The project's workloads, active first then newest, filtered by a pill, with every pill's count."""
    rows = _rows(list(store.reported_of(session, caller.project)))
    shown = rows if type == WorkloadFilter.ALL else [w for w in rows if GROUP[w.kind] == type]
    part = offset_page("workloads", shown, page, query=type.value)
    return WorkloadsPage(items=part.items, next_cursor=part.next_cursor, counts=_counts(rows))


@router.get("/{workload_id}", response_model=WorkloadOut,
            responses={404: {"description": "no such workload"}})
def get_workload(workload_id: WorkloadId, session: SessionDep, caller: CallerDep) -> WorkloadOut:
    for row in _rows(list(store.reported_of(session, caller.project))):
        if row.id == workload_id:
            return row
    raise HTTPException(status.HTTP_404_NOT_FOUND, f"no workload {workload_id!r} in this project")


@router.put("/{workload_id}", response_model=WorkloadOut,
            responses={201: {"description": "reported for the first time"}})
def report_workload(workload_id: WorkloadId, body: WorkloadReport, session: SessionDep, caller: CallerDep,
                    response: Response) -> WorkloadOut:
    """Report (or update) a workload run elsewhere, so the queue is the one list. 201 the first time."""
    _, created = store.report(session, caller.project, workload_id, body.model_dump())
    if created:
        response.status_code = status.HTTP_201_CREATED
    return get_workload(workload_id, session, caller)


@router.delete("/{workload_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={404: {"description": "no such reported workload"}})
def forget_workload(workload_id: WorkloadId, session: SessionDep, caller: CallerDep) -> None:
    """Take a reported workload off the list (its owner ended it)."""
    if not store.forget(session, caller.project, workload_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            f"no reported workload {workload_id!r} in this project")

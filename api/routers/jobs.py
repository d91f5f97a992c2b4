"""Managed jobs: a command run on a machine allocated for it (workflows/job.py), its output kept in
the app database in chunks with byte offsets (store/jobs.py), streamed from any offset.

The row is written before its workflow starts (the workflow's records update it); a start that
fails marks the row failed with the reason, so nothing stored claims a job that is not running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Response, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator, BaseModel, Field, field_validator, model_validator
from sqlmodel import select

from api import idempotency as idem
from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, ReadSessionDep, in_thread, open_read_session, open_session
from api.errors import shown
from api.fields import PlacementId, Printable, Strict, Timestamp
from api.pagination import Keyset, Page, PageDep
from api.placement import resolve
from api.routers.budget import refuse_over_budget
from api.routers.defaults import lease_hours_for, with_project_default
from api.shared_bodies import InstanceCreate
from api.temporal import WorkflowUnavailable
from messages import workflows as wf
from messages.allocation import AllocateRequest
from messages.ids import job_workflow_id
from messages.job import (
    MAX_RESTARTS,
    JobInput,
    JobRetry,
    JobStatus,
    JobType,
    PoolTarget,
    RetryCause,
    RetryWhere,
)
from messages.job_text import MAX_IMAGE, command_text, image_reference
from messages.pool import POOL_NAME, POOL_NAME_MAX, PoolStatus
from store import ids, pools, queue
from store import jobs as job_store
from store.identity import ssh_identity
from store.models import Job, Pool, utcnow

router = APIRouter(prefix="/jobs", tags=["jobs"])

KEYSET = Keyset("jobs", Job.created_at, Job.id, descending=True)
FOLLOW_POLL_S = 0.2  # how often a followed log looks for more output
LOG_PAGE = 1 << 20  # bytes per read of a log


def priority_allowed(priority: int, bound: int) -> None:
    """L4: a priority within the administrator's range (GPUPROV_JOB_PRIORITY_MAX), else a 422 on
    body.priority saying the range: the queue's order is shared by every project."""
    if abs(priority) > bound:
        raise RequestValidationError([{
            "loc": ("body", "priority"), "type": "priority_range",
            "msg": f"priority must be between {-bound} and {bound} on this installation "
                   "(GPUPROV_JOB_PRIORITY_MAX)"}])


ImageRef = Annotated[str, Field(min_length=1, max_length=MAX_IMAGE), AfterValidator(image_reference)]


class RetryIn(Strict):
    """A job's `retry`: restart it on a new machine when an attempt ends by a cause in `on`."""

    on: list[Annotated[RetryCause, Field(strict=False)]] = Field(
        min_length=1, max_length=len(RetryCause),
        description="what restarts it: `preempted` (the cloud reclaimed its machine), `machine_lost` "
                    "(its machine went otherwise), `no_capacity` (no machine could be allocated), "
                    "`failed` (the command exited non-zero); each at most once")
    restarts: Annotated[int, Field(ge=0, le=MAX_RESTARTS)] = Field(
        description=f"restarts at most (0..{MAX_RESTARTS}): restarts + 1 attempts")
    where: RetryWhere = Field(
        RetryWhere.ANY_ALLOWED, strict=False,
        description="a restart's machine: `same_offer` (the first machine's instance type, region and "
                    "connection), `same_cloud` (its cloud), `any_allowed` (any the job may use)")

    @field_validator("on")
    @classmethod
    def _once_each(cls, v: list[RetryCause]) -> list[RetryCause]:
        twice = sorted({c.value for c in v if v.count(c) > 1})
        if twice:
            raise ValueError(f"each cause at most once: {', '.join(twice)} given more than once")
        return v

    def policy(self) -> JobRetry:
        return JobRetry(on=self.on, restarts=self.restarts, where=self.where)


class JobCreate(Strict):
    name: Annotated[str, Field(min_length=1, max_length=100), Printable]
    type: JobType = Field(strict=False)
    command: Annotated[str, Field(min_length=1, max_length=100_000), AfterValidator(command_text)] = Field(
        description="run by bash on the host; no control characters but newline and tab")
    image: ImageRef | None = Field(
        None, description="a container image reference ([registry[:port]/]name[:tag][@digest]): run with "
                          "`docker run` where the host has Docker, else the command runs on the host itself")
    gpu: Annotated[str, Field(min_length=1, max_length=40), Printable] | None = Field(
        None, description="e.g. H100; none: any machine (CPU only is fine)")
    gpu_count: Annotated[int, Field(ge=1, le=64)] = Field(1, description="GPUs per machine (with `gpu`)")
    cloud: PlacementId | None = Field(None, description="none: any connected cloud, cheapest offer; "
                                                        "`ssh`: a free host of the project's SSH fleets")
    requested_by: Annotated[str, Field(min_length=1, max_length=100), Printable]
    priority: Annotated[int, Field(ge=-1000, le=1000)] = Field(
        0, description="higher runs first; within ±GPUPROV_JOB_PRIORITY_MAX (the administrator's range, "
                       "default 100: the queue is shared by every project), else a 422")
    max_price_per_hour: Annotated[float, Field(gt=0, le=10_000)] | None = None
    pool: Annotated[str, Field(pattern=POOL_NAME.pattern, max_length=POOL_NAME_MAX)] | None = Field(
        None, description="run on a free ready machine of this pool of the project (claimed while the job "
                          "runs, left to the pool afterwards). Not with `cloud`; `gpu`/`gpu_count`, if "
                          "given, must be the pool's")
    retry: RetryIn | None = Field(
        None, description="restart on a new machine when an attempt ends by a cause in `on`, at most "
                          "`restarts` times; the command sees GPUPROV_JOB_ATTEMPT (1, 2, …) and "
                          "GPUPROV_JOB_PREVIOUS_END, and the log a marker line between attempts. Not "
                          "with `pool`")

    @model_validator(mode="after")
    def _pool_or_cloud(self) -> JobCreate:
        if self.pool is not None and self.cloud is not None:
            raise ValueError("give pool or cloud, not both: a pool job runs on the pool's cloud")
        if self.pool is not None and self.retry is not None:
            raise ValueError("retry is for a job with a machine of its own: a pool job's machine is "
                             "the pool's")
        return self


class RetryOut(BaseModel):
    on: list[str]
    restarts: int
    where: str


class AttemptOut(BaseModel):
    attempt: int
    allocation_id: str | None = Field(description="its machine (GET /instances/{id}): its spend is its own")
    started_at: str | None
    ended: str | None = Field(description="how it ended: preempted, machine_lost, no_capacity, failed; "
                                          "null while it runs, and for one that ended the job otherwise "
                                          "(succeeded, cancelled)")
    reason: str | None
    exit_code: int | None = Field(None, description="the command's, when it exited non-zero")
    ended_at: str | None


class JobOut(BaseModel):
    pri: int | None = Field(description="its place in the queue (1: next), while it waits; null for "
                                        "types that are not queued (serving, task, kb_compile) and "
                                        "once granted")
    id: str
    name: str
    type: str
    status: str  # queued|provisioning|running|succeeded|failed|cancelled
    command: str
    image: str | None
    gpu: str | None
    gpu_count: int | None
    cloud: str | None
    requested_by: str
    priority: int
    max_price_per_hour: float | None
    allocation_id: str | None = Field(description="the instance its machine is (GET /instances/{id})")
    retry: RetryOut | None = Field(None, description="its retry policy, as asked; null: none")
    attempts: int = Field(1, description="attempts made so far (1 until a restart)")
    attempt_history: list[AttemptOut] = Field(
        default_factory=list, description="with a retry policy: each attempt, its machine and its end")
    exit_code: int | None
    error: str | None = Field(description="why it failed, with the last lines of its output")
    created_at: Timestamp
    started_at: Timestamp | None
    ended_at: Timestamp | None
    waiting_reason: str | None = Field(
        None, description="why a queued job has not started, always set while it waits: its queue "
                          "group is paused (POST /queue/resume), the project's daily budget is reached, "
                          "a GPU or $/hr limit it would exceed, the job ahead that blocks it, or that it "
                          "fits and is granted at its next check; null once granted, and for types that "
                          "are not queued")

    @classmethod
    def of(cls, row: Job, pri: int | None = None, held: queue.Held | None = None) -> JobOut:
        why = held.reason(row) if held is not None and pri is not None else None
        return cls(pri=pri, waiting_reason=why, id=row.id, name=row.name, type=row.type, status=row.status,
                   command=row.command,
                   image=row.image, gpu=row.gpu, gpu_count=row.gpu_count, cloud=row.cloud,
                   requested_by=row.requested_by, priority=row.priority,
                   max_price_per_hour=row.max_price_per_hour, allocation_id=row.allocation_id,
                   retry=RetryOut(**row.retry) if row.retry else None, attempts=row.attempts or 1,
                   attempt_history=[AttemptOut(**{k: a.get(k) for k in AttemptOut.model_fields})
                                    for a in row.attempt_log or []],
                   exit_code=row.exit_code, error=row.error, created_at=row.created_at,
                   started_at=row.started_at, ended_at=row.ended_at)


class JobAccepted(BaseModel):
    id: str
    status: str


# --------------------------------------------------------------------------- database work (sync)


def _job(deps: AppDeps, project: str, job_id: str) -> Job | None:
    with open_read_session(deps) as session:
        row = session.get(Job, job_id)
    return row if row is not None and row.project == project else None


def _public_key(deps: AppDeps) -> str:
    with open_session(deps) as session:
        public, _ = ssh_identity(session, deps.box)
    return public


def _insert(deps: AppDeps, row: Job) -> None:
    """Insert the job: a queueable one to wait its turn; any other granted now, or refused (409)
    with the limit it would exceed."""
    with open_session(deps) as session:
        limits = queue.load_limits(session)
    if limits.needs_price(row.project) and row.max_price_per_hour is None:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            "a $/hr limit applies to this project: give max_price_per_hour")
    never = limits.never_fits(row.project, queue.gpus_of(row), queue.usd_of(row))
    if never is not None:  # it would wait for ever (and a queued one hold up everything behind it)
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"this job alone is over {never}: it could not start even with nothing else "
                            f"running; ask for less or have the limit raised (PUT /api/compute/limits)")
    with open_session(deps) as session:  # admit_now's lock must be its transaction's first statement
        if JobType(row.type).queueable:
            session.add(row)
            session.commit()
            return
        why = queue.admit_now(session, row)
    if why is not None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"{row.type} jobs are not queued: over {why}")


def _pool_of(deps: AppDeps, project: str, body: JobCreate) -> Pool:
    """The pool a job targets, its shape checked against the job's gpu/gpu_count where given (422
    naming what does not fit)."""
    assert body.pool is not None
    with open_session(deps) as session:
        row = pools.get_pool(session, project, body.pool)
    if row is None or row.status != PoolStatus.ACTIVE:
        why = "is being deleted" if row is not None else "does not exist"
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            f"pool {body.pool!r} of project {project} {why}")
    count = row.gpu_count or (1 if row.gpu else None)
    if "gpu" in body.model_fields_set and (body.gpu or "").lower() != (row.gpu or "").lower():
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            f"pool {row.name!r} has gpu {row.gpu or 'none'}, not {body.gpu or 'none'}")
    if "gpu_count" in body.model_fields_set and body.gpu_count != count:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            f"pool {row.name!r} machines have {count or 0} GPUs, not {body.gpu_count}")
    return row


def _within_budget(deps: AppDeps, project: str) -> None:
    """409 naming the project's daily budget once today's spend has reached it: no new job (queued
    ones already in wait for it, store/queue.py)."""
    with open_session(deps) as session:
        refuse_over_budget(session, project)


def _not_started(deps: AppDeps, job_id: str, why: str) -> None:
    with open_session(deps) as session:
        row = session.get(Job, job_id)
        if row is not None:
            row.status, row.error, row.ended_at = JobStatus.FAILED, f"not started: {why}", utcnow()
            queue.release(row)
            session.add(row)
            session.commit()


def _read(deps: AppDeps, job_id: str, offset: int) -> tuple[bytes, bool]:
    """Output from `offset`, and whether the job had ended before it was read (so nothing more
    will come once the output read is empty)."""
    with open_read_session(deps) as session:
        row = session.get(Job, job_id)
        ended = row is not None and JobStatus(row.status).ended
        return job_store.read_log(session, job_id, offset, LOG_PAGE), ended


# --------------------------------------------------------------------------- routes


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted,
             responses={409: {"description": "no cloud connected (or not the one named), the project's "
                                             "daily budget is reached, a job type that is not queued "
                                             "over a limit, or a job over a limit on its own (named)"},
                        422: {"description": "invalid, or no connected cloud can serve it"},
                        503: {"description": "Temporal unreachable: the job is recorded as not started"}})
async def create_job(body: JobCreate, deps: DepsDep, caller: CallerDep,
                     idempotency_key: idem.IdempotencyKey = None) -> JobAccepted:
    """Run `command` on a machine allocated for it, then terminate the machine — or, with `pool`, on
    a free ready machine of that pool (waiting for one, 422 if the project has no such pool), which
    stays the pool's afterwards; it counts the pool machine's GPUs under the limits. Training, eval and
    synthetic jobs wait in the queue for capacity under the limits (PUT /limits); serving, task
    and kb_compile jobs are not queued: over a limit they are refused (409, the limit named). Once
    the project's daily budget is reached, new jobs are refused (409, the budget named).
    With an Idempotency-Key the job id derives from the key: a retry answers with the same job and
    starts what the first request may not have (its workflow runs once per id, ever)."""
    priority_allowed(body.priority, deps.job_priority_max)
    project, key = caller.project, idempotency_key
    scope, fingerprint = idem.scope_of("jobs", project), idem.fingerprint(body.model_dump(mode="json"))
    job_id = ids.new_id() if key is None else idem.derived_id("job", project, key)
    existing = None
    if key is not None and await in_thread(idem.check, deps, scope, key, fingerprint):
        existing = await in_thread(_job, deps, project, job_id)
        if existing is not None and JobStatus(existing.status).ended:
            return JobAccepted(id=job_id, status=existing.status)
    if existing is None:  # a keyed retry of an accepted job answers it, budget or not
        await in_thread(_within_budget, deps, project)
    allocation: AllocateRequest | None = None
    target: PoolTarget | None = None
    gpu, gpu_count, cloud = body.gpu, body.gpu_count if body.gpu else None, body.cloud
    if body.pool is not None:
        # A pool job: no allocation of its own; it counts the pool machine's GPUs in the queue.
        pool = await in_thread(_pool_of, deps, project, body)
        target = PoolTarget(pool_id=pool.id, name=pool.name)
        gpu, gpu_count, cloud = pool.gpu, pool.gpu_count or (1 if pool.gpu else None), pool.cloud
    else:
        public = await in_thread(_public_key, deps)
        # The same planning as a hand allocation: which connections may serve it, refused here if none.
        asked = InstanceCreate(cloud=body.cloud, gpu=body.gpu, gpu_count=gpu_count,
                               k3s=False, ssh_public_keys=[public], name=body.name)
        # Naming no cloud: the project's default cloud and region, if it has one (PUT /defaults).
        asked, project_default = await in_thread(with_project_default, deps, project, asked)
        cloud = asked.cloud
        plan = await in_thread(resolve, deps, project, asked)
        if project_default is not None:
            plan.notes.insert(0, project_default)
        first = plan.targets[0]
        allocation = AllocateRequest(
            allocation_id=f"{job_id}-m", connection_id=first.connection_id, cloud=first.cloud,
            targets=plan.targets, notes=plan.notes, project=project, name=body.name, gpu=body.gpu,
            gpu_count=asked.gpu_count, region=asked.region, k3s=False, ssh_public_keys=[public],
            max_price_per_hour=body.max_price_per_hour, timing=deps.job_timing,
            lease_hours=await in_thread(lease_hours_for, deps, project, asked))  # as a hand allocation's
    workflow_id = job_workflow_id(job_id)
    retry = body.retry.policy() if body.retry is not None else None
    if existing is None:
        if key is not None:
            await in_thread(idem.claim, deps, scope, key, fingerprint, job_id)
        try:
            await in_thread(_insert, deps, Job(
                id=job_id, project=project, name=body.name, type=body.type, command=body.command,
                image=body.image, gpu=gpu, gpu_count=gpu_count,
                cloud=cloud, requested_by=body.requested_by, priority=body.priority,
                max_price_per_hour=body.max_price_per_hour, workflow_id=workflow_id, status=JobStatus.QUEUED,
                retry=retry.model_dump(mode="json") if retry is not None else None))
        except HTTPException:
            if key is not None:  # refused, nothing made: the key is free again
                await in_thread(idem.release, deps, scope, key, fingerprint)
            raise
    inp = JobInput(job_id=job_id, project=project, command=body.command, image=body.image,
                   allocation=allocation, pool=target, timing=deps.job_timing, log_poll_s=deps.job_log_poll_s,
                   queue_poll_s=deps.job_queue_poll_s, retry=retry)
    try:
        # Once per id: a retry joins the run the first request started, and never runs one again.
        await deps.workflows.start(wf.JOB, inp, workflow_id=workflow_id, once=True)
    except WorkflowUnavailable as e:
        if key is None:  # a keyed request is retried (and starts it then); any other is not
            await in_thread(_not_started, deps, job_id, str(e))
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    row = await in_thread(_job, deps, project, job_id)
    return JobAccepted(id=job_id, status=row.status if row is not None else JobStatus.QUEUED)


@router.get("", response_model=Page[JobOut])
def list_jobs(session: ReadSessionDep, caller: CallerDep, page: PageDep) -> Page[JobOut]:
    """The project's jobs, newest first."""
    rows, following = KEYSET.fetch(session, select(Job).where(Job.project == caller.project), page)
    pri = queue.positions(session, caller.project)  # within the project: other tenants' jobs unseen
    held = queue.held(session, [j for j in rows if j.id in pri])
    return Page(items=[JobOut.of(j, pri.get(j.id), held) for j in rows], next_cursor=following)


@router.get("/{job_id}", response_model=JobOut, responses={404: {"description": "unknown"}})
def get_job(job_id: str, session: ReadSessionDep, caller: CallerDep) -> JobOut:
    row = session.get(Job, job_id)
    if row is None or row.project != caller.project:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {shown(job_id)}")
    pri = queue.positions(session, caller.project).get(job_id)
    return JobOut.of(row, pri, queue.held(session, [row]) if pri is not None else None)


@router.post("/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobAccepted,
             responses={404: {"description": "unknown"}, 503: {"description": "Temporal unreachable"}})
async def cancel_job(job_id: str, deps: DepsDep, caller: CallerDep) -> JobAccepted:
    """Cancel: a queued job leaves the queue; a running one is stopped and its machine terminated.
    Idempotent; a job that has ended stays as it ended."""
    row = await in_thread(_job, deps, caller.project, job_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {shown(job_id)}")
    if JobStatus(row.status).ended:
        return JobAccepted(id=job_id, status=row.status)
    try:
        if not await deps.workflows.request_update(row.workflow_id, wf.JOB.cancel):
            ended = await in_thread(_job, deps, caller.project, job_id)
            return JobAccepted(id=job_id, status=ended.status if ended else row.status)
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    return JobAccepted(id=job_id, status=row.status)


@router.get("/{job_id}/logs", response_class=Response,
            responses={200: {"content": {"text/plain": {}},
                             "description": "the output from `offset` (stdout and stderr interleaved)"},
                       404: {"description": "unknown"}})
async def job_logs(job_id: str, deps: DepsDep, caller: CallerDep,
                   offset: Annotated[int, Query(ge=0, le=2**53, description="byte offset to start at")] = 0,
                   follow: Annotated[bool, Query(description="stream until the job ends")] = False,
                   ) -> Response:
    """The job's output from byte `offset`. Without `follow`: what is stored now (header
    `X-Log-Offset`: where to resume). With `follow`: streamed as it arrives until the job ends; a
    client that loses the stream resumes at `offset` + the bytes it received."""
    if await in_thread(_job, deps, caller.project, job_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {shown(job_id)}")
    if not follow:
        data, _ = await in_thread(_read, deps, job_id, offset)
        return Response(data, media_type="text/plain; charset=utf-8",
                        headers={"X-Log-Offset": str(offset + len(data))})

    async def stream() -> AsyncIterator[bytes]:
        at = offset
        while True:
            data, ended = await in_thread(_read, deps, job_id, at)
            if data:
                at += len(data)
                yield data
            elif ended:
                return
            else:
                await asyncio.sleep(FOLLOW_POLL_S)

    return StreamingResponse(stream(), media_type="text/plain; charset=utf-8")

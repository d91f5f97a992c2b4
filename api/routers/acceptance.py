"""Acceptance runs: the clouds page's acceptance suite on one of the project's connections
(workflows/acceptance.py), started, followed, approved, and exported as results.

A run started here is a workflow of its own; it has no worker of its own to SIGKILL, so it reports
the worker-killed step as not run (`gpuprov acceptance run` runs that step). `spend: false` holds the
run after the plan (the offer and its price are in its state) until `POST .../approve` answers.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, Field
from sqlmodel import select

from api.auth import CallerDep, require_admin
from api.deps import AppDeps, DepsDep, SessionDep, in_thread, open_session
from api.errors import shown
from api.fields import Printable, Strict, Timestamp
from api.pagination import Keyset, Page, PageDep
from api.temporal import WorkflowUnavailable
from messages import workflows as wf
from messages.acceptance import (
    AcceptancePlan,
    AcceptanceRequest,
    AcceptanceResult,
    AcceptanceState,
    AcceptanceStep,
    Account,
    Approval,
    Leftover,
    RecordAcceptanceInput,
    WorkerKilled,
)
from messages.allocation import Timing
from providers import support
from store import acceptance_runs
from store.clock import utcnow
from store.connections import get_connection
from store.identity import ssh_identity
from store.models import AcceptanceRun

KEYSET = Keyset("acceptance_runs", AcceptanceRun.created_at, AcceptanceRun.id, descending=True)
PRIVATE_QUEUE = r"^gpuprov-acceptance-[a-z0-9-]{1,60}$"
# A simulated account answers in milliseconds: a worker killed mid-create is noticed sooner there.
SIMULATED_TIMING = Timing(heartbeat_timeout_s=8.0, poll_interval_s=0.5, max_retry_interval_s=2.0)
# A run's lane is taken, then its row made and its workflow started: a lane whose run has no workflow
# this long after it was taken is one an API stopped in between (the next run takes it over).
STARTING_S = 60.0


def workflow_id(run_id: str) -> str:
    return f"acceptance-{run_id}"


class AcceptanceRunCreate(Strict):
    connection_id: Annotated[str, Field(min_length=1, max_length=100), Printable]
    gpu: Annotated[str, Field(max_length=64), Printable] | None = None
    instance_type: Annotated[str, Field(max_length=100), Printable] | None = None
    region: Annotated[str, Field(max_length=100), Printable] | None = None
    max_usd: float = Field(gt=0, le=10_000, description="the run stops before its machines cost more")
    max_minutes: float = Field(default=60, gt=0, le=24 * 60, description="the run stops after this long")
    spend: bool = Field(description="true: go ahead once the offer is within the ceilings; false: hold after "
                                    "the plan until POST .../approve")
    approve_within_minutes: float = Field(default=15, ge=1, le=24 * 60, description=(
        "with spend false: a plan not answered this long after it is shown declines itself (nothing "
        "is created) and frees the cloud account for the next run; at least a minute (a person answers)"))
    private_task_queue: str | None = Field(default=None, pattern=PRIVATE_QUEUE, description=(
        "the task queue of a worker the caller runs and SIGKILLs for the worker-killed step (the "
        "CLI's; admin token only); without it that step is not run"))


class ApprovalIn(Strict):
    spend: bool


class WorkerKilledIn(Strict):
    phase: Annotated[str, Field(max_length=40), Printable] | None = None


class AcceptanceResultOut(BaseModel):
    """A run's result as the committed results file holds it (providers/acceptance_results.json):
    no credential, an account fingerprint at most."""

    cloud: str
    adapter_version: str
    account: Account
    steps: list[AcceptanceStep]
    started_at: Timestamp
    account_fingerprint: str | None

    @classmethod
    def of(cls, r: AcceptanceResult) -> AcceptanceResultOut:
        return cls(**r.model_dump())


class AcceptanceRunOut(BaseModel):
    id: str
    cloud: str
    connection_id: str
    created_at: Timestamp | None
    finished_at: Timestamp | None
    done: bool
    awaiting_approval: bool
    approve_by: Timestamp | None = Field(description="while awaiting approval: unanswered by then, the run "
                                                     "declines itself")
    unanswered: bool = Field(description="the plan was not answered by approve_by: the run declined itself")
    plan: AcceptancePlan | None
    steps: list[AcceptanceStep]
    allocations: list[str] = Field(description="the instances the run started (in the instance list)")
    leftovers: list[Leftover] = Field(description="what the cloud still lists of the run: remove by hand")
    kill_now: str | None = Field(description="the CLI's cue: the instance whose worker to kill now")
    spent_usd_estimate: float
    outcome: str | None = Field(description="passed, failed or incomplete, once done")
    result: AcceptanceResultOut | None

    @classmethod
    def of(cls, row: AcceptanceRun, st: AcceptanceState) -> AcceptanceRunOut:
        return cls(id=row.id, cloud=row.cloud, connection_id=row.connection_id, created_at=row.created_at,
                   finished_at=row.finished_at, done=st.done, awaiting_approval=st.awaiting_approval,
                   approve_by=st.approve_by, unanswered=st.unanswered, plan=st.plan, steps=st.steps,
                   allocations=st.allocations, leftovers=st.leftovers, kill_now=st.kill_now,
                   spent_usd_estimate=st.spent_usd_estimate,
                   outcome=st.result.outcome if st.result else None,
                   result=AcceptanceResultOut.of(st.result) if st.result else None)


router = APIRouter(prefix="/acceptance-runs", tags=["acceptance"])
_UNAVAILABLE: dict[int | str, dict[str, Any]] = {503: {"description": "Temporal unreachable"}}


def _row(deps: AppDeps, project: str, run_id: str) -> AcceptanceRun:
    with open_session(deps) as session:
        row = acceptance_runs.get(session, project, run_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no acceptance run {shown(run_id)}")
    return row


def _request(deps: AppDeps, project: str, body: AcceptanceRunCreate,
             run_id: str) -> tuple[AcceptanceRequest, str]:
    """The run's workflow input, and the lane of the account it runs on."""
    with open_session(deps) as session:
        conn = get_connection(session, body.connection_id)
        if conn is None or conn.project != project:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no connection {shown(body.connection_id)}")
        public, _ = ssh_identity(session, deps.box)
    simulated = support.account_kind_of(conn.provider, conn.endpoint) == "simulated"
    return AcceptanceRequest(
        run_id=run_id, project=project, connection_id=conn.id, cloud=conn.provider, gpu=body.gpu,
        instance_type=body.instance_type, region=body.region, max_usd=body.max_usd,
        max_minutes=body.max_minutes, ssh_public_keys=[public], kill_task_queue=body.private_task_queue,
        hold_for_approval=not body.spend, approve_within_minutes=body.approve_within_minutes,
        timing=SIMULATED_TIMING if simulated else Timing(),
        settle_s=10.0 if simulated else 120.0), acceptance_runs.lane_key(conn)


def _take_lane(deps: AppDeps, key: str, run_id: str, holder: str | None) -> acceptance_runs.Lane | None:
    with open_session(deps) as session:
        return acceptance_runs.take_lane(session, key, run_id, holder=holder)


def _has_ended(deps: AppDeps, run_id: str) -> bool:
    with open_session(deps) as session:
        return acceptance_runs.has_ended(session, run_id)


async def _under_way(deps: AppDeps, lane: acceptance_runs.Lane) -> bool:
    """The run holding a lane is under way while its workflow is open, or about to start (the lane
    taken moments ago, its start on its way; an API stopped before the start lets it go after
    STARTING_S). One that recorded its end, or whose workflow closed without recording it (terminated
    from the Web UI), is not."""
    if await in_thread(_has_ended, deps, lane.run_id):
        return False
    is_open = await deps.workflows.is_open(workflow_id(lane.run_id))
    if is_open is None:
        return utcnow() - lane.taken_at < timedelta(seconds=STARTING_S)
    return is_open


def _refusal(deps: AppDeps, project: str, holder: str) -> str:
    """Why a run is refused while `holder` is under way on its account: the holder named, with how to
    end it, only to its own project (one cloud key may be connected in two)."""
    why = ("one run at a time per cloud account (two would take each other's capacity and count each "
           "other's machines as leftovers)")
    with open_session(deps) as session:
        row = acceptance_runs.get(session, project, holder)
    if row is None:
        return (f"another acceptance run is under way on this cloud account (a connection of the same "
                f"credentials, in this project or another): {why}. Wait for it to end")
    return (f"acceptance run {holder} is under way on this cloud account (connection {row.connection_id}): "
            f"{why}. Wait for it to end, or answer it if it waits for approval "
            f"(POST /api/compute/acceptance-runs/{holder}/approve with spend false ends it)")


async def _one_at_a_time(deps: AppDeps, project: str, key: str, run_id: str) -> None:
    """Take the account's acceptance lane for `run_id`, or refuse (409) while the run holding it is
    under way; from one that is not, take it over."""
    lane = await in_thread(_take_lane, deps, key, run_id, None)
    while lane is not None:
        try:
            under_way = await _under_way(deps, lane)
        except WorkflowUnavailable as e:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
        if under_way:
            why = await in_thread(_refusal, deps, project, lane.run_id)
            raise HTTPException(status.HTTP_409_CONFLICT, why)
        lane = await in_thread(_take_lane, deps, key, run_id, lane.run_id)


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=AcceptanceRunOut,
             responses={403: {"description": "a private task queue without the admin token"},
                        404: {"description": "unknown connection"},
                        409: {"description": "another acceptance run is under way on the cloud account"},
                        **_UNAVAILABLE})
async def start_run(body: AcceptanceRunCreate, deps: DepsDep, caller: CallerDep) -> AcceptanceRunOut:
    """Start an acceptance run on one of the project's connections. It allocates real machines on
    that account (the cheapest offer of `gpu`, or the cloud's cheapest), within `max_usd` and
    `max_minutes`, and always cleans up. One run at a time per cloud account: a second, on any
    connection of the same credentials, is refused (409) until the first ends."""
    if body.private_task_queue is not None:
        require_admin(caller)  # it names a queue a worker outside the deployment polls
    run_id = f"acc-{uuid.uuid4().hex[:12]}"
    request, lane = await in_thread(_request, deps, caller.project, body, run_id)
    await _one_at_a_time(deps, caller.project, lane, run_id)
    state = AcceptanceState(run_id=run_id, cloud=request.cloud)
    try:
        # The row before the start: the list shows the run at once; its workflow's records bring it
        # up to date.
        await in_thread(_save, deps, _record(request, state))
    except Exception:
        # Nothing started: the account's lane goes now, not STARTING_S later (the caller's retry
        # would be refused meanwhile). A database too far gone to let it go leaves it to STARTING_S.
        with contextlib.suppress(Exception):
            await in_thread(_forget, deps, run_id)
        raise
    try:
        await deps.workflows.start(wf.ACCEPTANCE, request, workflow_id=workflow_id(run_id))
    except WorkflowUnavailable as e:
        await in_thread(_forget, deps, run_id)  # nothing runs it: no row claims a run
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    return AcceptanceRunOut.of(await in_thread(_row, deps, caller.project, run_id), state)


def _save(deps: AppDeps, record: RecordAcceptanceInput) -> None:
    with open_session(deps) as session:
        acceptance_runs.save(session, record)


def _forget(deps: AppDeps, run_id: str) -> None:
    with open_session(deps) as session:
        acceptance_runs.forget(session, run_id)


def _record(request: AcceptanceRequest, state: AcceptanceState) -> RecordAcceptanceInput:
    return RecordAcceptanceInput(run_id=request.run_id, project=request.project,
                                                 connection_id=request.connection_id, state=state)


@router.get("", response_model=Page[AcceptanceRunOut])
def list_runs(session: SessionDep, caller: CallerDep, page: PageDep) -> Page[AcceptanceRunOut]:
    """The project's acceptance runs, newest first, as last recorded."""
    stmt = select(AcceptanceRun).where(AcceptanceRun.project == caller.project)
    rows, following = KEYSET.fetch(session, stmt, page)
    return Page(items=[AcceptanceRunOut.of(r, acceptance_runs.state_of(r)) for r in rows],
                next_cursor=following)


@router.get("/results", response_model=list[AcceptanceResultOut])
def export_results(session: SessionDep, caller: CallerDep,
                   cloud: Annotated[str | None, Query(max_length=100)] = None) -> list[AcceptanceResultOut]:
    """Every ended run's result, oldest first, in the committed results file's format
    (providers/acceptance_results.json): no credential, an account fingerprint at most."""
    clouds = None if cloud is None else [cloud]
    found = acceptance_runs.results(session, project=caller.project, clouds=clouds)
    return [AcceptanceResultOut.of(r) for r in found]


async def _out(deps: AppDeps, project: str, run_id: str) -> AcceptanceRunOut:
    row = await in_thread(_row, deps, project, run_id)
    state = acceptance_runs.state_of(row)
    if row.result is None:
        try:
            live = await deps.workflows.query(workflow_id(run_id), wf.ACCEPTANCE.state)
        except WorkflowUnavailable:
            live = None  # Temporal away: the recorded state, which is older but true
        if live is not None:
            state = live
    return AcceptanceRunOut.of(row, state)


@router.get("/{run_id}", response_model=AcceptanceRunOut, responses={404: {"description": "unknown"}})
async def get_run(run_id: str, deps: DepsDep, caller: CallerDep) -> AcceptanceRunOut:
    """The run as it stands: live from its workflow while it runs, else as recorded."""
    return await _out(deps, caller.project, run_id)


async def _signal(deps: AppDeps, project: str, run_id: str,
                  answer: Approval | WorkerKilled) -> AcceptanceRunOut:
    row = await in_thread(_row, deps, project, run_id)
    ended = HTTPException(status.HTTP_409_CONFLICT, f"acceptance run {run_id} has ended")
    if row.result is not None:
        raise ended
    try:
        if isinstance(answer, Approval):
            sent = await deps.workflows.signal(workflow_id(run_id), wf.ACCEPTANCE.approve, answer)
        else:
            sent = await deps.workflows.signal(workflow_id(run_id), wf.ACCEPTANCE.worker_killed, answer)
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    if not sent:
        raise ended
    return await _out(deps, project, run_id)


_SIGNALLED: dict[int | str, dict[str, Any]] = {404: {"description": "unknown"},
                                               409: {"description": "the run has ended"}, **_UNAVAILABLE}


@router.post("/{run_id}/approve", status_code=status.HTTP_202_ACCEPTED, response_model=AcceptanceRunOut,
             responses=_SIGNALLED)
async def approve_run(run_id: str, body: ApprovalIn, deps: DepsDep, caller: CallerDep) -> AcceptanceRunOut:
    """Answer a held run's plan: `spend: true` goes on, `false` ends it with nothing created. A plan
    left unanswered past its `approve_by` is refused (409): the run declined itself."""
    run = await _out(deps, caller.project, run_id)
    if run.unanswered:  # a late yes must not read as taken
        raise HTTPException(status.HTTP_409_CONFLICT, (
            f"acceptance run {run_id} declined itself: its plan was not answered in time, and nothing was "
            "created. Start another run"))
    return await _signal(deps, caller.project, run_id, Approval(spend=body.spend))


@router.post("/{run_id}/worker-killed", status_code=status.HTTP_202_ACCEPTED, response_model=AcceptanceRunOut,
             responses={403: {"description": "not the admin token"}, **_SIGNALLED})
async def worker_killed(run_id: str, body: WorkerKilledIn, deps: DepsDep,
                        caller: CallerDep) -> AcceptanceRunOut:
    """The CLI's word that it SIGKILLed its private worker (and started a fresh one)."""
    await in_thread(_row, deps, caller.project, run_id)  # another project's run: 404 before 403
    require_admin(caller)
    return await _signal(deps, caller.project, run_id, WorkerKilled(phase=body.phase))

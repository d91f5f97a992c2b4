"""Instances: resolve where planning may look, start AllocationWorkflow, record the row; reads come
from the SQL projection.

Rows cannot diverge from workflows: the row is written only after its workflow started (if the API
dies in between, the workflow's own record writes it), and a terminate is sent to the workflow
before anything is written (the workflow records `terminating` itself)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlmodel import Session, col, select

from api import idempotency as idem
from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, SessionDep, in_thread, open_session
from api.errors import shown
from api.pagination import Keyset, Page, PageDep
from api.placement import resolve
from api.routers.budget import refuse_over_budget
from api.routers.defaults import with_project_default
from api.schemas import ACTIVE, InstanceAccepted, InstanceCreate, InstanceOut, InstanceStatusFilter
from api.temporal import WorkflowUnavailable
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, TerminateRequest
from messages.enums import AllocationStatus
from messages.ids import LEGACY_ALLOCATE_PREFIX, allocation_workflow_id, terminate_workflow_id
from store import allocations, repo
from store.models import Instance

router = APIRouter(prefix="/instances", tags=["instances"])

# Newest first; the keyset (created_at, id) keeps pages stable while allocations are added.
KEYSET = Keyset("instances", Instance.created_at, Instance.id, descending=True)


def _get(session: Session, project: str, instance_id: str) -> Instance:
    """The project's instance of that id: another project's answers the same 404 as an unknown id."""
    row = repo.get_instance(session, instance_id)
    if row is None or row.project != project:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no instance {shown(instance_id)}")
    return row


@dataclass
class Default:
    """A backend's picked default offer, applied to a request that named that backend alone."""

    instance_type: str | None = None
    note: str | None = None


def with_default(deps: AppDeps, project: str, body: InstanceCreate) -> tuple[InstanceCreate, Default]:
    """The request with its backend's default offer applied (POST /backends/{cloud}/pick), when it
    names one backend (`cloud`, `clouds` of one, or a `connection_id`), no GPU (nor GPU count), and
    no region or spot setting at odds with the pick: then planning considers only the picked
    instance type in its region. Otherwise the request as it came. Sync: call through `in_thread`."""
    if body.gpu is not None or body.gpu_count is not None:
        return body, Default()
    with open_session(deps) as session:
        if body.connection_id is not None:
            conn = repo.get_connection(session, body.connection_id)
            if conn is None or conn.project != project:
                return body, Default()  # resolve() answers the 404
            cloud = conn.provider
        elif body.cloud is not None:
            cloud = body.cloud
        elif body.clouds is not None and len(body.clouds) == 1:
            cloud = body.clouds[0]
        else:
            return body, Default()
        pick = repo.get_pick(session, project, cloud)
    if pick is None or body.region not in (None, pick.region) or body.spot not in (None, pick.spot):
        return body, Default()
    spot = " (spot)" if pick.spot else ""
    note = f"{cloud} default offer: {pick.instance_type} in {pick.region}{spot}"
    return (body.model_copy(update={"region": pick.region, "spot": pick.spot or None}),
            Default(instance_type=pick.instance_type, note=note))


# --------------------------------------------------------------------------- database work (sync)


def _instance(deps: AppDeps, project: str, instance_id: str) -> Instance | None:
    """The project's instance of that id; None for an unknown id or another project's."""
    with open_session(deps) as session:
        row = repo.get_instance(session, instance_id)
    return row if row is not None and row.project == project else None


def _update(deps: AppDeps, instance_id: str, **fields: object) -> None:
    with open_session(deps) as session:
        repo.update_instance(session, instance_id, **fields)


def _within_budget(deps: AppDeps, project: str) -> None:
    """409 naming the project's daily budget once today's spend has reached it."""
    with open_session(deps) as session:
        refuse_over_budget(session, project)


def _mark_terminating(deps: AppDeps, instance_id: str) -> None:
    """For legacy rows only: their TerminateWorkflow does not record `terminating` itself."""
    _update(deps, instance_id, status=AllocationStatus.TERMINATING)


# --------------------------------------------------------------------------- routes


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=InstanceAccepted,
             responses={404: {"description": "unknown connection_id"},
                        409: {"description": "not connected, the project's daily budget is reached, or "
                                             "an allocation whose key ended unrecorded"},
                        422: {"description": "invalid, refused by every candidate cloud, or an "
                                             "Idempotency-Key reused with another request"},
                        503: {"description": "Temporal unreachable: nothing was started or recorded"}})
async def create_instance(body: InstanceCreate, deps: DepsDep, caller: CallerDep,
                          idempotency_key: idem.IdempotencyKey = None) -> InstanceAccepted:
    """Allocate a machine on the cheapest offer of every connection the request allows. With an
    Idempotency-Key the allocation id derives from the key: a retry answers with the same id (and
    its status now) and starts nothing twice."""
    key = idempotency_key
    project = caller.project
    scope = idem.scope_of("instances", project)
    # max_hours only when given: a retry keeps the fingerprint stored before the field existed
    fingerprint = idem.fingerprint(body.model_dump(
        mode="json", exclude=None if body.max_hours is not None else {"max_hours"}))
    if key is None:
        allocation_id = repo.new_id()
    else:
        allocation_id = idem.derived_id("instance", project, key)
        if await in_thread(idem.check, deps, scope, key, fingerprint):
            row = await in_thread(_instance, deps, project, allocation_id)
            if row is not None:  # its workflow started (the row comes after the start): answer again
                return InstanceAccepted(id=row.id, status=row.status)
    await in_thread(_within_budget, deps, project)
    # Naming no cloud: the project's default cloud and region, if it has one (PUT /defaults).
    body, project_default = await in_thread(with_project_default, deps, project, body)
    # The backend's picked default offer (fingerprinted above as the request came, not as filled in).
    body, default = await in_thread(with_default, deps, project, body)
    # Everything that can be refused is refused here, before a workflow (or a cloud call) exists.
    plan = await in_thread(resolve, deps, project, body)
    if default.note is not None:
        plan.notes.insert(0, default.note)
    if project_default is not None:
        plan.notes.insert(0, project_default)
    if key is not None:
        await in_thread(idem.claim, deps, scope, key, fingerprint, allocation_id)
    first = plan.targets[0]
    request = AllocateRequest(
        allocation_id=allocation_id, connection_id=first.connection_id, cloud=first.cloud,
        targets=plan.targets, notes=plan.notes, project=project, name=body.name, gpu=body.gpu,
        gpu_count=body.gpu_count, region=body.region, spot=body.spot, instance_type=default.instance_type,
        ports=body.ports, image=body.image, k3s=body.k3s, ssh_public_keys=body.ssh_public_keys,
        max_hours=body.max_hours)
    workflow_id = allocation_workflow_id(allocation_id)
    try:
        # Once per id: a retry joins the run the first attempt started; an id that ran never runs again.
        running = await deps.workflows.start(wf.ALLOCATION, AllocationInput(request=request),
                                             workflow_id=workflow_id, once=True)
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    if not running:  # it ran and closed; its own record wrote the row unless it never got that far
        row = await in_thread(_instance, deps, project, allocation_id)
        if row is None:
            raise HTTPException(status.HTTP_409_CONFLICT,
                                f"allocation {allocation_id} ended before it recorded anything")
        return InstanceAccepted(id=row.id, status=row.status)
    # After the start: the list shows the request at once, even before the worker picks it up.
    current = await in_thread(allocations.record_started, deps.engine, request, workflow_id)
    return InstanceAccepted(id=allocation_id, status=current)


@router.get("", response_model=Page[InstanceOut])
def list_instances(
    session: SessionDep,
    caller: CallerDep,
    page: PageDep,
    status_: Annotated[InstanceStatusFilter | None, Query(alias="status")] = None,
) -> Page[InstanceOut]:
    """The project's instances, newest first (without attempts and events: GET one for those).
    `status=active`: every one whose machine may exist and bill (provisioning, ready, terminating)."""
    stmt = select(Instance).where(Instance.project == caller.project)
    if status_ == ACTIVE:
        stmt = stmt.where(col(Instance.status).in_(sorted(repo.LIVE_STATUSES)))
    elif status_ is not None:
        stmt = stmt.where(Instance.status == status_)
    rows, following = KEYSET.fetch(session, stmt, page)
    return Page(items=[InstanceOut.of(i) for i in rows], next_cursor=following)


@router.get("/{instance_id}", response_model=InstanceOut, responses={404: {"description": "unknown"}})
def get_instance(instance_id: str, session: SessionDep, caller: CallerDep) -> InstanceOut:
    row = _get(session, caller.project, instance_id)
    return InstanceOut.of(row, list(repo.attempts_of(session, instance_id)),
                          list(repo.events_of(session, instance_id)))


@router.post("/{instance_id}/terminate", status_code=status.HTTP_202_ACCEPTED,
             response_model=InstanceAccepted,
             responses={404: {"description": "unknown"}, 503: {"description": "Temporal unreachable"}})
async def terminate_instance(instance_id: str, deps: DepsDep, caller: CallerDep) -> InstanceAccepted:
    """Terminate: the allocation's `terminate` update, which ends once the cloud shows the machine
    gone. Idempotent: a repeated request is accepted again and joins the same teardown."""
    row = await in_thread(_instance, deps, caller.project, instance_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no instance {shown(instance_id)}")
    if not AllocationStatus(row.status).live:
        return InstanceAccepted(id=instance_id, status=row.status)  # nothing is on the cloud
    legacy, previous = row.workflow_id.startswith(LEGACY_ALLOCATE_PREFIX), row.status
    try:
        if legacy:
            # Started by an earlier gpuprov: one TerminateWorkflow, a repeated request joins it.
            # Its row is marked here (that workflow does not record `terminating` itself).
            await in_thread(_mark_terminating, deps, instance_id)
            await deps.workflows.start(wf.LEGACY_TERMINATE, TerminateRequest(allocation_id=instance_id),
                                       workflow_id=terminate_workflow_id(instance_id), use_existing=True)
        # The update first, and nothing written here: the workflow records `terminating` itself, so
        # an API that dies now leaves nothing claiming a teardown that was never asked for.
        elif not await deps.workflows.request_update(row.workflow_id, wf.ALLOCATION.terminate):
            # its run has closed: as it ended
            ended = await in_thread(_instance, deps, caller.project, instance_id)
            return InstanceAccepted(id=instance_id,
                                    status=ended.status if ended else AllocationStatus.TERMINATED)
    except WorkflowUnavailable as e:
        if legacy:
            await in_thread(_update, deps, instance_id, status=previous)
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    return InstanceAccepted(id=instance_id, status=AllocationStatus.TERMINATING)

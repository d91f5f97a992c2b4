"""Instances: validate, record, start AllocationWorkflow; reads come from the SQL projection."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlmodel import Session, select

from api.deps import AppDeps, DepsDep, SessionDep, WorkflowUnavailable, in_thread, open_session
from api.errors import adapter_class
from api.pagination import Keyset, Page, PageDep
from api.schemas import InstanceAccepted, InstanceCreate, InstanceOut, InstanceStatusName
from messages.allocation import AllocateRequest, AllocationInput, TerminateRequest
from messages.enums import AllocationStatus, Phase
from messages.ids import LEGACY_ALLOCATE_PREFIX, allocation_workflow_id, terminate_workflow_id
from providers.base import LaunchRequirements, Unsupported
from store import repo
from store.models import Connection, Instance

router = APIRouter(prefix="/instances", tags=["instances"])

# Newest first; the keyset (created_at, id) keeps pages stable while allocations are added.
KEYSET = Keyset("instances", Instance.created_at, Instance.id, descending=True)


def _get(session: Session, instance_id: str) -> Instance:
    row = repo.get_instance(session, instance_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no instance {instance_id!r}")
    return row


# --------------------------------------------------------------------------- database work (sync)


def _connection_for(deps: AppDeps, cloud: str) -> Connection | None:
    with open_session(deps) as session:
        return repo.connection_for(session, cloud)


def _record(deps: AppDeps, row: Instance) -> None:
    with open_session(deps) as session:
        session.add(row)
        session.commit()


def _update(deps: AppDeps, instance_id: str, **fields: object) -> None:
    with open_session(deps) as session:
        repo.update_instance(session, instance_id, **fields)


def _mark_terminating(deps: AppDeps, instance_id: str) -> tuple[str, str]:
    """Mark the instance terminating while a machine may exist (404 if unknown); its status
    before, and its workflow id."""
    with open_session(deps) as session:
        row = _get(session, instance_id)
        previous = row.status
        if AllocationStatus(previous).live:
            repo.update_instance(session, row.id, status=AllocationStatus.TERMINATING)
        return previous, row.workflow_id


# --------------------------------------------------------------------------- routes


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=InstanceAccepted,
             responses={409: {"description": "cloud not connected"}, 422: {"description": "invalid"}})
async def create_instance(body: InstanceCreate, deps: DepsDep) -> InstanceAccepted:
    # Everything that can be refused is refused here, before a workflow (or a cloud call) exists.
    caps = adapter_class(body.cloud).capabilities
    try:
        caps.check(LaunchRequirements(spot=body.spot, ports=body.ports, image=body.image,
                                      region=body.region, k3s=body.k3s))
    except Unsupported as e:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, e.message) from None
    conn = await in_thread(_connection_for, deps, body.cloud)
    if conn is None:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"no {body.cloud} connection: connect {body.cloud} first "
                            f"(gpuprov connect {body.cloud} --credential ...)")

    allocation_id = repo.new_id()
    workflow_id = allocation_workflow_id(allocation_id)
    request = AllocateRequest(
        allocation_id=allocation_id, connection_id=conn.id, cloud=body.cloud,
        project=body.project, name=body.name, gpu=body.gpu,
        gpu_count=body.gpu_count, region=body.region, spot=body.spot, ports=body.ports, image=body.image,
        k3s=body.k3s, ssh_public_keys=body.ssh_public_keys)
    # The row exists before the workflow, so the list shows the request even if Temporal is slow.
    await in_thread(_record, deps, Instance(
        id=allocation_id, name=body.name, project=body.project, provider=body.cloud, connection_id=conn.id,
        workflow_id=workflow_id, status=AllocationStatus.PROVISIONING, phase=Phase.VALIDATE, gpu=body.gpu,
        gpu_count=body.gpu_count, region=body.region, spot=body.spot))
    try:
        await deps.workflows.start("AllocationWorkflow", AllocationInput(request=request),
                                   workflow_id=workflow_id)
    except WorkflowUnavailable as e:
        await in_thread(_update, deps, allocation_id, status=AllocationStatus.FAILED, phase=Phase.FAILED,
                        error=str(e))
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    return InstanceAccepted(id=allocation_id, status=AllocationStatus.PROVISIONING)


@router.get("", response_model=Page[InstanceOut])
def list_instances(
    session: SessionDep,
    page: PageDep,
    project: Annotated[str | None, Query(min_length=1, max_length=63)] = None,
    status_: Annotated[InstanceStatusName | None, Query(alias="status")] = None,
) -> Page[InstanceOut]:
    """Instances, newest first (without attempts and events: GET one for those)."""
    stmt = select(Instance)
    if project is not None:
        stmt = stmt.where(Instance.project == project)
    if status_ is not None:
        stmt = stmt.where(Instance.status == status_)
    rows, following = KEYSET.fetch(session, stmt, page)
    return Page(items=[InstanceOut.of(i) for i in rows], next_cursor=following)


@router.get("/{instance_id}", response_model=InstanceOut, responses={404: {"description": "unknown"}})
def get_instance(instance_id: str, session: SessionDep) -> InstanceOut:
    row = _get(session, instance_id)
    return InstanceOut.of(row, list(repo.attempts_of(session, instance_id)),
                          list(repo.events_of(session, instance_id)))


@router.post("/{instance_id}/terminate", status_code=status.HTTP_202_ACCEPTED,
             response_model=InstanceAccepted, responses={404: {"description": "unknown"}})
async def terminate_instance(instance_id: str, deps: DepsDep) -> InstanceAccepted:
    # Marked first: the workflow may finish (and write "terminated") before the call returns.
    previous, workflow_id = await in_thread(_mark_terminating, deps, instance_id)
    if not AllocationStatus(previous).live:
        return InstanceAccepted(id=instance_id, status=previous)  # nothing is on the cloud
    try:
        if workflow_id.startswith(LEGACY_ALLOCATE_PREFIX):
            # Started by an earlier gpuprov: one TerminateWorkflow, a repeated request joins it.
            await deps.workflows.start("TerminateWorkflow", TerminateRequest(allocation_id=instance_id),
                                       workflow_id=terminate_workflow_id(instance_id), use_existing=True)
        else:
            # The allocation's own `terminate` update: idempotent, it ends when the cloud shows it gone.
            await deps.workflows.request_update(workflow_id, "terminate")
    except WorkflowUnavailable as e:
        await in_thread(_update, deps, instance_id, status=previous)
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    return InstanceAccepted(id=instance_id, status=AllocationStatus.TERMINATING)

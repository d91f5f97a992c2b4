"""Instances: validate, record, start AllocateWorkflow; reads come from the SQL projection."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Query, status
from sqlmodel import Session

from api.deps import AppDeps, WorkflowUnavailable, get_deps, get_session
from api.errors import adapter_class
from api.schemas import InstanceAccepted, InstanceCreate, InstanceOut
from providers.base import LaunchRequirements, Unsupported
from store import repo
from store.models import Instance
from workflows.models import AllocateRequest, TerminateRequest, allocate_workflow_id, terminate_workflow_id

router = APIRouter(prefix="/instances", tags=["instances"])


def _get(session: Session, instance_id: str) -> Instance:
    row = repo.get_instance(session, instance_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no instance {instance_id!r}")
    return row


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=InstanceAccepted,
             responses={409: {"description": "cloud not connected"}, 422: {"description": "invalid"}})
async def create_instance(body: InstanceCreate, deps: AppDeps = Depends(get_deps),  # noqa: B008
                          session: Session = Depends(get_session)) -> InstanceAccepted:  # noqa: B008
    # Everything that can be refused is refused here, before a workflow (or a cloud call) exists.
    caps = adapter_class(body.cloud).capabilities
    try:
        caps.check(LaunchRequirements(spot=body.spot, ports=body.ports, image=body.image,
                                      region=body.region, k3s=body.k3s))
    except Unsupported as e:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, e.message) from None
    conn = repo.connection_for(session, body.cloud)
    if conn is None:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"no {body.cloud} connection: connect {body.cloud} first "
                            f"(gpuprov connect {body.cloud} --credential ...)")

    allocation_id = repo.new_id()
    workflow_id = allocate_workflow_id(allocation_id)
    request = AllocateRequest(
        allocation_id=allocation_id, connection_id=conn.id, cloud=body.cloud,
        installation_id=deps.installation_id, project=body.project, name=body.name, gpu=body.gpu,
        gpu_count=body.gpu_count, region=body.region, spot=body.spot, ports=body.ports, image=body.image,
        k3s=body.k3s, ssh_public_keys=body.ssh_public_keys)
    # The row exists before the workflow, so the list shows the request even if Temporal is slow.
    session.add(Instance(id=allocation_id, name=body.name, project=body.project, provider=body.cloud,
                         connection_id=conn.id, workflow_id=workflow_id, status="provisioning",
                         phase="validate", gpu=body.gpu, gpu_count=body.gpu_count, region=body.region,
                         spot=body.spot))
    session.commit()
    try:
        await deps.workflows.start("AllocateWorkflow", request, workflow_id=workflow_id)
    except WorkflowUnavailable as e:
        repo.update_instance(session, allocation_id, status="failed", phase="failed", error=str(e))
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    return InstanceAccepted(id=allocation_id, status="provisioning")


@router.get("", response_model=list[InstanceOut])
def list_instances(project: str | None = None,
                   status_: str | None = Query(default=None, alias="status"),  # noqa: B008
                   session: Session = Depends(get_session)) -> list[InstanceOut]:  # noqa: B008
    return [InstanceOut.of(i) for i in repo.list_instances(session, project=project, status=status_)]


@router.get("/{instance_id}", response_model=InstanceOut, responses={404: {"description": "unknown"}})
def get_instance(instance_id: str, session: Session = Depends(get_session)) -> InstanceOut:  # noqa: B008
    row = _get(session, instance_id)
    return InstanceOut.of(row, list(repo.attempts_of(session, instance_id)),
                          list(repo.events_of(session, instance_id)))


@router.post("/{instance_id}/terminate", status_code=status.HTTP_202_ACCEPTED,
             response_model=InstanceAccepted, responses={404: {"description": "unknown"}})
async def terminate_instance(instance_id: str, deps: AppDeps = Depends(get_deps),  # noqa: B008
                             session: Session = Depends(get_session)) -> InstanceAccepted:  # noqa: B008
    row = _get(session, instance_id)
    if row.status == "terminated":
        return InstanceAccepted(id=row.id, status=row.status)
    # Marked first: the workflow may finish (and write "terminated") before start() returns.
    previous = row.status
    repo.update_instance(session, row.id, status="terminating")
    # One terminate workflow per allocation: a repeated request joins the running one.
    try:
        await deps.workflows.start("TerminateWorkflow", TerminateRequest(allocation_id=row.id),
                                   workflow_id=terminate_workflow_id(row.id), use_existing=True)
    except WorkflowUnavailable as e:
        repo.update_instance(session, row.id, status=previous)
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    return InstanceAccepted(id=row.id, status="terminating")

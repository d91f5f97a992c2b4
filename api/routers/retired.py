"""Retired workflow types and what still depends on them: the drain check an operator runs before
an upgrade that removes a type's code (workflows/README.md, "Retiring a workflow type"). Admin
token: it reads every project's instances."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field

from api.auth import CallerDep, require_admin
from api.deps import AppDeps, DepsDep, in_thread, open_session
from api.temporal import WorkflowUnavailable
from messages import workflows as wf
from store.retired import live_instances_on_retired_workflows


class RetiredRun(BaseModel):
    workflow_id: str
    workflow_type: str


class RetiredInstance(BaseModel):
    id: str
    project: str
    status: str
    workflow_id: str = Field(description="the retired workflow the instance was started under")


class RetiredOut(BaseModel):
    retired_types: list[str] = Field(description="workflow types nothing starts any more")
    open_runs: list[RetiredRun] = Field(description="runs of those types still open")
    instances: list[RetiredInstance] = Field(
        description="live instances started under one of those types (terminate them first)")
    drained: bool = Field(description="nothing above: the types' code may be removed")


router = APIRouter(prefix="/retired-workflows", tags=["operations"])


def _instances(deps: AppDeps) -> list[RetiredInstance]:
    with open_session(deps) as session:
        return [RetiredInstance(id=r.id, project=r.project, status=r.status, workflow_id=r.workflow_id)
                for r in live_instances_on_retired_workflows(session)]


@router.get("", response_model=RetiredOut, responses={403: {"description": "not the admin token"},
                                                      503: {"description": "Temporal unreachable"}})
async def retired_workflows(deps: DepsDep, caller: CallerDep) -> RetiredOut:
    """Whether the retired workflow types are drained: no run of one open, no live instance on one."""
    require_admin(caller)
    try:
        runs = await deps.workflows.open_runs(wf.RETIRED)
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    instances = await in_thread(_instances, deps)
    return RetiredOut(retired_types=list(wf.RETIRED),
                      open_runs=[RetiredRun(workflow_id=r.workflow_id, workflow_type=r.workflow_type)
                                 for r in runs],
                      instances=instances, drained=not runs and not instances)

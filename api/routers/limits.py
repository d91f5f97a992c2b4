"""The job queue's limits (store/queue.py): a project's own, and the installation's (admin token).
No limit is set until one is PUT; a null field lifts that limit."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.auth import CallerDep, require_admin
from api.deps import SessionDep
from api.fields import Strict
from store import queue
from store.models import JobLimit


class LimitsIn(Strict):
    max_gpus: Annotated[int, Field(ge=0, le=100_000)] | None = Field(
        None, description="at most this many GPUs held by the project's jobs at once; null: no limit")
    max_usd_per_hour: Annotated[float, Field(ge=0, le=1_000_000)] | None = Field(
        None, description="at most this $/hr (jobs count at their max_price_per_hour); null: no limit")


class LimitsOut(BaseModel):
    max_gpus: int | None
    max_usd_per_hour: float | None

    @classmethod
    def of(cls, row: JobLimit | None) -> LimitsOut:
        return cls(max_gpus=row.max_gpus if row else None,
                   max_usd_per_hour=row.max_usd_per_hour if row else None)


class AllLimits(BaseModel):
    project: LimitsOut = Field(description="the caller's project's limits")
    installation: LimitsOut = Field(description="limits over every project's jobs together")


router = APIRouter(prefix="/limits", tags=["jobs"])


@router.get("", response_model=AllLimits)
def get_limits(session: SessionDep, caller: CallerDep) -> AllLimits:
    return AllLimits(project=LimitsOut.of(session.get(JobLimit, caller.project)),
                     installation=LimitsOut.of(session.get(JobLimit, queue.GLOBAL)))


@router.put("", response_model=LimitsOut)
def put_limits(body: LimitsIn, session: SessionDep, caller: CallerDep) -> LimitsOut:
    """Set the caller's project's limits (queued jobs already granted keep their grant)."""
    return LimitsOut.of(queue.set_limits(session, caller.project, body.max_gpus, body.max_usd_per_hour))


@router.put("/installation", response_model=LimitsOut,
            responses={403: {"description": "needs the admin token"}})
def put_installation_limits(body: LimitsIn, session: SessionDep, caller: CallerDep) -> LimitsOut:
    """Set the limits over every project's jobs together (admin token)."""
    require_admin(caller)
    return LimitsOut.of(queue.set_limits(session, queue.GLOBAL, body.max_gpus, body.max_usd_per_hour))

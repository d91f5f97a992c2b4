"""The job queue's limits (store/queue.py): a project's own, and the installation's (admin token).
No limit is set until one is PUT; a null field lifts that limit."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter
from pydantic import BaseModel, Field
from sqlmodel import Session

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


class LimitsSet(LimitsOut):
    over_on_their_own: int = Field(
        description="waiting jobs (the project's; for the installation's limits, every project's) that "
                    "now exceed a limit on their own: they keep their place, block no one, and start "
                    "only once it is raised — each says so in its waiting_reason")


class AllLimits(BaseModel):
    project: LimitsOut = Field(description="the caller's project's limits")
    installation: LimitsOut = Field(description="limits over every project's jobs together")


router = APIRouter(prefix="/limits", tags=["jobs"])


@router.get("", response_model=AllLimits)
def get_limits(session: SessionDep, caller: CallerDep) -> AllLimits:
    return AllLimits(project=LimitsOut.of(session.get(JobLimit, caller.project)),
                     installation=LimitsOut.of(session.get(JobLimit, queue.GLOBAL)))


def _set(session: Session, scope: str, body: LimitsIn, project: str | None) -> LimitsSet:
    row = queue.set_limits(session, scope, body.max_gpus, body.max_usd_per_hour)
    return LimitsSet(max_gpus=row.max_gpus, max_usd_per_hour=row.max_usd_per_hour,
                     over_on_their_own=queue.over_on_their_own(session, project))


@router.put("", response_model=LimitsSet)
def put_limits(body: LimitsIn, session: SessionDep, caller: CallerDep) -> LimitsSet:
    """Set the caller's project's limits (queued jobs already granted keep their grant; a waiting
    job now over a limit on its own is counted in `over_on_their_own`)."""
    return _set(session, caller.project, body, caller.project)


@router.put("/installation", response_model=LimitsSet,
            responses={403: {"description": "needs the admin token"}})
def put_installation_limits(body: LimitsIn, session: SessionDep, caller: CallerDep) -> LimitsSet:
    """Set the limits over every project's jobs together (admin token)."""
    require_admin(caller)
    return _set(session, queue.GLOBAL, body, None)

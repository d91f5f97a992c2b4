"""Spend: the ledger's intervals (written by the allocation's activities) summed per day, per job
type and per project — the Cloud tab's spend card in one call."""

from __future__ import annotations

from datetime import date as date_
from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from api.auth import CallerDep
from api.deps import ReadSessionDep
from api.responses import json_response
from store import connections, spend
from store.models import utcnow


class SpendDayOut(BaseModel):
    date: date_  # a UTC day
    cost: float = Field(description="$ accrued that day: each interval's $/hr × its hours within the day")


class SpendJobTypeOut(BaseModel):
    job_type: str = Field(description="the workload type the machines served; `manual`: allocated by hand")
    cost: float


class SpendProjectOut(BaseModel):
    project: str
    cost: float


class SpendOut(BaseModel):
    """The Cloud tab's spend card in one answer: daily totals (zero-filled), by job type, by project."""

    days: int
    currency: str = "USD"
    daily: list[SpendDayOut] = Field(description="one row per UTC day of the window, oldest first")
    by_job_type: list[SpendJobTypeOut] = Field(description="the window's cost per job type, largest first")
    by_project: list[SpendProjectOut] = Field(
        description="the window's cost per project, largest first: every project for the admin token, "
                    "its own for a project token")
    total: float
    empty: bool = Field(description="true until a provider is connected and spend was recorded: the page "
                                    "hides the card")
    reason: str | None = Field(default=None, description="why it is empty")

router = APIRouter(prefix="/spend", tags=["spend"])

MAX_DAYS = 90


def _cents(x: float) -> float:
    return round(x, 6)  # sub-cent precision kept; float noise dropped


@router.get("", response_model=SpendOut)
def get_spend(session: ReadSessionDep, caller: CallerDep,
              days: Annotated[int, Query(ge=1, le=MAX_DAYS, description="the window: the last N UTC days, "
                                                                       "today included")] = 30) -> Response:
    """Daily cost over the last `days` days (zero-filled), by job type and by project, for the caller's
    project; `by_project` lists every project for the admin token, the own one for a project token.
    A machine costs its offer's $/hr from when the cloud accepted the create until the cloud showed
    it gone (a running one up to now). `empty` (with `reason`) until a provider is connected in the
    project and spend was recorded."""
    now = utcnow()
    # Every project's day costs for the admin token (its by_project lists them all), read once.
    costs = spend.day_costs(session, days=days, now=now, projects=None if caller.admin else [caller.project])
    mine = spend.summarize_day_costs([c for c in costs if c.project == caller.project], days, now)
    by_project = spend.summarize_day_costs(costs, days, now).by_project if caller.admin else mine.by_project
    reason = None
    if not connections.any_connected(session, caller.project):
        reason = f"no provider is connected in project {caller.project!r}"
    elif mine.total == 0.0 and not spend.any_recorded(session, [caller.project]):  # no cost: any at all?
        reason = f"no spend was recorded in project {caller.project!r}"
    return json_response(SpendOut(
        days=days,
        daily=[SpendDayOut(date=d, cost=_cents(c)) for d, c in mine.daily],
        by_job_type=[SpendJobTypeOut(job_type=k, cost=_cents(c))
                     for k, c in sorted(mine.by_job_type.items(), key=lambda kv: (-kv[1], kv[0]))],
        by_project=[SpendProjectOut(project=k, cost=_cents(c))
                    for k, c in sorted(by_project.items(), key=lambda kv: (-kv[1], kv[0]))],
        total=_cents(mine.total), empty=reason is not None, reason=reason))

"""The project's daily budget (built in, off until set): once today's spend (the ledger, UTC day)
reaches it, POST /instances refuses new allocations, naming the budget. Machines already running
are not touched."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field
from sqlmodel import Session

from api.auth import CallerDep
from api.deps import SessionDep
from api.fields import Strict
from store import policies, spend
from store.models import utcnow

router = APIRouter(prefix="/budget", tags=["budget"])


class BudgetIn(Strict):
    daily_usd: float | None = Field(gt=0, le=10_000_000,
                                    description="$ per UTC day; null turns the budget off")


class BudgetOut(BaseModel):
    daily_usd: float | None = Field(description="null: no budget")
    spent_today: float = Field(description="the project's spend since UTC midnight")
    reached: bool = Field(description="new allocations are refused until tomorrow (UTC)")


def budget_of(session: Session, project: str) -> BudgetOut:
    row = policies.get_budget(session, project)
    spent = round(spend.spent_today(session, project, utcnow()), 6)
    return BudgetOut(daily_usd=row.daily_usd if row else None, spent_today=spent,
                     reached=row is not None and spent >= row.daily_usd)


def refuse_over_budget(session: Session, project: str) -> None:
    """A 409 naming the budget when the project's spend today has reached it."""
    why = policies.budget_refusal(session, project, utcnow())
    if why is not None:
        raise HTTPException(status.HTTP_409_CONFLICT, why)


@router.get("", response_model=BudgetOut)
def get_budget(session: SessionDep, caller: CallerDep) -> BudgetOut:
    return budget_of(session, caller.project)


@router.put("", response_model=BudgetOut)
def put_budget(body: BudgetIn, session: SessionDep, caller: CallerDep) -> BudgetOut:
    """Set the daily budget (`daily_usd`: null turns it off)."""
    policies.set_budget(session, caller.project, body.daily_usd)
    return budget_of(session, caller.project)

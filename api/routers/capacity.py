"""Capacity memory (store/capacity.py): `GET /api/compute/capacity` lists the capacity and quota
refusals still remembered on the project's connections — what planning tries last, since when, and
until when. Another project's connections are never shown (their memory is theirs)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.auth import CallerDep
from api.deps import SessionDep
from api.fields import Timestamp
from api.pagination import Keyset, Page, PageDep
from store import capacity
from store.models import CapacityRefusal, utcnow

router = APIRouter(prefix="/capacity", tags=["capacity"])

# Newest first: the refusal run that began last.
KEYSET = Keyset("capacity", CapacityRefusal.first_at, CapacityRefusal.id, descending=True)


class RefusalOut(BaseModel):
    """One remembered refusal: its scope (a field left null covers every value), what refused, how
    often since when, and when it is forgotten."""

    id: str
    provider: str
    connection_id: str
    region: str
    zone: str | None = Field(description="null: every zone of the region")
    instance_type: str | None = Field(description="null: every instance type")
    kind: str = Field(description="capacity | quota")
    reason: str = Field(description="the cloud's message (its first 500 characters)")
    refusals: int = Field(description="refusals in a row while remembered")
    first_at: Timestamp
    last_at: Timestamp
    until: Timestamp = Field(description="forgotten then, unless refused again (which doubles the span, "
                                         "up to an hour) or cleared earlier by a create there")

    @classmethod
    def of(cls, row: CapacityRefusal) -> RefusalOut:
        return cls(id=row.id, provider=row.provider, connection_id=row.connection_id, region=row.region,
                   zone=row.zone, instance_type=row.instance_type, kind=row.kind, reason=row.reason,
                   refusals=row.refusals, first_at=capacity.aware(row.first_at),
                   last_at=capacity.aware(row.last_at), until=capacity.aware(row.until))


@router.get("", response_model=Page[RefusalOut])
def list_capacity(session: SessionDep, caller: CallerDep, page: PageDep) -> Page[RefusalOut]:
    """The refusals remembered now on the project's connections, newest first."""
    rows, following = KEYSET.fetch(session, capacity.live_in_project(caller.project, utcnow()), page)
    return Page(items=[RefusalOut.of(r) for r in rows], next_cursor=following)


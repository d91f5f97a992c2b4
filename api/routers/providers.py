"""The Compute page's "Connected providers" section: one row per backend of the caller's project,
in one call — what it is, its health, what it runs and what that costs per hour.

Health is read, never measured here: the Schedule `gpuprov-health` runs HealthWorkflow
(workflows/health.py), which verifies every connected cloud and records the answer on its
connection. A row's `status`:

- `pending`: connected, not checked yet (the first check runs within GPUPROV_HEALTH_INTERVAL_S);
- `healthy`: the last check's verify() answered (`latency_ms` says how fast);
- `degraded`: the last check's verify() failed or did not answer in time; `reason` says why;
- `removing`: a DELETE is terminating its instances; the row goes once the cloud shows them gone.

Cloud backends are connections (`kind: cloud`). SSH fleets (issue 10, deliverable 6) will be rows
of `kind: ssh_fleet` in this same list, with `host_count` and `gpu_count` where clouds have
`instance_count` and `cost_per_hour`, and their own DELETE branch (drop the configuration, touch
no host); neither exists yet.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from fastapi import APIRouter, status
from pydantic import BaseModel, Field
from sqlmodel import select
from starlette.convertors import StringConvertor, register_url_convertor

from api.deps import CallerDep, DepsDep, SessionDep
from api.pagination import Keyset, Page, PageDep
from api.routers import connections
from api.schemas import ConnectionRemoval, aware
from messages.enums import ConnectionStatus
from messages.health import HealthStatus
from providers import registry
from store import repo
from store.models import Connection

router = APIRouter(prefix="/providers", tags=["providers"])


class _BackendId(StringConvertor):
    """A backend id in a path: any segment but `catalog`, which is GET /providers/catalog's own (so
    that path advertises only its GET, not this router's DELETE, when asked which methods it takes)."""

    regex = "(?!catalog$)[^/]+"


register_url_convertor("backend_id", _BackendId())

# Oldest first, like the connections list (the order they were connected in).
KEYSET = Keyset("providers", Connection.created_at, Connection.id, descending=False)


class ProviderStatus(StrEnum):
    PENDING = "pending"  # never checked yet
    HEALTHY = HealthStatus.HEALTHY.value
    DEGRADED = HealthStatus.DEGRADED.value  # with `reason`
    REMOVING = ConnectionStatus.REMOVING.value  # being disconnected


class ProviderOut(BaseModel):
    """One connected backend, as the Compute page's "Connected providers" card shows it."""

    id: str = Field(description="the connection id (DELETE /api/compute/providers/{id} removes it)")
    kind: Literal["cloud"] = Field("cloud", description="`cloud`; SSH fleets will be `ssh_fleet`")
    provider: str = Field(description="the cloud's key, e.g. `lambda`")
    name: str = Field(description="the cloud's display name")
    tagline: str = Field(description="one line on what the cloud is")
    label: str = Field(description="the connection's own name (given when connected)")
    status: ProviderStatus
    reason: str | None = Field(None, description="why it is degraded (or what removing it waits for)")
    checked_at: datetime | None = Field(None, description="when the last health check asked it")
    latency_ms: int | None = Field(None, description="how long the last check's verify() took")
    instance_count: int = Field(description="its live instances (not terminated, failed or lost)")
    cost_per_hour: float = Field(description="their summed $/hr, at the prices they were launched at")


def _row(c: Connection, totals: dict[str, tuple[int, float]]) -> ProviderOut:
    try:
        caps = registry.capabilities(c.provider)
        name, tagline = caps.display_name, caps.tagline
    except Exception:  # noqa: BLE001 — a cloud no longer registered here still lists its connection
        name, tagline = c.provider, ""
    count, cost = totals.get(c.id, (0, 0.0))
    if c.status == ConnectionStatus.REMOVING:
        state, reason = ProviderStatus.REMOVING, c.error
    elif c.health_status is None:
        state, reason = ProviderStatus.PENDING, None
    else:
        state = ProviderStatus(c.health_status)
        reason = c.health_reason if state == ProviderStatus.DEGRADED else None
    return ProviderOut(id=c.id, provider=c.provider, name=name, tagline=tagline, label=c.name, status=state,
                       reason=reason, checked_at=aware(c.health_checked_at), latency_ms=c.health_latency_ms,
                       instance_count=count, cost_per_hour=round(cost, 6))


@router.get("", response_model=Page[ProviderOut])
def list_providers(session: SessionDep, caller: CallerDep, page: PageDep) -> Page[ProviderOut]:
    """The project's connected backends, oldest first, each with its last health check and its live
    instances' count and $/hr: two queries per page, no cloud called."""
    rows, following = KEYSET.fetch(session, select(Connection).where(Connection.project == caller.project),
                                   page)
    totals = repo.live_totals(session, [c.id for c in rows])
    # SSH fleets (not built yet) join this list here, as rows of kind `ssh_fleet`.
    return Page(items=[_row(c, totals) for c in rows], next_cursor=following)


@router.delete("/{connection_id:backend_id}", status_code=status.HTTP_202_ACCEPTED,
               response_model=ConnectionRemoval,
               responses={404: {"description": "unknown connection"},
                          503: {"description": "Temporal unreachable"}})
async def delete_provider(connection_id: str, deps: DepsDep, caller: CallerDep) -> ConnectionRemoval:
    """Disconnect a cloud backend: what `DELETE /api/compute/connections/{id}` does —
    DisconnectWorkflow terminates its live instances (each verified gone), then deletes it; the row
    shows `removing` until then. (An SSH fleet's DELETE, once fleets exist, touches no host.)"""
    return await connections.delete_connection(connection_id, deps, caller)

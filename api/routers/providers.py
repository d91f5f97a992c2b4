"""The Compute page's "Connected providers" section: one row per backend of the caller's project,
in one call — what it is, its health, what it runs and what that costs per hour.

Health is read, never measured here: the Schedule `gpuprov-health` runs HealthWorkflow
(workflows/health.py), which verifies every connected cloud and records the answer on its
connection. A row's `status`:

- `pending`: connected, not checked yet (the first check runs within GPUPROV_HEALTH_INTERVAL_S);
- `healthy`: the last check's verify() answered (`latency_ms` says how fast);
- `degraded`: the last check's verify() failed or did not answer in time; `reason` says why;
- `removing`: a DELETE is terminating its instances; the row goes once the cloud shows them gone.

Cloud backends are connections (`kind: cloud`). SSH fleets (api/routers/fleets.py) are rows of
`kind: ssh_fleet` in the same list, merged in creation order, with `host_count` and `gpu_count`
where clouds have `instance_count` and `cost_per_hour`. A fleet's status comes from its hosts'
last probe (on save, and every health run re-probes every fleet): `pending` while a host has no
answer yet, `degraded` naming each unreachable host and why, else `healthy`. DELETE of a fleet
drops its configuration at once and touches no host.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Literal

import sqlalchemy as sa
from fastapi import APIRouter, Response, status
from pydantic import BaseModel, Field
from sqlmodel import col
from starlette.convertors import StringConvertor, register_url_convertor

from api.auth import CallerDep
from api.deps import DepsDep, ReadSessionDep, in_thread
from api.fields import Timestamp, aware
from api.pagination import Keyset, Page, PageDep, encode_cursor
from api.responses import json_response
from api.routers import connections
from api.routers import fleets as fleet_routes
from api.shared_bodies import ConnectionRemoval
from messages.enums import ConnectionStatus
from messages.health import HealthStatus
from providers import listing, registry
from providers.future import FUTURE, SSH_FLEET
from store import connections as connection_store
from store import fleets
from store.models import Connection, Fleet

router = APIRouter(prefix="/providers", tags=["providers"])


class _BackendId(StringConvertor):
    """A backend id in a path: any segment but `catalog`, which is GET /providers/catalog's own (so
    that path advertises only its GET, not this router's DELETE, when asked which methods it takes)."""

    regex = "(?!catalog$)[^/]+"


register_url_convertor("backend_id", _BackendId())

# Oldest first, like the connections list (the order they were connected in).
KEYSET = Keyset("providers", Connection.created_at, Connection.id, descending=False)
# Fleets page with the same cursor: the two lists are merged by (created_at, id).
FLEET_KEYSET = Keyset("providers", Fleet.created_at, Fleet.id, descending=False)


class ProviderStatus(StrEnum):
    PENDING = "pending"  # never checked yet
    HEALTHY = HealthStatus.HEALTHY.value
    DEGRADED = HealthStatus.DEGRADED.value  # with `reason`
    REMOVING = ConnectionStatus.REMOVING.value  # being disconnected


class ProviderOut(BaseModel):
    """One connected backend, as the Compute page's "Connected providers" card shows it: a cloud
    connection, or an SSH fleet."""

    id: str = Field(description="the connection's or fleet's id (DELETE /api/compute/providers/{id} "
                                "removes it)")
    kind: Literal["cloud", "ssh_fleet"] = Field(description="`cloud` (a connection) or `ssh_fleet`")
    provider: str = Field(description="the cloud's key, e.g. `lambda`; `ssh` for a fleet")
    name: str = Field(description="the cloud's display name")
    tagline: str = Field(description="one line on what the cloud is")
    label: str = Field(description="the connection's or fleet's own name")
    status: ProviderStatus
    reason: str | None = Field(None, description="why it is degraded (or what removing it waits for)")
    checked_at: Timestamp | None = Field(None, description="when the last health check (or, for a fleet, "
                                                          "probe) asked it")
    latency_ms: int | None = Field(None, description="how long the last check's verify() took (clouds)")
    instance_count: int | None = Field(None, description="clouds: its live instances (not terminated, "
                                                         "failed or lost)")
    cost_per_hour: float | None = Field(None, description="clouds: their summed $/hr, at the prices they "
                                                          "were launched at")
    host_count: int | None = Field(None, description="fleets: its hosts")
    gpu_count: int | None = Field(None, description="fleets: GPUs on the hosts that answered their last "
                                                    "probe")


# The columns each row reads, as records (store/records.py): no ORM object per row, and never a
# connection's sealed credentials, which the list does not show.
_CONNECTION_COLUMNS: tuple[Any, ...] = (
    Connection.id, Connection.provider, Connection.name, Connection.status, Connection.error,
    Connection.health_status, Connection.health_reason, Connection.health_checked_at,
    Connection.health_latency_ms, Connection.created_at)
_FLEET_COLUMNS: tuple[Any, ...] = (Fleet.id, Fleet.name, Fleet.created_at)
# The project's connections and fleets (`project` bound), each list's page read by its keyset.
_CONNECTIONS = sa.select(*_CONNECTION_COLUMNS).where(col(Connection.project) == sa.bindparam("project"))
_FLEETS = sa.select(*_FLEET_COLUMNS).where(col(Fleet.project) == sa.bindparam("project"))


def _row(c: Any, totals: dict[str, tuple[int, float]]) -> ProviderOut:
    """A connection's row; `c` a record of _CONNECTION_COLUMNS."""
    try:
        card = listing.of(registry.adapter_class(c.provider))
        name, tagline = card.display_name or c.provider, card.tagline
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
    return ProviderOut(id=c.id, kind="cloud", provider=c.provider, name=name, tagline=tagline, label=c.name,
                       status=state,
                       reason=reason, checked_at=aware(c.health_checked_at), latency_ms=c.health_latency_ms,
                       instance_count=count, cost_per_hour=round(cost, 6))


def _fleet_row(f: Any, hosts: Sequence[Any]) -> ProviderOut:
    """A fleet's row; `f` a record of _FLEET_COLUMNS, `hosts` of fleets.HOST_HEALTH_COLUMNS."""
    probed = [h for h in hosts if h.probed_at is not None]
    down = [h for h in probed if not h.reachable]
    reason = None
    if down:
        state = ProviderStatus.DEGRADED
        reason = "unreachable: " + "; ".join(f"{h.host} ({h.reason or 'no answer'})" for h in down)
    elif len(probed) < len(hosts):
        state = ProviderStatus.PENDING  # saved, or a host added, and not probed yet
    else:
        state = ProviderStatus.HEALTHY
    card = FUTURE[SSH_FLEET]
    checked = max((aware(h.probed_at) for h in probed), default=None)  # type: ignore[type-var]
    return ProviderOut(id=f.id, kind="ssh_fleet", provider=SSH_FLEET, name=card.name, tagline=card.tagline,
                       label=f.name, status=state, reason=reason, checked_at=checked,
                       host_count=len(hosts), gpu_count=sum(h.gpu_count or 0 for h in probed if h.reachable))


@router.get("", response_model=Page[ProviderOut])
def list_providers(session: ReadSessionDep, caller: CallerDep, page: PageDep) -> Response:
    """The project's connected backends — cloud connections and SSH fleets — oldest first, each
    with its last health check (a fleet: its hosts' last probe), a cloud's live instances' count and
    $/hr, a fleet's host and GPU counts: a handful of queries per page, no cloud or host called."""
    project = caller.project
    conns, more_conns = KEYSET.fetch_built(session, _CONNECTIONS, {"project": project}, page)
    fleet_rows, more_fleets = FLEET_KEYSET.fetch_built(session, _FLEETS, {"project": project}, page)
    # Each list gave up to `limit` rows after the cursor; the first `limit` of both, merged, are this page.
    # (record, is a cloud connection), oldest first.
    merged: list[tuple[Any, bool]] = sorted(
        [*((c, True) for c in conns), *((f, False) for f in fleet_rows)],
        key=lambda entry: (aware(entry[0].created_at), entry[0].id))
    shown, rest = merged[:page.limit], merged[page.limit:]
    following = None
    if rest or more_conns or more_fleets:
        last = shown[-1][0]
        following = encode_cursor(KEYSET.kind, t=last.created_at.isoformat(), i=last.id)
    totals = connection_store.live_totals(session, project, [r.id for r, cloud in shown if cloud])
    hosts = fleets.host_health_by_fleet(session, [r.id for r, cloud in shown if not cloud])
    return json_response(Page(items=[_row(r, totals) if cloud else _fleet_row(r, hosts.get(r.id, []))
                                     for r, cloud in shown], next_cursor=following))


@router.delete("/{connection_id:backend_id}", status_code=status.HTTP_202_ACCEPTED,
               response_model=ConnectionRemoval,
               responses={200: {"description": "an SSH fleet: its configuration is dropped (status "
                                               "`removed`); no host is contacted"},
                          404: {"description": "unknown connection or fleet"},
                          409: {"description": "an SSH fleet with live allocations (down them first)"},
                          503: {"description": "Temporal unreachable"}})
async def delete_provider(connection_id: str, deps: DepsDep, caller: CallerDep,
                          response: Response) -> ConnectionRemoval:
    """Remove a backend. A cloud: what `DELETE /api/compute/connections/{id}` does —
    DisconnectWorkflow terminates its live instances (each verified gone), then deletes it; the row
    shows `removing` until then (202). An SSH fleet: its configuration and probe answers are dropped
    at once (200, `removed`); no host is contacted or changed."""
    if await in_thread(fleet_routes.forget_fleet, deps, caller.project, connection_id):
        response.status_code = status.HTTP_200_OK
        return ConnectionRemoval(id=connection_id, status="removed")
    return await connections.delete_connection(connection_id, deps, caller)

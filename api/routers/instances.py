"""Instances: resolve where planning may look, start AllocationWorkflow, record the row; reads come
from the SQL projection.

Rows cannot diverge from workflows: the row is written only after its workflow started (if the API
dies in between, the workflow's own record writes it), and a terminate is sent to the workflow
before anything is written (the workflow records `terminating` itself)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, Literal, cast

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from pydantic import BaseModel, Field, TypeAdapter
from sqlalchemy.orm import object_session
from sqlmodel import Session, col

from api import idempotency as idem
from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, ReadSessionDep, in_thread, open_session
from api.errors import shown
from api.fields import Timestamp, aware
from api.pagination import Keyset, Page, PageDep
from api.placement import resolve
from api.responses import json_page
from api.routers.budget import refuse_over_budget
from api.routers.defaults import lease_hours_for, with_project_default
from api.shared_bodies import InstanceCreate, instance_gpu_label
from api.temporal import WorkflowUnavailable
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput
from messages.enums import AllocationStatus
from messages.ids import allocation_workflow_id
from providers import host_keys, registry
from providers.base import InvalidRequest, SelfEnd
from store import allocations, connections, ids, instances, picks
from store import host_keys as store_host_keys
from store.models import Attempt, Instance, InstanceEvent, table_of

# The `?status=` filter: a status, or `active` — every status in which a machine may exist and bill
# (provisioning, ready, terminating): the Compute page's "Active cloud instances".
ACTIVE = "active"
InstanceStatusFilter = Literal["active", "provisioning", "ready", "terminating", "terminated", "failed",
                               "lost"]


class InstanceAccepted(BaseModel):
    id: str
    status: str


class HostKeyOut(BaseModel):
    """A host key gpuprov pinned (it checks every login against it): for the user's own SSH."""

    fingerprint: str  # "SHA256:…"
    known_hosts: str  # "<host or [host]:port> <keytype> <base64>", a line for a known_hosts file

    @classmethod
    def of(cls, host: str, port: int, key_line: str | None) -> HostKeyOut | None:
        if not key_line:
            return None
        return cls(fingerprint=str(host_keys.fingerprint(key_line)),
                   known_hosts=store_host_keys.known_hosts_line(host, port, key_line))


class SshBastion(BaseModel):
    """The proxy jump a fleet host is reached through (`ssh -J user@host:port`), with its pinned key."""

    host: str
    port: int
    user: str
    host_key: HostKeyOut | None = None


class Ssh(BaseModel):
    host: str
    port: int
    user: str
    bastion: SshBastion | None = None  # a fleet host behind a bastion


class AttemptOut(BaseModel):
    seq: int
    provider: str
    instance_type: str
    region: str
    spot: bool
    price_per_hour: float
    outcome: str
    reason: str | None
    at: Timestamp | None

    @classmethod
    def of(cls, row: Attempt) -> AttemptOut:
        return cls(seq=row.seq, provider=row.provider, instance_type=row.instance_type, region=row.region,
                   spot=row.spot, price_per_hour=row.price_per_hour, outcome=row.outcome, reason=row.reason,
                   at=aware(row.at))


class EventOut(BaseModel):
    """One status/phase transition; `id` orders them (pass the last one seen as `after`)."""

    id: int
    status: str
    phase: str
    at: Timestamp | None

    @classmethod
    def of(cls, row: InstanceEvent) -> EventOut:
        assert row.id is not None
        return cls(id=row.id, status=row.status, phase=row.phase, at=aware(row.at))


class InstanceOut(BaseModel):
    id: str
    name: str | None
    project: str
    cloud: str
    connection_id: str
    status: str  # provisioning|ready|failed|terminating|terminated
    phase: str
    requested: dict[str, Any]  # gpu, gpu_count, region, spot as asked
    instance_type: str | None
    region: str | None  # where it landed
    price_per_hour: float | None
    ssh: Ssh | None
    gpus: list[dict[str, Any]]
    attempts: list[AttemptOut] = Field(default_factory=list)
    events: list[EventOut] = Field(default_factory=list)
    error: str | None
    note: str | None
    created_at: Timestamp | None
    updated_at: Timestamp | None
    ready_at: Timestamp | None
    terminated_at: Timestamp | None
    gpu_label: str | None = None  # "2× NVIDIA H100 80GB HBM3" as found, else as asked ("2× H100")
    uptime_s: float | None = None  # since ready, while it is not ended
    # The machine's SSH host key once gpuprov has seen it (pinned: every login of gpuprov's is
    # checked against it); a fleet host's is the fleet's pin. `gpuprov ssh <id>` logs in with it.
    host_key: HostKeyOut | None = None
    # How the machine ends its own bill if its lease runs out with gpuprov gone (its cloud's
    # Capabilities.self_end): method "none" means such a machine is only reported, it keeps billing.
    self_end: SelfEnd | None = None
    lease_hours: float | None = None  # its lease (activities/lease.py); 0: off; None: never leased

    @classmethod
    def of(cls, row: Instance, attempts: list[Attempt] | None = None,
           events: list[InstanceEvent] | None = None,
           route: store_host_keys.MachineRoute | None = None) -> InstanceOut:
        fields = instance_fields(row, route, now=datetime.now(UTC))
        fields["attempts"] = [AttemptOut.of(a) for a in attempts or []]
        fields["events"] = [EventOut.of(e) for e in events or []]
        return cls.model_validate(fields)


def _self_end(cloud: str) -> SelfEnd | None:
    try:
        return registry.capabilities(cloud).self_end
    except (InvalidRequest, ImportError):  # a cloud unregistered or uninstalled since: the row still shows
        return None


def instance_fields(row: Instance, route: store_host_keys.MachineRoute | None, *, now: datetime,
                    self_end: Callable[[str], SelfEnd | None] = _self_end) -> dict[str, Any]:
    """An InstanceOut's fields as plain values (without attempts and events), for pydantic to validate:
    one by `InstanceOut.of`, a whole page at once by the list (one call into pydantic's core instead
    of a model built per row and per nested object: the list's largest cost, measured)."""
    ssh, host_key = None, None
    if row.ssh_host and row.ssh_port:
        route = route or _route_of(row)
        host_key = HostKeyOut.of(row.ssh_host, row.ssh_port, route.host_key)
        bastion = None
        if route.bastion is not None:
            b = route.bastion
            bastion = {"host": b.host, "port": b.port, "user": b.user,
                       "host_key": HostKeyOut.of(b.host, b.port, b.host_key)}
        ssh = {"host": row.ssh_host, "port": row.ssh_port, "user": row.ssh_user or "root", "bastion": bastion}
    return {
        "id": row.id, "name": row.name, "project": row.project, "cloud": row.provider,
        "connection_id": row.connection_id, "status": row.status, "phase": row.phase,
        "requested": {"gpu": row.gpu, "gpu_count": row.gpu_count, "region": row.region, "spot": row.spot},
        "instance_type": row.instance_type, "region": row.offer_region, "price_per_hour": row.price_per_hour,
        "ssh": ssh, "gpus": row.gpus_found or [], "error": row.error, "note": row.note,
        # naive (SQLite's) timestamps are UTC: the models' Timestamp fields say so as they validate
        "created_at": row.created_at, "updated_at": row.updated_at, "ready_at": row.ready_at,
        "terminated_at": row.terminated_at, "gpu_label": instance_gpu_label(row),
        "uptime_s": uptime_s(row, now), "host_key": host_key,
        "self_end": self_end(row.provider), "lease_hours": row.lease_hours,
    }


def _route_of(row: Instance) -> store_host_keys.MachineRoute:
    """The pinned keys (and a fleet host's bastion) of the instance's machine, read in the session
    the row was read in (a fleet host's pin is the fleet's); a row without one: its own pin."""
    # The cloud's case first: object_session() costs more than all the row's other fields together.
    session = object_session(row) if registry.is_fleet(row.provider) else None
    if session is None:
        return store_host_keys.MachineRoute(host_key=store_host_keys.pinned_key(row))
    return store_host_keys.route_of(session, row, fleet=True)  # type: ignore[arg-type]


def uptime_s(row: Instance, now: datetime) -> float | None:
    ready = aware(row.ready_at)
    if ready is None or row.status not in (AllocationStatus.READY, AllocationStatus.TERMINATING):
        return None
    return max(0.0, round((now - ready).total_seconds(), 1))

router = APIRouter(prefix="/instances", tags=["instances"])

INSTANCE_PAGE = TypeAdapter(Page[InstanceOut])
INSTANCE_COLUMNS = tuple(table_of(Instance).columns)  # the list's select

# Newest first; the keyset (created_at, id) keeps pages stable while allocations are added.
KEYSET = Keyset("instances", Instance.created_at, Instance.id, descending=True)


def _get(session: Session, project: str, instance_id: str) -> Instance:
    """The project's instance of that id: another project's answers the same 404 as an unknown id."""
    row = instances.get_instance(session, instance_id)
    if row is None or row.project != project:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no instance {shown(instance_id)}")
    return row


@dataclass
class Default:
    """A backend's picked default offer, applied to a request that named that backend alone."""

    instance_type: str | None = None
    note: str | None = None


def with_default(deps: AppDeps, project: str, body: InstanceCreate) -> tuple[InstanceCreate, Default]:
    """The request with its backend's default offer applied (POST /backends/{cloud}/pick), when it
    names one backend (`cloud`, `clouds` of one, or a `connection_id`), no GPU (nor GPU count), and
    no region or spot setting at odds with the pick: then planning considers only the picked
    instance type in its region. Otherwise the request as it came. Sync: call through `in_thread`."""
    if body.gpu is not None or body.gpu_count is not None:
        return body, Default()
    with open_session(deps) as session:
        if body.connection_id is not None:
            conn = connections.get_connection(session, body.connection_id)
            if conn is None or conn.project != project:
                return body, Default()  # resolve() answers the 404
            cloud = conn.provider
        elif body.cloud is not None:
            cloud = body.cloud
        elif body.clouds is not None and len(body.clouds) == 1:
            cloud = body.clouds[0]
        else:
            return body, Default()
        pick = picks.get_pick(session, project, cloud)
    if pick is None or body.region not in (None, pick.region) or body.spot not in (None, pick.spot):
        return body, Default()
    spot = " (spot)" if pick.spot else ""
    note = f"{cloud} default offer: {pick.instance_type} in {pick.region}{spot}"
    return (body.model_copy(update={"region": pick.region, "spot": pick.spot or None}),
            Default(instance_type=pick.instance_type, note=note))


# --------------------------------------------------------------------------- database work (sync)


def _instance(deps: AppDeps, project: str, instance_id: str) -> Instance | None:
    """The project's instance of that id; None for an unknown id or another project's."""
    with open_session(deps) as session:
        row = instances.get_instance(session, instance_id)
    return row if row is not None and row.project == project else None


def _update(deps: AppDeps, instance_id: str, **fields: object) -> None:
    with open_session(deps) as session:
        instances.update_instance(session, instance_id, **fields)


def _within_budget(deps: AppDeps, project: str) -> None:
    """409 naming the project's daily budget once today's spend has reached it."""
    with open_session(deps) as session:
        refuse_over_budget(session, project)


def k8s_api_networks(body: InstanceCreate, request: Request) -> list[str]:
    """Who the Kubernetes API is opened to: as asked, else the address the request came from (as the
    server sees it: behind a proxy, uvicorn's FORWARDED_ALLOW_IPS decides); nobody without k3s."""
    if not body.k3s:
        return []
    if body.k8s_api_from is not None:
        return body.k8s_api_from
    try:
        peer = ipaddress.ip_address(request.client.host if request.client else "")
    except ValueError:  # not an address (an in-process test client): nobody
        return []
    return [str(ipaddress.ip_network(peer))]


# --------------------------------------------------------------------------- routes


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=InstanceAccepted,
             responses={404: {"description": "unknown connection_id"},
                        409: {"description": "not connected, the project's daily budget is reached, or "
                                             "an allocation whose key ended unrecorded"},
                        422: {"description": "invalid, refused by every candidate cloud, or an "
                                             "Idempotency-Key reused with another request"},
                        503: {"description": "Temporal unreachable: nothing was started or recorded"}})
async def create_instance(body: InstanceCreate, deps: DepsDep, caller: CallerDep, http_request: Request,
                          idempotency_key: idem.IdempotencyKey = None) -> InstanceAccepted:
    """Allocate a machine on the cheapest offer of every connection the request allows. With an
    Idempotency-Key the allocation id derives from the key: a retry answers with the same id (and
    its status now) and starts nothing twice."""
    key = idempotency_key
    project = caller.project
    scope = idem.scope_of("instances", project)
    # max_hours, k8s_api_from, lease_hours only when given: a retry keeps the fingerprint stored before
    # they existed
    later = ("max_hours", "k8s_api_from", "lease_hours")
    fingerprint = idem.fingerprint(body.model_dump(
        mode="json", exclude={f for f in later if getattr(body, f) is None}))
    if key is None:
        allocation_id = ids.new_id()
    else:
        allocation_id = idem.derived_id("instance", project, key)
        if await in_thread(idem.check, deps, scope, key, fingerprint):
            row = await in_thread(_instance, deps, project, allocation_id)
            if row is not None:  # its workflow started (the row comes after the start): answer again
                return InstanceAccepted(id=row.id, status=row.status)
    await in_thread(_within_budget, deps, project)
    # Naming no cloud: the project's default cloud and region, if it has one (PUT /defaults).
    body, project_default = await in_thread(with_project_default, deps, project, body)
    # The backend's picked default offer (fingerprinted above as the request came, not as filled in).
    body, default = await in_thread(with_default, deps, project, body)
    # Everything that can be refused is refused here, before a workflow (or a cloud call) exists.
    plan = await in_thread(resolve, deps, project, body)
    if default.note is not None:
        plan.notes.insert(0, default.note)
    if project_default is not None:
        plan.notes.insert(0, project_default)
    if key is not None:
        await in_thread(idem.claim, deps, scope, key, fingerprint, allocation_id)
    first = plan.targets[0]
    request = AllocateRequest(
        allocation_id=allocation_id, connection_id=first.connection_id, cloud=first.cloud,
        targets=plan.targets, notes=plan.notes, project=project, name=body.name, gpu=body.gpu,
        gpu_count=body.gpu_count, region=body.region, spot=body.spot, instance_type=default.instance_type,
        ports=body.ports, image=body.image, k3s=body.k3s, ssh_public_keys=body.ssh_public_keys,
        max_hours=body.max_hours, k8s_api_from=k8s_api_networks(body, http_request),
        lease_hours=await in_thread(lease_hours_for, deps, project, body), timing=deps.allocation_timing)
    workflow_id = allocation_workflow_id(allocation_id)
    try:
        # Once per id: a retry joins the run the first attempt started; an id that ran never runs again.
        running = await deps.workflows.start(wf.ALLOCATION, AllocationInput(request=request),
                                             workflow_id=workflow_id, once=True)
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    if not running:  # it ran and closed; its own record wrote the row unless it never got that far
        row = await in_thread(_instance, deps, project, allocation_id)
        if row is None:
            raise HTTPException(status.HTTP_409_CONFLICT,
                                f"allocation {allocation_id} ended before it recorded anything")
        return InstanceAccepted(id=row.id, status=row.status)
    # After the start: the list shows the request at once, even before the worker picks it up.
    current = await in_thread(allocations.record_started, deps.engine, request, workflow_id)
    return InstanceAccepted(id=allocation_id, status=current)


def list_query(project: str, status_: str | None) -> tuple[sa.Select[Any], dict[str, Any]]:
    """The list's select of the project's instances (`status_`: one status, `active` or None), built
    once per filter, and the values it binds."""
    if status_ is None or status_ == ACTIVE:
        return _list_statement(status_), {"project": project}
    return _list_statement(_ONE_STATUS), {"project": project, "status": status_}


_ONE_STATUS = "one status"


@cache
def _list_statement(kind: str | None) -> sa.Select[Any]:
    """The project's instances (`project` bound): all (None), the live (ACTIVE), or those of one
    status (_ONE_STATUS: `status` bound)."""
    stmt = sa.select(*INSTANCE_COLUMNS).where(col(Instance.project) == sa.bindparam("project"))
    if kind == ACTIVE:
        return stmt.where(instances.is_live())  # read in page order from the live rows' index
    if kind is not None:
        return stmt.where(col(Instance.status) == sa.bindparam("status"))
    return stmt


@router.get("", response_model=Page[InstanceOut])
def list_instances(
    session: ReadSessionDep,
    caller: CallerDep,
    page: PageDep,
    status_: Annotated[InstanceStatusFilter | None, Query(alias="status")] = None,
) -> Response:
    """The project's instances, newest first (without attempts and events: GET one for those).
    `status=active`: every one whose machine may exist and bill (provisioning, ready, terminating)."""
    found, following = KEYSET.fetch_built(session, *list_query(caller.project, status_), page)
    # Rows of Instance's own columns, each read by attribute as an Instance is: what the helpers
    # below read of one. (A fleet row's route comes from `fleet_routes`, never from its session.)
    rows = cast(list[Instance], found)
    routes = store_host_keys.fleet_routes(session, [r for r in rows if registry.is_fleet(r.provider)])
    now, self_end = datetime.now(UTC), cache(_self_end)  # one clock and one lookup per cloud a page
    return json_page(INSTANCE_PAGE, [instance_fields(i, routes.get(i.id), now=now, self_end=self_end)
                                     for i in rows], following)


@router.get("/{instance_id}", response_model=InstanceOut, responses={404: {"description": "unknown"}})
def get_instance(instance_id: str, session: ReadSessionDep, caller: CallerDep) -> InstanceOut:
    row = _get(session, caller.project, instance_id)
    return InstanceOut.of(row, list(instances.attempts_of(session, instance_id)),
                          list(instances.events_of(session, instance_id)))


@router.post("/{instance_id}/terminate", status_code=status.HTTP_202_ACCEPTED,
             response_model=InstanceAccepted,
             responses={404: {"description": "unknown"}, 503: {"description": "Temporal unreachable"}})
async def terminate_instance(instance_id: str, deps: DepsDep, caller: CallerDep) -> InstanceAccepted:
    """Terminate: the allocation's `terminate` update, which ends once the cloud shows the machine
    gone. Idempotent: a repeated request is accepted again and joins the same teardown."""
    row = await in_thread(_instance, deps, caller.project, instance_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no instance {shown(instance_id)}")
    if not AllocationStatus(row.status).live:
        return InstanceAccepted(id=instance_id, status=row.status)  # nothing is on the cloud
    try:
        # The update first, and nothing written here: the workflow records `terminating` itself, so
        # an API that dies now leaves nothing claiming a teardown that was never asked for.
        if not await deps.workflows.request_update(row.workflow_id, wf.ALLOCATION.terminate):
            # its run has closed: as it ended
            ended = await in_thread(_instance, deps, caller.project, instance_id)
            return InstanceAccepted(id=instance_id,
                                    status=ended.status if ended else AllocationStatus.TERMINATED)
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    return InstanceAccepted(id=instance_id, status=AllocationStatus.TERMINATING)

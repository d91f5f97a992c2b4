"""Pools: a desired number of identical machines of one cloud, per project. PUT writes the desired
spec and starts (or wakes, with its `reconcile` update) the pool's ScaleWorkflow, which reconciles the
cloud to it; GET shows the desired size beside what the last reconcile counted on the cloud; DELETE
scales to 0 and the workflow forgets the pool once the cloud shows none of its machines.

The machine shape (cloud, GPU, count, region, spot, k3s) is fixed when the pool is made, so its
machines stay identical; min, max, size and the SSH keys may change."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, status
from pydantic import BaseModel, Field, field_validator, model_validator
from sqlmodel import select

from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, SessionDep, in_thread, open_session
from api.errors import shown
from api.fields import CloudId, Printable, Strict, Timestamp, openssh_key_lines
from api.pagination import Keyset, Page, PageDep
from api.placement import refusal
from api.temporal import WorkflowUnavailable
from messages import workflows as wf
from messages.pool import MAX_POOL_SIZE, POOL_ID_LENGTH, POOL_NAME, PoolStatus, ScaleInput, scale_workflow_id
from providers.base import LaunchRequirements
from store import connections, ids, pools
from store.models import Pool

log = logging.getLogger(__name__)
router = APIRouter(prefix="/pools", tags=["pools"])

KEYSET = Keyset("pools", Pool.created_at, Pool.id, descending=False)
PoolName = Annotated[str, Path(description="lowercase letters, digits and '-', at most 16 characters "
                                           "(it is part of each machine's name on the cloud)")]
Size = Annotated[int, Field(ge=0, le=MAX_POOL_SIZE)]
SHAPE = ("cloud", "gpu", "gpu_count", "region", "spot", "k3s")


class PoolIn(Strict):
    cloud: CloudId
    gpu: Annotated[str, Field(min_length=1, max_length=40), Printable] | None = None
    gpu_count: Annotated[int, Field(ge=1, le=64)] | None = None
    region: Annotated[str, Field(min_length=1, max_length=64), Printable] | None = None
    spot: bool | None = None
    k3s: bool = False
    min: Size = 0
    max: Size
    size: Size
    ssh_public_keys: list[str] = Field(default_factory=list, max_length=20, description=(
        "keys allowed to log in to every machine (the installation's own key is always added)"))

    @field_validator("ssh_public_keys")
    @classmethod
    def _openssh_keys(cls, keys: list[str]) -> list[str]:
        return openssh_key_lines(keys)

    @model_validator(mode="after")
    def _bounds(self) -> PoolIn:
        if self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        if self.size > self.max:
            raise ValueError(f"size {self.size} is above max {self.max}")
        if self.size < self.min:
            raise ValueError(f"size {self.size} is below min {self.min}")
        return self


class PoolMachineOut(BaseModel):
    allocation_id: str  # an instance id: GET /instances/{id} has its phases and attempts
    slot: int
    generation: int
    on_cloud: bool  # counted on the cloud by the last reconcile (False: not created yet)
    provider: str | None
    instance_id: str | None  # the cloud's id
    status: str  # its allocation's status (provisioning, ready, terminating...; "stray": no allocation)
    error: str | None


class PoolOut(BaseModel):
    name: str
    cloud: str
    gpu: str | None
    gpu_count: int | None
    region: str | None
    spot: bool | None
    k3s: bool
    min: int
    max: int
    size: int  # desired
    status: str  # active | deleting
    current: int  # machines the last reconcile counted on the cloud
    machines: list[PoolMachineOut]
    reconciled_at: Timestamp | None
    errors: list[str]
    created_at: Timestamp | None

    @classmethod
    def of(cls, row: Pool) -> PoolOut:
        machines = [PoolMachineOut.model_validate(m) for m in row.machines or []]
        return cls(name=row.name, cloud=row.cloud, gpu=row.gpu, gpu_count=row.gpu_count, region=row.region,
                   spot=row.spot, k3s=row.k3s, min=row.min_size, max=row.max_size, size=row.size,
                   status=row.status, current=sum(1 for m in machines if m.on_cloud), machines=machines,
                   reconciled_at=row.reconciled_at, errors=list(row.errors or []), created_at=row.created_at)


# --------------------------------------------------------------------------- database work (sync)


def _check_name(name: str) -> None:
    if not POOL_NAME.match(name):
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            "a pool name is 1-16 lowercase letters, digits and '-', not starting or "
                            "ending with '-'")


def _get(deps: AppDeps, project: str, name: str) -> Pool | None:
    with open_session(deps) as session:
        return pools.get_pool(session, project, name)


def _save(deps: AppDeps, project: str, name: str, body: PoolIn) -> tuple[Pool, bool]:
    """Insert or update the pool's desired spec; (the row, whether it is new)."""
    with open_session(deps) as session:
        if not connections.connected(session, [body.cloud], project):
            raise HTTPException(status.HTTP_409_CONFLICT, f"no {body.cloud} connection: connect {body.cloud} "
                                                          f"first (gpuprov connect {body.cloud} ...)")
        row = pools.get_pool(session, project, name)
        if row is None:
            pool_id = ids.new_id(POOL_ID_LENGTH)
            row = Pool(id=pool_id, project=project, name=name, cloud=body.cloud, gpu=body.gpu,
                       gpu_count=body.gpu_count, region=body.region, spot=body.spot, k3s=body.k3s,
                       min_size=body.min, max_size=body.max, size=body.size,
                       ssh_public_keys=body.ssh_public_keys, status=PoolStatus.ACTIVE,
                       workflow_id=scale_workflow_id(pool_id))
            return pools.save_pool(session, row), True
        if row.status == PoolStatus.DELETING:
            raise HTTPException(status.HTTP_409_CONFLICT, f"pool {name!r} is being deleted: "
                                                          "make it again once it is gone")
        changed = [f for f in SHAPE if getattr(row, f) != getattr(body, f)]
        if changed:
            raise HTTPException(status.HTTP_409_CONFLICT,
                                f"a pool's machines are identical: {', '.join(changed)} cannot change "
                                "(delete the pool and make it again)")
        row.min_size, row.max_size, row.size = body.min, body.max, body.size
        row.ssh_public_keys = body.ssh_public_keys
        return pools.save_pool(session, row), False


def _forget(deps: AppDeps, pool_id: str) -> None:
    with open_session(deps) as session:
        pools.forget(session, pool_id)


def _mark_deleting(deps: AppDeps, pool_id: str) -> Pool | None:
    with open_session(deps) as session:
        return pools.mark_deleting(session, pool_id)


async def _wake(deps: AppDeps, row: Pool) -> None:
    """Start the pool's ScaleWorkflow unless it runs, and have it reconcile now."""
    scale = ScaleInput(pool_id=row.id, project=row.project, name=row.name, timing=deps.allocation_timing)
    await deps.workflows.start(wf.SCALE, scale, workflow_id=row.workflow_id, use_existing=True)
    await deps.workflows.request_update(row.workflow_id, wf.SCALE.reconcile)


# --------------------------------------------------------------------------- routes

NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "unknown pool"}}


@router.put("/{name}", status_code=status.HTTP_202_ACCEPTED, response_model=PoolOut,
            responses={409: {"description": "the cloud is not connected, the pool is being deleted, or "
                                            "its machine shape would change"},
                       422: {"description": "invalid (size outside min..max, a name, a key...) or refused "
                                            "by the cloud"},
                       503: {"description": "Temporal unreachable"}})
async def put_pool(name: PoolName, body: PoolIn, deps: DepsDep, caller: CallerDep) -> PoolOut:
    """Make or resize a pool: its ScaleWorkflow allocates the missing machines and terminates the
    surplus (accepted; GET shows progress)."""
    _check_name(name)
    why = refusal(body.cloud, LaunchRequirements(spot=body.spot, region=body.region, k3s=body.k3s))
    if why is not None:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, why)
    row, new = await in_thread(_save, deps, caller.project, name, body)
    try:
        await _wake(deps, row)
    except WorkflowUnavailable as e:
        if new:  # nothing would ever reconcile it: the request did not happen
            await in_thread(_forget, deps, row.id)
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
        # The running workflow reads the saved spec at its next resync.
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"saved; the pool reconciles at its next resync ({e})") from None
    log.info("pool %s of project %s: size %d (%d..%d)", row.id, caller.project, body.size, body.min, body.max)
    return PoolOut.of(row)


@router.get("", response_model=Page[PoolOut])
def list_pools(session: SessionDep, caller: CallerDep, page: PageDep) -> Page[PoolOut]:
    """The project's pools, oldest first, each with what its last reconcile counted on the cloud."""
    rows, following = KEYSET.fetch(session, select(Pool).where(Pool.project == caller.project), page)
    return Page(items=[PoolOut.of(r) for r in rows], next_cursor=following)


@router.get("/{name}", response_model=PoolOut, responses=NOT_FOUND)
async def get_pool(name: PoolName, deps: DepsDep, caller: CallerDep) -> PoolOut:
    row = await in_thread(_get, deps, caller.project, name)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no pool {shown(name)}")
    return PoolOut.of(row)


@router.delete("/{name}", status_code=status.HTTP_202_ACCEPTED, response_model=PoolOut,
               responses={**NOT_FOUND, 503: {"description": "Temporal unreachable"}})
async def delete_pool(name: PoolName, deps: DepsDep, caller: CallerDep) -> PoolOut:
    """Scale the pool to 0; once the cloud shows none of its machines, it is forgotten (GET: 404)."""
    row = await in_thread(_get, deps, caller.project, name)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no pool {shown(name)}")
    marked = await in_thread(_mark_deleting, deps, row.id)
    if marked is None:  # forgotten meanwhile
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no pool {shown(name)}")
    try:
        await _wake(deps, marked)
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"marked for deletion; the pool scales to 0 at its next resync ({e})") from None
    return PoolOut.of(marked)

"""A project's default cloud and region (issue 17, item 8): `PUT /api/compute/defaults {cloud,
region?}`. A request that names no cloud (`cloud`, `clouds` or `connection_id` on POST /instances, no
`cloud` or `pool` on POST /jobs) plans on that cloud, and in that region when it gives none; without
defaults it plans over every connected cloud, as before. The cloud must be known and connected in the
project when set (422 otherwise); the region one the cloud has, when it declares its regions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field

from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, in_thread, open_session
from api.errors import adapter_class, shown
from api.fields import CloudId, Printable, Strict, Timestamp, aware
from api.shared_bodies import InstanceCreate
from store import connections, defaults
from store.models import ProjectDefaults

router = APIRouter(prefix="/defaults", tags=["projects"])
# A machine's lease when neither its request nor its project gives one: a machine whose control
# plane is gone ends itself (where its cloud can) half a day later at most.
DEFAULT_LEASE_HOURS = defaults.DEFAULT_LEASE_HOURS

class DefaultsIn(Strict):
    cloud: CloudId = Field(description="a cloud connected in this project")
    region: Annotated[str, Field(min_length=1, max_length=64), Printable] | None = Field(
        None, description="a region (or country) of the cloud; none: wherever the cloud plans by default")
    lease_hours: Annotated[float, Field(ge=0, le=720, allow_inf_nan=False, strict=True)] | None = Field(
        None, description="the machines' lease (dead-man switch) when a request gives none; 0: off; "
                          f"none: {DEFAULT_LEASE_HOURS:g} h")


class DefaultsOut(BaseModel):
    project: str
    cloud: str
    region: str | None
    updated_at: Timestamp | None
    lease_hours: float | None = None

    @classmethod
    def of(cls, row: ProjectDefaults) -> DefaultsOut:
        return cls(project=row.project, cloud=row.cloud, region=row.region, updated_at=aware(row.updated_at),
                   lease_hours=row.lease_hours)


def _save(deps: AppDeps, project: str, body: DefaultsIn) -> ProjectDefaults:
    caps = adapter_class(body.cloud).capabilities
    if body.region is not None and caps.regions and body.region not in caps.regions:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            f"{body.cloud} has no region {shown(body.region)} "
                            f"(regions: {', '.join(caps.regions)})")
    with open_session(deps) as session:
        if not connections.connected(session, [body.cloud], project):
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                                f"{body.cloud} is not connected in project {project}: connect it first "
                                f"(gpuprov connect {body.cloud} --credential ...)")
        return defaults.save_defaults(session, project, body.cloud, body.region, body.lease_hours)


def _get(deps: AppDeps, project: str) -> ProjectDefaults | None:
    with open_session(deps) as session:
        return defaults.get_defaults(session, project)


def _clear(deps: AppDeps, project: str) -> bool:
    with open_session(deps) as session:
        return defaults.clear_defaults(session, project)


def with_project_default(deps: AppDeps, project: str,
                         body: InstanceCreate) -> tuple[InstanceCreate, str | None]:
    """The request with the project's default cloud (and region, when it gives none) filled in when it
    names no cloud, and the note saying so; else the request as it came. Sync: call through `in_thread`."""
    if body.cloud is not None or body.clouds is not None or body.connection_id is not None:
        return body, None
    row = _get(deps, project)
    if row is None:
        return body, None
    region = body.region if body.region is not None else row.region
    where = f" in {region}" if region is not None and body.region is None else ""
    return (body.model_copy(update={"cloud": row.cloud, "region": region}),
            f"the project's default cloud: {row.cloud}{where} (PUT /api/compute/defaults)")


def lease_hours_for(deps: AppDeps, project: str, body: InstanceCreate) -> float:
    """The request's lease: as given, else the project's default, else DEFAULT_LEASE_HOURS. Sync:
    call through `in_thread`."""
    with open_session(deps) as session:
        return defaults.lease_hours(session, project, body.lease_hours)


@router.put("", response_model=DefaultsOut,
            responses={422: {"description": "unknown cloud, a cloud not connected in this project, or a "
                                            "region the cloud does not have"}})
async def put_defaults(body: DefaultsIn, deps: DepsDep, caller: CallerDep) -> DefaultsOut:
    """Set the project's default cloud (and region): what a request naming no cloud plans on."""
    return DefaultsOut.of(await in_thread(_save, deps, caller.project, body))


@router.get("", response_model=DefaultsOut,
            responses={404: {"description": "not set: a request naming no cloud plans over every "
                                            "connected cloud"}})
async def get_defaults(deps: DepsDep, caller: CallerDep) -> DefaultsOut:
    row = await in_thread(_get, deps, caller.project)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND,
                            "no default cloud: a request naming no cloud plans over every connected cloud")
    return DefaultsOut.of(row)


@router.delete("", status_code=status.HTTP_204_NO_CONTENT,
               responses={404: {"description": "no default cloud was set"}})
async def delete_defaults(deps: DepsDep, caller: CallerDep) -> None:
    """Forget the project's defaults: requests naming no cloud plan over every connected cloud again."""
    if not await in_thread(_clear, deps, caller.project):
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no default cloud was set")

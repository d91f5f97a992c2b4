"""The Modal GPU picker: Modal's backend page (the seed's "Backend offers": "Modal is the exception:
instead of the generic offer table it shows a Modal GPU picker where you choose a GPU spec and save it
as the backend's default").

`GET /backends/modal/offers` answers the picker — Modal's documented GPU types, the counts one sandbox
takes (1 to the type's limit) and the price per hour, with where and when those prices were read — and
`POST /backends/modal/pick` `{gpu, gpu_count}` saves a spec as the backend's default in the project.
Both come from one table, providers/modal_gpus.py (Modal's API has no price list): no call to Modal is
made. The pick is stored like any backend's default offer (instance type = the spec, `H100:2`; region
= Modal's one scheduling region), so a later `POST /instances` naming Modal alone with no GPU plans on
exactly that spec (api/routers/instances.py `with_default`); `DELETE /backends/modal/pick` forgets it.

These routes are included before api/routers/offers.py's `/backends/{provider}/...`, whose path
parameter leaves Modal out (api/fields.py `TableBackendId`).
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, status
from pydantic import AfterValidator, BaseModel, Field, ValidationInfo, field_validator

from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, in_thread, open_session
from api.errors import shown
from api.fields import OWN_PICKER, Strict
from api.routers.offers import no_connection, title_of
from api.shared_bodies import GpuOut, PickOut, gpu_label
from providers import modal_gpus
from providers.modal_ import REGION, ModalProvider
from store import connections, picks
from store.models import BackendPick

CLOUD = ModalProvider.id
OWN_PICKER[CLOUD] = "the Modal GPU picker"  # the offer table's routes refuse this backend
router = APIRouter(prefix=f"/backends/{CLOUD}", tags=["offers"])

MAX_COUNT = max(g.max_count for g in modal_gpus.GPUS)


def _known_gpu(value: str) -> str:
    if value not in modal_gpus.BY_NAME:
        raise ValueError(f"unknown Modal GPU type {shown(value)}; known: {', '.join(modal_gpus.BY_NAME)}")
    return value


def _gpu_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = list(modal_gpus.BY_NAME)


# A GPU type of the table, spelled as Modal's `gpu=` takes it (an enum in OpenAPI).
ModalGpuName = Annotated[str, Field(min_length=1, max_length=40, json_schema_extra=_gpu_enum),
                         AfterValidator(_known_gpu)]


def _label(gpu: modal_gpus.ModalGpu, count: int) -> str | None:
    """The table's GPU cell, as the generic offers page shows the same Modal offer: `2× H100 (80GB)`."""
    return gpu_label(GpuOut(name=gpu.canonical, count=count, memory_gib=float(gpu.memory_gib)))


# --------------------------------------------------------------------------- bodies


class ModalGpuOut(BaseModel):
    """One GPU type of the picker: what to choose, how many fit one sandbox, what an hour costs."""

    gpu: str = Field(description="the type as Modal's `gpu=` takes it, e.g. `H100`, `A100-80GB`")
    memory_gib: int = Field(description="memory of one GPU, GiB")
    max_count: int = Field(description="the most GPUs of this type one sandbox takes")
    counts: list[int] = Field(description="the counts the picker offers: 1 to max_count")
    price_per_hour: float = Field(description="USD per hour for one GPU (the count multiplies it)")
    price_per_second: float = Field(description="USD per second for one GPU, as Modal bills it")

    @classmethod
    def of(cls, gpu: modal_gpus.ModalGpu) -> ModalGpuOut:
        return cls(gpu=gpu.name, memory_gib=gpu.memory_gib, max_count=gpu.max_count,
                   counts=list(range(1, gpu.max_count + 1)), price_per_hour=gpu.price_per_hour,
                   price_per_second=gpu.usd_per_second)


class ModalPickOut(PickOut):
    """Modal's default GPU spec in this project (`instance_type` is the spec, `H100:2`; `region` is
    Modal's one scheduling region). `gpu` and `gpu_count` are null when the saved spec is no longer
    in the table."""

    gpu: str | None = Field(description="the GPU type, e.g. `H100`")
    gpu_count: int | None = Field(description="GPUs per sandbox")

    @classmethod
    def of_modal(cls, row: BackendPick) -> ModalPickOut:
        base = PickOut.of(row)
        try:
            gpu, count = modal_gpus.parse_spec(row.instance_type)
        except ValueError:
            return cls(**base.model_dump(), gpu=None, gpu_count=None)
        return cls(**base.model_dump(), gpu=gpu.name, gpu_count=count)


class ModalGpuPicker(BaseModel):
    """Modal's backend page: the Modal GPU picker (in place of the offer table), its GPU types in the
    table's order, the prices' source and date, and the spec saved as the backend's default."""

    title: str = Field(description="`Modal — Available Instances`, as every backend page")
    view: Literal["modal_gpu_picker"] = Field(
        "modal_gpu_picker", description="this page is the Modal GPU picker, not the offer table")
    gpus: list[ModalGpuOut]
    region: str = Field(description="where Modal schedules: it places the sandbox itself")
    prices_source: str = Field(description="where the prices were read (Modal's API has no price list)")
    priced_on: date = Field(description="when they were read")
    billing: str = Field(description="how Modal bills")
    picked: ModalPickOut | None = Field(description="the project's default spec for Modal, or null")


class ModalPickCreate(Strict):
    """A GPU spec chosen in the picker: the backend's default in this project from now on."""

    gpu: ModalGpuName
    gpu_count: Annotated[int, Field(ge=1, le=MAX_COUNT)] = Field(
        1, description="GPUs per sandbox: 1 to the type's max_count")

    @field_validator("gpu_count")
    @classmethod
    def _within_the_types_limit(cls, count: int, info: ValidationInfo) -> int:
        gpu = modal_gpus.BY_NAME.get(info.data.get("gpu", ""))
        if gpu is not None and count > gpu.max_count:
            raise ValueError(f"{gpu.name} takes 1 to {gpu.max_count} GPUs per sandbox, not {count}")
        return count


# --------------------------------------------------------------------------- database work (sync)


def _require_connection(deps: AppDeps, project: str) -> None:
    with open_session(deps) as session:
        conn = connections.connection_for(session, CLOUD, project)
    if conn is None:
        raise no_connection(CLOUD)


def _picked(deps: AppDeps, project: str) -> BackendPick | None:
    with open_session(deps) as session:
        return picks.get_pick(session, project, CLOUD)


def _save(deps: AppDeps, project: str, gpu: modal_gpus.ModalGpu, count: int) -> BackendPick:
    """Saved only once the connection is there (checked in the same call: nothing stored otherwise)."""
    _require_connection(deps, project)
    with open_session(deps) as session:
        return picks.save_pick(session, project=project, provider=CLOUD, instance_type=gpu.spec(count),
                               region=REGION, spot=False, gpu_label=_label(gpu, count),
                               price_per_hour=round(gpu.price_per_hour * count, 4))


# --------------------------------------------------------------------------- routes

_NOT_CONNECTED: dict[int | str, dict[str, Any]] = {
    409: {"description": "Modal is not connected in this project"}}


@router.get("/offers", response_model=ModalGpuPicker, responses=_NOT_CONNECTED)
async def modal_gpu_picker(deps: DepsDep, caller: CallerDep) -> ModalGpuPicker:
    """The Modal GPU picker: every documented GPU type (`gpu`, memory, `counts` 1..`max_count` per
    sandbox, USD `price_per_hour` of one GPU), `prices_source` and `priced_on` of those prices, and
    the spec saved as Modal's default in this project (`picked`). From the table shipped with the
    adapter: no call to Modal."""
    await in_thread(_require_connection, deps, caller.project)
    picked = await in_thread(_picked, deps, caller.project)
    return ModalGpuPicker(title=title_of(CLOUD), gpus=[ModalGpuOut.of(g) for g in modal_gpus.GPUS],
                          region=REGION, prices_source=modal_gpus.PRICES_SOURCE,
                          priced_on=date.fromisoformat(modal_gpus.PRICED_ON), billing="per second",
                          picked=ModalPickOut.of_modal(picked) if picked is not None else None)


@router.get("/pick", response_model=ModalPickOut,
            responses={404: {"description": "no spec is saved for Modal in this project"}})
async def read_modal_pick(deps: DepsDep, caller: CallerDep) -> ModalPickOut:
    """Modal's default spec in this project (`picked` of GET …/offers), read alone: what every
    backend's `GET /backends/{provider}/pick` answers. Needs no connection."""
    picked = await in_thread(_picked, deps, caller.project)
    if picked is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no GPU spec is picked for {CLOUD} in this project")
    return ModalPickOut.of_modal(picked)


@router.post("/pick", response_model=ModalPickOut,
             responses={**_NOT_CONNECTED,
                        422: {"description": "an unknown GPU type, or a count above the type's limit"}})
async def pick_modal_gpu(body: ModalPickCreate, deps: DepsDep, caller: CallerDep) -> ModalPickOut:
    """Save a GPU spec (`gpu`, `gpu_count`) as Modal's default in this project, replacing any earlier
    one: a later `POST /instances` naming Modal alone (`cloud`, `clouds` of one, or its
    `connection_id`) with no `gpu`/`gpu_count` launches that spec (`H100:2`). An unknown type or a
    count above the type's limit is a 422 and stores nothing; the price is the table's."""
    gpu = modal_gpus.BY_NAME[body.gpu]
    return ModalPickOut.of_modal(await in_thread(_save, deps, caller.project, gpu, body.gpu_count))


def _clear(deps: AppDeps, project: str) -> bool:
    with open_session(deps) as session:
        return picks.clear_pick(session, project, CLOUD)


@router.delete("/pick", status_code=status.HTTP_204_NO_CONTENT,
               responses={404: {"description": "no spec is saved for Modal in this project"}})
async def clear_modal_pick(deps: DepsDep, caller: CallerDep) -> None:
    """Forget Modal's default spec in this project: later allocations naming Modal with no GPU plan
    across all its offers again. Needs no connection (a disconnected Modal's pick can be cleared)."""
    if not await in_thread(_clear, deps, caller.project):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no GPU spec is picked for {CLOUD} in this project")

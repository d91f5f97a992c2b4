"""A cloud that exists only in tests: the proof that simulating a new cloud takes one module
with `FACADE` plus one line in the simulation's list (here an entry point in `gpuprov.simulations`,
as a separately installed package would declare it), and no edit anywhere in fakeclouds/. The
product's registry never hears of it: only the simulation is exercised, so it has no adapter.

Its API is deliberately unlike the others: `/tiny/v1`, machines at `/boxes`, its own error
shape, names unique but optional, ids `box-<hex>`, a preinstalled `tiny-agent`, and SSH on a
fixed port 22 (so every box gets its own loopback address, reported as `address`).
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from fakeclouds.catalog import Gpu, InstanceType, Region
from fakeclouds.common import authorized_body, make_call
from fakeclouds.engine import Engine, Machine
from fakeclouds.errors import CloudError, NotFound, Unauthorized
from fakeclouds.facade import Facade, NameRule
from fakeclouds.faults import CallPlan

NAME = "tiny"
LOGIN_USER = "tinyuser"
AGENT = "#!/bin/sh\necho tiny-agent ok\n"

REGIONS = (Region("tiny-west", "A small place"),)
INSTANCE_TYPES = (
    InstanceType(name="tiny-t4", description="1x T4", gpu_description="T4 (16 GB)", vcpus=2, memory_gib=8,
                 storage_gib=50, gpu=Gpu("T4", "Tesla T4", 15360, 1), prices={"tiny-west": 0.11},
                 default_stock={"tiny-west": 2}),
)

class BoxBody(BaseModel):
    type: str
    region: str
    key: str
    name: str | None = None


def _error(exc: CloudError) -> JSONResponse:
    status = 401 if isinstance(exc, Unauthorized) else 404 if isinstance(exc, NotFound) else 400
    return JSONResponse({"problem": type(exc).__name__, "why": exc.message}, status_code=status)


def _box(m: Machine) -> dict[str, Any]:
    return {"id": m.id, "name": m.name, "state": m.status, "address": m.host}


def build_router(engine: Engine, token: str) -> APIRouter:
    router = APIRouter()
    call = make_call(engine, NAME, token, _error)

    @router.post("/boxes")
    async def create(request: Request) -> Response:
        try:
            body = await authorized_body(request, token, BoxBody)
        except CloudError as exc:
            return _error(exc)

        def effect(plan: CallPlan) -> dict[str, Any]:
            (m,) = engine.create(NAME, name=body.name, instance_type=body.type, region=body.region,
                                 public_keys=[body.key], stuck=plan.stuck_booting)
            return _box(m)
        return await call(request, "create", effect, status=201, region=body.region)

    @router.get("/boxes/{box_id}")
    async def get(request: Request, box_id: str) -> Response:
        return await call(request, "get", lambda _: _box(engine.get(NAME, box_id)))

    return router


FACADE = Facade(
    name=NAME, prefix="/tiny/v1", display_name="Tiny Cloud (simulated)", build_router=build_router,
    credentials=lambda token: {"api_key": token},
    login_user=LOGIN_USER, regions=REGIONS, instance_types=INSTANCE_TYPES,
    names=NameRule(required=False, unique=True, max_length=8),
    machine_id=lambda: f"box-{uuid.uuid4().hex[:6]}", preinstalled={"tiny-agent": AGENT}, ssh_port=22,
)

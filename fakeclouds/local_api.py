"""The `local` cloud (ours; API spec in fakeclouds/README.md): what it sells, and its HTTP API,
which only translates to the engine. `FACADE` at the bottom declares it to the simulation.

Honest CPU machines on this host: no GPUs, no simulated nvidia-smi. Our API reports host and
port, so machines share 127.0.0.1, each on its own port.
"""

from __future__ import annotations

import socket
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from fakeclouds.catalog import InstanceType, Region
from fakeclouds.common import authorized_body, iso, make_call
from fakeclouds.engine import Engine, Machine
from fakeclouds.errors import (
    CloudError,
    Invalid,
    LostResponse,
    NameConflict,
    NoCapacity,
    NotFound,
    QuotaExceeded,
    RateLimit,
    Unauthorized,
)
from fakeclouds.facade import UNIQUE_SLUG, Facade
from fakeclouds.faults import CallPlan
from fakeclouds.vendor_errors import CodeTable, retry_after, status_of, vendor_router

NAME = "local"

REGIONS = (Region("local-1", "Local zone 1"), Region("local-2", "Local zone 2"))


def _cpu(name: str, vcpus: int, mem: int, p1: float, p2: float) -> InstanceType:
    return InstanceType(
        name=name, description=f"{vcpus} vCPU, {mem} GiB RAM (CPU only)",
        gpu_description=None, vcpus=vcpus, memory_gib=mem, storage_gib=20 * vcpus, gpu=None,
        prices={"local-1": p1, "local-2": p2}, spot_factor=0.3,
        default_stock={"local-1": 8, "local-2": 8},
    )


INSTANCE_TYPES = (
    _cpu("cpu-small", 2, 4, 0.02, 0.025),
    _cpu("cpu-medium", 4, 16, 0.08, 0.09),
    _cpu("cpu-large", 8, 32, 0.16, 0.18),
)

# (status, code) per engine error; an injected ServerFault keeps its own status.
_ERRORS = CodeTable([
    (Unauthorized, (401, "unauthorized")),
    (NotFound, (404, "not_found")),
    (Invalid, (400, "invalid_request")),
    (NameConflict, (409, "name_conflict")),
    (NoCapacity, (503, "insufficient_capacity")),
    (QuotaExceeded, (403, "quota_exceeded")),
    (RateLimit, (429, "rate_limited")),
    (LostResponse, (504, "gateway_timeout")),
], default=(500, "server_error"))


class CreateBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    instance_type: str
    region: str
    spot: bool = False
    ssh_public_keys: list[str] = Field(min_length=1)
    user_data: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    ports: list[int] = Field(default_factory=list)


def error_response(exc: CloudError, _request: Request | None = None) -> JSONResponse:
    status, code = _ERRORS(exc)
    return JSONResponse({"error": {"code": code, "message": exc.message}}, status_code=status_of(exc, status),
                        headers=retry_after(exc))


def machine_json(m: Machine) -> dict[str, Any]:
    running = m.status == "running"
    return {
        "id": m.id, "name": m.name, "instance_type": m.instance_type, "region": m.region, "spot": m.spot,
        "status": m.status, "host": m.host, "ssh_port": m.ssh_port if running else None,
        "ssh_user": m.ssh_user, "labels": m.labels, "ports": m.ports, "created_at": iso(m.created_at),
        "price_per_hour": m.price_per_hour, "detail": m.detail,
    }


def build_router(engine: Engine, token: str, facade: str = NAME) -> APIRouter:
    """The local API for `facade`: `local` itself, or another cloud that speaks our API
    (`functools.partial(build_router, facade=...)` as its Facade's build_router)."""
    router = vendor_router(error_response)
    call = make_call(engine, facade, token)

    @router.get("/account")
    async def account(request: Request) -> Response:
        ident = {"id": facade, "name": f"local cloud on {socket.gethostname()}"}
        return await call(request, "verify", lambda _: ident)

    @router.get("/offers")
    async def offers(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            rows = []
            for o in engine.offers(facade):
                t, gpu = o["type"], o["type"].gpu
                rows.append({
                    "instance_type": t.name, "gpu_name": gpu.name if gpu else None,
                    "gpu_count": gpu.count if gpu else 0, "gpu_memory_gib": gpu.memory_gib if gpu else None,
                    "vcpus": t.vcpus, "memory_gib": t.memory_gib, "region": o["region"],
                    "price_per_hour": o["price_per_hour"], "spot": o["spot"], "available": o["stock"] > 0,
                })
            return {"offers": rows}
        return await call(request, "offers", effect)

    @router.post("/machines")
    async def create(request: Request) -> Response:
        body = await authorized_body(request, token, CreateBody)

        def effect(plan: CallPlan) -> dict[str, Any]:
            (m,) = engine.create(
                facade, name=body.name, instance_type=body.instance_type, region=body.region,
                spot=body.spot, public_keys=body.ssh_public_keys, labels=body.labels,
                user_data=body.user_data, ports=body.ports,
                stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot,
            )
            return machine_json(m)
        return await call(request, "create", effect, status=201, region=body.region)

    @router.get("/machines")
    async def list_machines(request: Request, name: str | None = None) -> Response:
        labels: dict[str, str] = {}
        for raw in request.query_params.getlist("label"):
            k, sep, v = raw.partition("=")
            if not sep or not k:
                raise Invalid(f"label filter must be k=v, not {raw!r}")
            labels[k] = v

        def effect(_: CallPlan) -> dict[str, Any]:
            found = [m for m in engine.live(facade) if (name is None or m.name == name)
                     and all(m.labels.get(k) == v for k, v in labels.items())]
            return {"machines": [machine_json(m) for m in found]}
        return await call(request, "list", effect)

    @router.get("/machines/{machine_id}")
    async def get(request: Request, machine_id: str) -> Response:
        return await call(request, "get", lambda _: machine_json(engine.get(facade, machine_id)))

    @router.delete("/machines/{machine_id}")
    async def delete(request: Request, machine_id: str) -> Response:
        return await call(request, "terminate", lambda _: machine_json(engine.terminate(facade, machine_id)),
                          status=202)

    return router


FACADE = Facade(
    name=NAME, prefix="/local/v1", display_name="local", build_router=build_router,
    credentials=lambda token: {"api_key": token},
    login_user="gpuprov", regions=REGIONS, instance_types=INSTANCE_TYPES,
    names=UNIQUE_SLUG, machine_id=lambda: f"m-{uuid.uuid4().hex[:12]}",
    guest_shutdown="terminate",  # gpuprov's own local cloud: a guest shutdown ends the machine
)

"""Lambda Cloud's public API (/api/v1), as in PROVIDER-APIS.md. Only translates to the engine.

Simulation extension: Lambda instances have no SSH port field (it is always 22). Every
simulated machine is its own SSH server on 127.0.0.1, so instances carry an extra field
`x_sim_ssh_port`; `ip` is "127.0.0.1". Like real Lambda, names are NOT unique.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from fakeclouds import catalog
from fakeclouds.common import authorized_body, make_call, retry_after_header
from fakeclouds.engine import Engine, Machine
from fakeclouds.errors import (
    CloudError,
    Invalid,
    LostResponse,
    NoCapacity,
    NotFound,
    QuotaExceeded,
    RateLimit,
    ServerFault,
    Unauthorized,
)
from fakeclouds.faults import CallPlan

FACADE = "lambda"
_STATUS = {"pending": "booting", "running": "active", "error": "unhealthy", "terminating": "terminating",
           "terminated": "terminated"}

# (error class, HTTP status, code, suggestion). Codes marked [unconfirmed] are our guess.
_ERRORS: list[tuple[type[CloudError], int, str, str | None]] = [
    (Unauthorized, 401, "global/invalid-api-key", "Check your API key."),
    (NotFound, 404, "global/object-does-not-exist", None),
    (Invalid, 400, "global/invalid-parameters", None),
    (NoCapacity, 400, "instance-operations/launch/insufficient-capacity",
     "Try again later or choose another region or instance type."),
    (QuotaExceeded, 400, "global/quota-exceeded", "Contact support to raise your quota."),
    (RateLimit, 429, "global/too-many-requests", "Slow down."),  # code [unconfirmed]
    (ServerFault, 500, "global/internal-error", None),  # code [unconfirmed]
    (LostResponse, 504, "global/gateway-timeout", None),  # simulation only
]


class LaunchBody(BaseModel):
    region_name: str
    instance_type_name: str
    ssh_key_names: list[str]
    quantity: int = 1
    name: str | None = None
    file_system_names: list[str] = Field(default_factory=list)
    user_data: str | None = None  # [unconfirmed] in PROVIDER-APIS.md; stored, and run if a "#!" script


class TerminateBody(BaseModel):
    instance_ids: list[str] = Field(min_length=1)


class SshKeyBody(BaseModel):
    name: str
    public_key: str | None = None  # omitted: Lambda generates a pair and returns private_key once


def error_response(exc: CloudError) -> JSONResponse:
    status, code, suggestion = 500, "global/internal-error", None
    for cls, st, cd, sug in _ERRORS:
        if isinstance(exc, cls):
            status, code, suggestion = st, cd, sug
    if isinstance(exc, ServerFault):
        status = exc.status
    err: dict[str, Any] = {"code": code, "message": exc.message}
    if suggestion:
        err["suggestion"] = suggestion
    headers = {"Retry-After": retry_after_header(exc.retry_after)} if isinstance(exc, RateLimit) else None
    return JSONResponse({"error": err}, status_code=status, headers=headers)


def type_json(itype: catalog.InstanceType, region: str | None = None) -> dict[str, Any]:
    price = itype.prices[region] if region else min(itype.prices.values())
    return {
        "name": itype.name, "description": itype.description, "gpu_description": itype.gpu_description,
        "price_cents_per_hour": round(price * 100),
        "specs": {"vcpus": itype.vcpus, "memory_gib": itype.memory_gib, "storage_gib": itype.storage_gib,
                  "gpus": itype.gpu.count if itype.gpu else 0},
    }


def region_json(name: str) -> dict[str, str]:
    return {"name": name, "description": catalog.regions_for(FACADE)[name].description}


def instance_json(m: Machine) -> dict[str, Any]:
    itype = catalog.types_for(FACADE)[m.instance_type]
    booted = m.ssh_port is not None and m.status != "pending"
    return {
        "id": m.id, "name": m.name, "status": _STATUS[m.status],
        "ip": "127.0.0.1" if booted else None, "private_ip": "127.0.0.1" if booted else None,
        "region": region_json(m.region), "instance_type": type_json(itype, m.region),
        "ssh_key_names": m.extra.get("ssh_key_names", []), "file_system_names": [],
        "hostname": f"{m.id[:8]}.sim.lambda" if booted else None, "is_reserved": False,
        "x_sim_ssh_port": m.ssh_port if m.status == "running" else None,  # simulation extension
    }


def build_router(engine: Engine, token: str) -> APIRouter:
    router = APIRouter()

    call = make_call(engine, FACADE, token, error_response)

    @router.get("/instance-types")
    async def instance_types(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            data: dict[str, Any] = {}
            for itype in catalog.types_for(FACADE).values():
                regions = [r for r in itype.prices if engine.stock.get((itype.name, r), 0) > 0]
                data[itype.name] = {"instance_type": type_json(itype),
                                    "regions_with_capacity_available": [region_json(r) for r in regions]}
            return {"data": data}
        return await call(request, "offers", effect)

    @router.get("/ssh-keys")
    async def list_keys(request: Request) -> Response:
        return await call(request, "ssh_keys", lambda _: {"data": list(engine.ssh_keys[FACADE].values())})

    @router.post("/ssh-keys")
    async def add_key(request: Request) -> Response:
        try:
            body = await authorized_body(request, token, SshKeyBody)
        except CloudError as exc:
            return error_response(exc)
        return await call(request, "ssh_keys",
                          lambda _: {"data": engine.add_ssh_key(FACADE, body.name, body.public_key)})

    @router.delete("/ssh-keys/{key_id}")
    async def delete_key(request: Request, key_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            engine.delete_ssh_key(FACADE, key_id)
            return {"data": {}}
        return await call(request, "ssh_keys", effect)

    @router.post("/instance-operations/launch")
    async def launch(request: Request) -> Response:
        try:
            body = await authorized_body(request, token, LaunchBody)
        except CloudError as exc:
            return error_response(exc)

        def effect(plan: CallPlan) -> dict[str, Any]:
            if len(body.ssh_key_names) != 1:
                raise Invalid("ssh_key_names must contain exactly one key name")
            if body.file_system_names:
                raise Invalid("file systems are not supported by this simulation")
            by_name = {k["name"]: k for k in engine.ssh_keys[FACADE].values()}
            key = by_name.get(body.ssh_key_names[0])
            if key is None:
                raise Invalid(f"SSH key {body.ssh_key_names[0]!r} does not exist")
            made = engine.create(
                FACADE, name=body.name, instance_type=body.instance_type_name, region=body.region_name,
                public_keys=[key["public_key"]], user_data=body.user_data, quantity=body.quantity,
                stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot,
                extra={"ssh_key_names": list(body.ssh_key_names)},
            )
            return {"data": {"instance_ids": [m.id for m in made]}}
        return await call(request, "create", effect, region=body.region_name)

    @router.get("/instances")
    async def list_instances(request: Request) -> Response:
        return await call(request, "list",
                          lambda _: {"data": [instance_json(m) for m in engine.live(FACADE)]})

    @router.get("/instances/{instance_id}")
    async def get_instance(request: Request, instance_id: str) -> Response:
        return await call(request, "get", lambda _: {"data": instance_json(engine.get(FACADE, instance_id))})

    @router.post("/instance-operations/terminate")
    async def terminate(request: Request) -> Response:
        try:
            body = await authorized_body(request, token, TerminateBody)
        except CloudError as exc:
            return error_response(exc)

        def effect(_: CallPlan) -> dict[str, Any]:
            machines = [engine.get(FACADE, i) for i in body.instance_ids]  # all exist, or 404 for all
            return {"data": {"terminated_instances": [instance_json(engine.terminate(FACADE, m.id))
                                                      for m in machines]}}
        return await call(request, "terminate", effect)

    return router

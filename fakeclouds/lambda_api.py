"""Lambda Cloud, simulated: what it sells and its public API (/api/v1, as in PROVIDER-APIS.md),
which only translates to the engine. `FACADE` at the bottom declares it to the simulation.

No simulation extensions: like real Lambda, an instance reports only its `ip` and SSH is always on
port 22 there, so every simulated machine gets its own loopback address (127.x.y.z) listening on
22 (`Facade.ssh_port`). Like real Lambda, names are NOT unique. The image ships k3s (simulated).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from fakeclouds import k3s
from fakeclouds.catalog import Gpu, InstanceType, Region
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
from fakeclouds.facade import FREE_FORM_64, Facade, hex_id
from fakeclouds.faults import CallPlan

NAME = "lambda"

# Lambda Cloud's real instance-type names, specs and list prices (as published on
# lambda.ai/pricing); the GPU names/memory the simulated nvidia-smi prints follow what those
# GPUs report.
REGIONS = (
    Region("us-east-1", "Virginia, USA"),
    Region("us-west-1", "California, USA"),
    Region("us-south-1", "Texas, USA"),
    Region("europe-central-1", "Germany"),
)
_REGION_NAMES = [r.name for r in REGIONS]


def _gpu_type(name: str, gpu: Gpu, desc: str, vcpus: int, mem: int, storage: int, price: float,
              stock: dict[str, int] | None = None) -> InstanceType:
    return InstanceType(
        name=name, description=f"{gpu.count}x {desc}", gpu_description=desc,
        vcpus=vcpus, memory_gib=mem, storage_gib=storage, gpu=gpu,
        prices={r: price for r in _REGION_NAMES}, spot_factor=None,
        default_stock=stock or {r: 4 for r in _REGION_NAMES},
    )


INSTANCE_TYPES = (
    _gpu_type("gpu_1x_a10", Gpu("A10", "NVIDIA A10", 23028, 1), "A10 (24 GB PCIe)", 30, 200, 1400, 0.75),
    _gpu_type("gpu_1x_a6000", Gpu("A6000", "NVIDIA RTX A6000", 49140, 1), "RTX A6000 (48 GB)",
              14, 46, 512, 0.80),
    _gpu_type("gpu_1x_a100_sxm4", Gpu("A100", "NVIDIA A100-SXM4-40GB", 40960, 1), "A100 (40 GB SXM4)",
              30, 200, 512, 1.29),
    _gpu_type("gpu_1x_h100_pcie", Gpu("H100", "NVIDIA H100 PCIe", 81559, 1), "H100 (80 GB PCIe)",
              26, 200, 1024, 2.49),
    _gpu_type("gpu_8x_h100_sxm5", Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 8), "H100 (80 GB SXM5)",
              208, 1800, 24780, 23.92, stock={"us-east-1": 1, "us-west-1": 1}),
)
_TYPES = {t.name: t for t in INSTANCE_TYPES}
_REGION_INFO = {r.name: r for r in REGIONS}
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


def type_json(itype: InstanceType, region: str | None = None) -> dict[str, Any]:
    price = itype.prices[region] if region else min(itype.prices.values())
    return {
        "name": itype.name, "description": itype.description, "gpu_description": itype.gpu_description,
        "price_cents_per_hour": round(price * 100),
        "specs": {"vcpus": itype.vcpus, "memory_gib": itype.memory_gib, "storage_gib": itype.storage_gib,
                  "gpus": itype.gpu.count if itype.gpu else 0},
    }


def region_json(name: str) -> dict[str, str]:
    return {"name": name, "description": _REGION_INFO[name].description}


def instance_json(m: Machine) -> dict[str, Any]:
    # The address is the machine's own (SSH on port 22 there); it keeps it once booted, also when
    # unhealthy, like a real instance keeps its IP.
    ip = m.address if m.status != "pending" else None
    return {
        "id": m.id, "name": m.name, "status": _STATUS[m.status],
        "ip": ip, "private_ip": ip,
        "region": region_json(m.region), "instance_type": type_json(_TYPES[m.instance_type], m.region),
        "ssh_key_names": m.extra.get("ssh_key_names", []), "file_system_names": [],
        "hostname": f"{m.id[:8]}.sim.lambda" if ip else None, "is_reserved": False,
    }


def build_router(engine: Engine, token: str) -> APIRouter:
    router = APIRouter()

    call = make_call(engine, NAME, token, error_response)

    @router.get("/instance-types")
    async def instance_types(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            data: dict[str, Any] = {}
            for itype in INSTANCE_TYPES:
                regions = [r for r in itype.prices if engine.in_stock(NAME, itype.name, r) > 0]
                data[itype.name] = {"instance_type": type_json(itype),
                                    "regions_with_capacity_available": [region_json(r) for r in regions]}
            return {"data": data}
        return await call(request, "offers", effect)

    @router.get("/ssh-keys")
    async def list_keys(request: Request) -> Response:
        return await call(request, "ssh_keys", lambda _: {"data": list(engine.ssh_keys[NAME].values())})

    @router.post("/ssh-keys")
    async def add_key(request: Request) -> Response:
        try:
            body = await authorized_body(request, token, SshKeyBody)
        except CloudError as exc:
            return error_response(exc)
        return await call(request, "ssh_keys",
                          lambda _: {"data": engine.add_ssh_key(NAME, body.name, body.public_key)})

    @router.delete("/ssh-keys/{key_id}")
    async def delete_key(request: Request, key_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            engine.delete_ssh_key(NAME, key_id)
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
            by_name = {k["name"]: k for k in engine.ssh_keys[NAME].values()}
            key = by_name.get(body.ssh_key_names[0])
            if key is None:
                raise Invalid(f"SSH key {body.ssh_key_names[0]!r} does not exist")
            made = engine.create(
                NAME, name=body.name, instance_type=body.instance_type_name, region=body.region_name,
                public_keys=[key["public_key"]], user_data=body.user_data, quantity=body.quantity,
                stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot,
                extra={"ssh_key_names": list(body.ssh_key_names)},
            )
            return {"data": {"instance_ids": [m.id for m in made]}}
        return await call(request, "create", effect, region=body.region_name)

    @router.get("/instances")
    async def list_instances(request: Request) -> Response:
        return await call(request, "list",
                          lambda _: {"data": [instance_json(m) for m in engine.live(NAME)]})

    @router.get("/instances/{instance_id}")
    async def get_instance(request: Request, instance_id: str) -> Response:
        return await call(request, "get", lambda _: {"data": instance_json(engine.get(NAME, instance_id))})

    @router.post("/instance-operations/terminate")
    async def terminate(request: Request) -> Response:
        try:
            body = await authorized_body(request, token, TerminateBody)
        except CloudError as exc:
            return error_response(exc)

        def effect(_: CallPlan) -> dict[str, Any]:
            machines = [engine.get(NAME, i) for i in body.instance_ids]  # all exist, or 404 for all
            return {"data": {"terminated_instances": [instance_json(engine.terminate(NAME, m.id))
                                                      for m in machines]}}
        return await call(request, "terminate", effect)

    return router


FACADE = Facade(
    name=NAME, prefix="/lambda/api/v1", display_name="Lambda Cloud (simulated)", build_router=build_router,
    credentials=lambda token: {"api_key": token},
    login_user="ubuntu", regions=REGIONS, instance_types=INSTANCE_TYPES,
    names=FREE_FORM_64, machine_id=hex_id, preinstalled={"k3s": k3s.SCRIPT}, ssh_port=22,
)

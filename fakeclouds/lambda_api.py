"""Lambda Cloud, simulated: what it sells and its public API (/api/v1, as in Lambda's official
OpenAPI 1.10 — research/provider-facts.md, section A), which only translates to the engine.
`FACADE` at the bottom declares it to the simulation.

Like real Lambda: an instance reports only its `ip` and SSH is always on port 22 there, so every
simulated machine gets its own loopback address (127.x.y.z) listening on 22 (`Facade.ssh_port`);
names are NOT unique; the key is accepted as `Authorization: Bearer <key>` or Basic (`<key>:` in
base64, or the bare key); every answer is `{"data": ...}` or `{"error": {code, message, suggestion?}}`.
Modelled from the spec: launch with `tags` (validated, echoed), `hostname`, `image` ({id} or
{family}, refused when unknown), `firewall_rulesets` (fakeclouds/lambda_firewall.py), `user_data`
(at most 1 MB); `GET /images`, `GET /regions`; instance `actions`; status `preempted` (an injected
`preempt` fault or the admin's preempt: the instance shows `preempted` until terminated, then is
gone, and stops billing when preempted; Lambda documents no notice, so an admin preempt with
`notice_s` shows nothing until it lands); the documented rate limits, 1 request/s and 1 launch
per 12 s (5 a minute) per key.
[unconfirmed]: the 429's body and Retry-After (the docs name the limits only); how long preempted
instances stay listed; image names; the code for an unknown image (we answer invalid-parameters).
The image ships k3s (simulated). The sim lets a booting instance be terminated although its
`actions.terminate` says `vm-has-not-launched`, as the spec's example does [unconfirmed].
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, field_validator

from fakeclouds import k3s, lambda_firewall, preemption
from fakeclouds.bodies import json_body
from fakeclouds.catalog import Gpu, InstanceType, Region
from fakeclouds.common import run_op
from fakeclouds.engine import PREEMPTED, TERMINATED, Engine, Machine
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
from fakeclouds.ratelimit import Limit, identity
from fakeclouds.vendor_errors import CodeTable, retry_after, vendor_router

NAME = "lambda"
USER_DATA_MAX = 1_000_000  # "cannot exceed 1MB" (whether 10^6 or 2^20 bytes is [unconfirmed]: the stricter)

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

# Every region carries the same image families, each with one (current) version. The first is the
# default ("Defaults to the latest Lambda Stack image"). Family names are [unconfirmed].
IMAGE_FAMILIES = (
    ("lambda-stack-24-04", "Lambda Stack 24.04", "24.04"),
    ("lambda-stack-22-04", "Lambda Stack 22.04", "22.04"),
    ("ubuntu-lts", "Ubuntu LTS", "24.04.01"),
)
IMAGE_CREATED = "2025-01-15T00:00:00Z"


def image_id(family: str, region: str) -> str:
    """Stable across restarts: an image's id is the same whenever the simulation runs."""
    return hashlib.sha256(f"{family}@{region}".encode()).hexdigest()[:32]


def images() -> list[dict[str, Any]]:
    return [{"id": image_id(family, r.name), "name": f"{family}-{version}", "description": desc,
             "family": family, "version": version, "architecture": "x86_64", "region": region_json(r.name),
             "created_time": IMAGE_CREATED, "updated_time": IMAGE_CREATED}
            for r in REGIONS for family, desc, version in IMAGE_FAMILIES]


# Lambda's documented limits: "generally limited to one request per second", and "/instance-operations
# /launch ... one request per 12 seconds, or five requests per minute" (OpenAPI info.description).
RATE_LIMITS = (
    Limit(calls=1, per_s=1.0, what="API rate limit"),
    Limit(calls=1, per_s=12.0, ops=frozenset({"create"}), what="launch rate limit"),
    Limit(calls=5, per_s=60.0, ops=frozenset({"create"}), what="launch rate limit"),
)


class KeyNotFound(NotFound):
    """404 global/not-found (v1.10's generic, e.g. an unknown SSH key id)."""


# (HTTP status, code, suggestion) per engine error; the last class that matches wins. Codes marked
# [unconfirmed] are our guess.
INTERNAL_SUGGESTION = "Try again later. Contact Support if the problem persists."
_ERRORS = CodeTable([
    (Unauthorized, (401, "global/invalid-api-key", "Check your API key.")),
    (NotFound, (404, "global/object-does-not-exist", "Check the resource exists.")),
    (KeyNotFound, (404, "global/not-found", None)),
    (Invalid, (400, "global/invalid-parameters", None)),
    (lambda_firewall.RulesetInUse, (
        400, "firewall-rulesets/firewall-ruleset-in-use",
        "Terminate all instances that are using the ruleset before deleting it.")),
    (NoCapacity, (400, "instance-operations/launch/insufficient-capacity",
                  "Try again later or choose another region or instance type.")),
    (QuotaExceeded, (400, "global/quota-exceeded", "Contact support to raise your quota.")),
    (RateLimit, (429, "global/too-many-requests", "Slow down.")),  # status from SkyPilot; code [unconfirmed]
    # the spec's ApiErrorInternal requires `suggestion`; this is its documented default
    (ServerFault, (500, "global/internal-error", INTERNAL_SUGGESTION)),
    (LostResponse, (504, "global/gateway-timeout", None)),  # simulation only
], default=(500, "global/internal-error", INTERNAL_SUGGESTION))


class Tag(BaseModel):
    key: str = Field(max_length=55)
    value: str = Field(max_length=128)

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9:-]+", v):
            raise ValueError("tag keys match ^[a-z][a-z0-9-:]+$")
        return v


class ImageSpec(BaseModel):
    id: str | None = None
    family: str | None = None


class RulesetRef(BaseModel):
    id: str


class LaunchBody(BaseModel):
    region_name: str
    instance_type_name: str
    ssh_key_names: list[str]
    quantity: int = 1  # not in the 1.8.3/1.10 schema, but sent by the spec's own example (and SkyPilot)
    name: str | None = Field(default=None, max_length=64)
    hostname: str | None = Field(default=None, pattern=r"^[a-z0-9][0-9a-z-]{0,62}$")
    file_system_names: list[str] = Field(default_factory=list)
    file_system_mounts: list[dict[str, Any]] = Field(default_factory=list)
    image: ImageSpec | None = None
    user_data: str | None = None
    tags: list[Tag] = Field(default_factory=list)
    firewall_rulesets: list[RulesetRef] = Field(default_factory=list)


class TerminateBody(BaseModel):
    instance_ids: list[str] = Field(min_length=1)


class SshKeyBody(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    public_key: str | None = Field(default=None, max_length=4096)  # omitted: Lambda makes a pair


def error_response(exc: CloudError, _request: Request | None = None) -> JSONResponse:
    status, code, suggestion = _ERRORS(exc)
    if isinstance(exc, ServerFault):
        status = exc.status
        if status == 503:  # an upstream's outage, as the spec's example shows it (its status [unconfirmed])
            code, suggestion = "provider/internal-unavailable", "Try again shortly"
    err: dict[str, Any] = {"code": code, "message": exc.message}
    if suggestion:
        err["suggestion"] = suggestion
    return JSONResponse({"error": err}, status_code=status, headers=retry_after(exc))


def check_auth(request: Request, token: str) -> None:
    """`Bearer <key>`, `Basic base64(<key>:)` or `Basic <key>` (the spec's securitySchemes)."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    value = value.strip()
    given = value if scheme.lower() == "bearer" else None
    if scheme.lower() == "basic" and value:
        try:
            decoded = base64.b64decode(value, validate=True).decode()
            given = decoded[:-1] if decoded.endswith(":") else value
        except (binascii.Error, UnicodeDecodeError):
            given = value
    if not given or given != token:
        raise Unauthorized("API key was invalid, expired, or deleted.")


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


def status_of(m: Machine) -> str:
    return "preempted" if m.status == TERMINATED and m.detail == PREEMPTED else _STATUS[m.status]


def actions_json(status: str) -> dict[str, Any]:
    def one(available: bool, code: str | None) -> dict[str, Any]:
        return {"available": True} if available else {"available": False, "reason_code": code}

    blocked = {"booting": "vm-has-not-launched", "terminating": "vm-is-terminating",
               "terminated": "vm-is-terminating", "preempted": "vm-is-terminating"}.get(status)
    acts = {a: one(blocked is None, blocked) for a in ("migrate", "rebuild", "restart", "cold_reboot")}
    # The sim accepts terminate while booting (and on a preempted instance, which removes it).
    acts["terminate"] = one(status not in ("terminating", "terminated"), "vm-is-terminating")
    return acts


def instance_json(m: Machine) -> dict[str, Any]:
    # The address is the machine's own (SSH on port 22 there); it keeps it once booted, also when
    # unhealthy, like a real instance keeps its IP. Optional fields are absent while unknown.
    status = status_of(m)
    out: dict[str, Any] = {
        "id": m.id, "status": status, "region": region_json(m.region),
        "instance_type": type_json(_TYPES[m.instance_type], m.region),
        "ssh_key_names": m.extra.get("ssh_key_names", []), "file_system_names": [],
        "actions": actions_json(status),
        "tags": m.extra.get("tags", []),
        "firewall_rulesets": [{"id": r} for r in m.extra.get("firewall_rulesets", [])],
    }
    if m.name is not None:
        out["name"] = m.name
    ip = m.address if m.status not in ("pending", TERMINATED) else None
    if ip:
        out.update(ip=ip, private_ip=ip)
    hostname = m.extra.get("hostname") or (ip.replace(".", "-") if ip else None)
    if hostname:
        out["hostname"] = hostname
    return out


def rate_limited(engine: Engine) -> int:
    """How many calls the documented rate limits refused since the last reset (injected faults aside)."""
    return int(engine.facade_state[NAME].get("rate_limited", 0))


def visible(engine: Engine) -> list[Machine]:
    """What the API lists: machines not gone, and preempted ones not yet terminated by the user."""
    return preemption.visible(engine, NAME)


def resolve_image(spec: ImageSpec | None, region: str) -> str:
    """The image id a launch gets: its `{id}` (in that region) or `{family}`'s, else the default."""
    if spec is None:
        return image_id(IMAGE_FAMILIES[0][0], region)
    if (spec.id is None) == (spec.family is None):
        raise Invalid("image must be {id} or {family}")
    for img in images():
        if img["region"]["name"] == region and spec.id in (None, img["id"]) \
                and spec.family in (None, img["family"]):
            return str(img["id"])
    raise Invalid(f"image {spec.id or spec.family!r} is not available in {region}")  # code [unconfirmed]


Effect = Callable[[CallPlan, Any], Any]


def build_router(engine: Engine, token: str) -> APIRouter:
    router = vendor_router(error_response)
    who_token = f"Bearer {token}"  # one identity for the key, however it was presented

    async def call(request: Request, op: str, effect: Effect, *, model: type[BaseModel] | None = None,
                   region: Callable[[Any], str] | None = None) -> Response:
        """Auth, the documented rate limits, the body, the faults, the effect (errors: the router's)."""
        check_auth(request, token)
        host = request.client.host if request.client else None
        try:
            engine.limiter.check(NAME, RATE_LIMITS, identity(who_token, host), op)
        except RateLimit:
            # How many calls the documented limits refused (tests read it: a paced client sees none).
            state = engine.facade_state[NAME]
            state["rate_limited"] = state.get("rate_limited", 0) + 1
            raise
        body = await json_body(request, model) if model is not None else None
        result = await run_op(engine, NAME, op, lambda plan: effect(plan, body),
                              region(body) if region is not None else None)
        return JSONResponse(result)

    def find(instance_id: str) -> Machine:
        m = next((m for m in visible(engine) if m.id == instance_id), None)
        if m is None:
            raise NotFound("Specified instance does not exist.")
        return m

    @router.get("/instance-types")
    async def instance_types(request: Request) -> Response:
        def effect(_: CallPlan, _b: None) -> dict[str, Any]:
            data: dict[str, Any] = {}
            for itype in INSTANCE_TYPES:
                regions = [r for r in itype.prices if engine.in_stock(NAME, itype.name, r) > 0]
                data[itype.name] = {"instance_type": type_json(itype),
                                    "regions_with_capacity_available": [region_json(r) for r in regions]}
            return {"data": data}
        return await call(request, "offers", effect)

    @router.get("/regions")
    async def regions(request: Request) -> Response:
        return await call(request, "offers", lambda _p, _b: {"data": [region_json(r.name) for r in REGIONS]})

    @router.get("/images")
    async def list_images(request: Request) -> Response:
        return await call(request, "offers", lambda _p, _b: {"data": images()})

    @router.get("/ssh-keys")
    async def list_keys(request: Request) -> Response:
        return await call(request, "ssh_keys", lambda _p, _b: {"data": list(engine.ssh_keys[NAME].values())})

    @router.post("/ssh-keys")
    async def add_key(request: Request) -> Response:
        def effect(_: CallPlan, body: SshKeyBody) -> dict[str, Any]:
            return {"data": engine.add_ssh_key(NAME, body.name, body.public_key)}
        return await call(request, "ssh_keys", effect, model=SshKeyBody)

    @router.delete("/ssh-keys/{key_id}")
    async def delete_key(request: Request, key_id: str) -> Response:
        def effect(plan: CallPlan, _b: None) -> dict[str, Any]:
            try:
                if not plan.ignores_delete:
                    engine.delete_ssh_key(NAME, key_id)
            except NotFound as exc:
                raise KeyNotFound(exc.message) from None
            return {"data": {}}
        return await call(request, "ssh_keys", effect)

    @router.post("/instance-operations/launch")
    async def launch(request: Request) -> Response:
        def effect(plan: CallPlan, body: LaunchBody) -> dict[str, Any]:
            if len(body.ssh_key_names) != 1:
                raise Invalid("ssh_key_names must contain exactly one key name")
            if body.file_system_names or body.file_system_mounts:
                raise Invalid("file systems are not supported by this simulation")
            if body.user_data is not None and len(body.user_data.encode()) > USER_DATA_MAX:
                raise Invalid("user_data cannot exceed 1MB")
            by_name = {k["name"]: k for k in engine.ssh_keys[NAME].values()}
            key = by_name.get(body.ssh_key_names[0])
            if key is None:  # a launch resource: 400 or 404 in the spec; we answer 404
                raise NotFound(f"SSH key {body.ssh_key_names[0]!r} does not exist")
            image = resolve_image(body.image, body.region_name) if body.region_name in _REGION_INFO else None
            rulesets = [r.id for r in body.firewall_rulesets]
            lambda_firewall.check_launch(engine, rulesets, body.region_name)
            made = engine.create(
                NAME, name=body.name, instance_type=body.instance_type_name, region=body.region_name,
                public_keys=[key["public_key"]], user_data=body.user_data, quantity=body.quantity,
                stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot,
                preempt_after=plan.preempt_after,
                extra={"ssh_key_names": list(body.ssh_key_names), "tags": [t.model_dump() for t in body.tags],
                       "hostname": body.hostname, "image": image, "firewall_rulesets": rulesets},
            )
            return {"data": {"instance_ids": [m.id for m in made]}}
        return await call(request, "create", effect, model=LaunchBody, region=lambda b: b.region_name)

    @router.get("/instances")
    async def list_instances(request: Request) -> Response:
        return await call(request, "list",
                          lambda _p, _b: {"data": [instance_json(m) for m in visible(engine)]})

    @router.get("/instances/{instance_id}")
    async def get_instance(request: Request, instance_id: str) -> Response:
        return await call(request, "get", lambda _p, _b: {"data": instance_json(find(instance_id))})

    @router.post("/instance-operations/terminate")
    async def terminate(request: Request) -> Response:
        def effect(_: CallPlan, body: TerminateBody) -> dict[str, Any]:
            machines = [find(i) for i in body.instance_ids]  # all exist, or 404 for all
            out = []
            for m in machines:
                if m.status == TERMINATED:  # preempted: the user's terminate removes it from the lists
                    preemption.release(engine, m)
                    out.append({**instance_json(m), "status": "terminated"})
                else:
                    out.append(instance_json(engine.terminate(NAME, m.id)))
            return {"data": {"terminated_instances": out}}
        return await call(request, "terminate", effect, model=TerminateBody)

    lambda_firewall.add_routes(router, engine, call, lambda: visible(engine), region_json)
    return router


FACADE = Facade(
    name=NAME, prefix="/lambda/api/v1", display_name="Lambda Cloud (simulated)", build_router=build_router,
    credentials=lambda token: {"api_key": token},
    login_user="ubuntu", regions=REGIONS, instance_types=INSTANCE_TYPES,
    names=FREE_FORM_64, machine_id=hex_id, preinstalled={"k3s": k3s.SCRIPT}, ssh_port=22,
    side_resources=lambda_firewall.side_resource_rows, rate_limits=RATE_LIMITS,
    ingress=lambda_firewall.ingress,
)

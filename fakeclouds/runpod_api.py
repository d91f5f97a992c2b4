"""RunPod, simulated: its REST API v2 (`https://api.runpod.io/v2`, OpenAPI 2.0.0 in `runpod/docs`
api-reference-v2/openapi.json), which only translates to the engine. `FACADE` at the bottom declares it.

What it models, as documented:
- a pod is a container on a GPU host in a data center (the engine's "region" is the data-center id,
  its "instance type" a GPU type at one GPU count); names are NOT unique; the login is `root`;
- `POST /pods` places one GPU type in one of `dataCenterIds` (or any data center of the `cloud` tier);
  errors are RFC 9457 `application/problem+json` {title, status, detail, errors?}: 422 when the body
  breaks the schema (`errors` lists each violation), 400 for a broken cross-field rule AND for no
  capacity (told apart only by `detail`), 402 insufficient balance (the engine's quota), 404 unknown id;
- SSH: the container's sshd authorizes the `PUBLIC_KEY` environment variable (one key per line);
  `startSsh` injects the account's registered keys (`PUT /account/ssh-keys`) there unless the request
  sets it. `ssh.direct` / `runtime.ports` report the mapped public port of `22/tcp` (only when `ports`
  has it and the pod is RUNNING): each machine listens on 127.0.0.1 at a random port;
- the catalog: `/catalog/gpus?include=AVAILABILITY&product=POD&count=&cloud=&countryCodes=` (stock
  per data center as NONE/LOW/MEDIUM/HIGH) and `/catalog/datacenters[?include=GPU_AVAILABILITY&regions=]`;
- status PROVISIONING -> STARTING -> RUNNING, ERROR when the machine died; `DELETE` (204) removes the
  pod at once from listings; a GET in the moments after shows TERMINATED, then 404;
- rate limits per API key, the windows `RateLimit-Policy` documents by example (60/min, 3000/h,
  50000/day), with 429 + `Retry-After` + `RateLimit` + `RateLimit-Policy`.

[unconfirmed]: the exact `detail` texts (capacity uses the GraphQL API's SUPPLY_CONSTRAINT message),
the availability thresholds, which data centers sell which tier, the id shape, 401's detail. Not
modelled: templates, CPU pods, mounts, stop/start/restart, PATCH, CUDA filters (accepted, ignored).
"""

from __future__ import annotations

import random
import re
import string
import time
from typing import Annotated, Any, Literal

import asyncssh
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from fakeclouds.bodies import M, json_value, validated
from fakeclouds.catalog import Gpu, InstanceType, Region
from fakeclouds.common import check_bearer, check_rate, iso, run_op
from fakeclouds.engine import PENDING, RUNNING, TERMINATING, Engine, Machine
from fakeclouds.errors import (
    BadBody,
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
from fakeclouds.facade import Facade, NameRule
from fakeclouds.faults import CallPlan
from fakeclouds.ratelimit import Limit
from fakeclouds.ssh import parse_public_key
from fakeclouds.vendor_errors import retry_after_header, vendor_router

NAME = "runpod"
# The GraphQL API's out-of-stock message (extensions.code SUPPLY_CONSTRAINT); v2 documents only that
# capacity is a 400 whose `detail` says so. [unconfirmed] that v2 passes this text through.
NO_CAPACITY = ("There are no longer any instances available with the requested specifications. "
               "Please refresh and try again.")
PROXY_HOST = "ssh.runpod.io"  # RunPod's SSH proxy: interactive shells only (not reachable here)

# (id, continent, country, tier, description). RunPod's real data-center ids; which tier each sells
# is the simulation's choice (community hosts are modelled as their own data centers).
DATA_CENTERS = (
    ("US-KS-2", "NORTH_AMERICA", "US", "SECURE", "US Kansas 2"),
    ("US-TX-3", "NORTH_AMERICA", "US", "SECURE", "US Texas 3"),
    ("CA-MTL-1", "NORTH_AMERICA", "CA", "SECURE", "CA Montreal 1"),
    ("EU-RO-1", "EUROPE", "RO", "SECURE", "EU Romania 1"),
    ("EUR-IS-1", "EUROPE", "IS", "SECURE", "EUR Iceland 1"),
    ("US-GA-1", "NORTH_AMERICA", "US", "COMMUNITY", "US Georgia 1"),
    ("EU-SE-1", "EUROPE", "SE", "COMMUNITY", "EU Sweden 1"),
)
_DC = {d[0]: d for d in DATA_CENTERS}
CONTINENTS = ("NORTH_AMERICA", "SOUTH_AMERICA", "EUROPE", "ASIA", "MIDDLE_EAST", "AFRICA", "OCEANIA",
              "ANTARCTICA", "UNKNOWN")


class GpuModel(BaseModel):
    id: str  # what pods are created with
    name: str
    memory: int  # GB
    secure: float  # list price per GPU-hour by tier (illustrative, of runpod.io/pricing's order)
    community: float
    smi_name: str
    memory_mib: int
    data_centers: tuple[str, ...]
    counts: tuple[int, ...] = (1, 2, 4, 8)


GPUS = (
    GpuModel(id="NVIDIA RTX A4000", name="RTX A4000", memory=16, secure=0.25, community=0.17,
             smi_name="NVIDIA RTX A4000", memory_mib=16376, data_centers=("US-KS-2", "EU-RO-1", "EU-SE-1"),
             counts=(1, 2, 4)),
    GpuModel(id="NVIDIA GeForce RTX 4090", name="RTX 4090", memory=24, secure=0.69, community=0.34,
             smi_name="NVIDIA GeForce RTX 4090", memory_mib=24564,
             data_centers=("US-TX-3", "CA-MTL-1", "EUR-IS-1", "US-GA-1", "EU-SE-1"), counts=(1, 2, 4)),
    GpuModel(id="NVIDIA RTX A6000", name="RTX A6000", memory=48, secure=0.49, community=0.33,
             smi_name="NVIDIA RTX A6000", memory_mib=49140, data_centers=("US-KS-2", "CA-MTL-1", "US-GA-1")),
    GpuModel(id="NVIDIA L40S", name="L40S", memory=48, secure=0.86, community=0.79, smi_name="NVIDIA L40S",
             memory_mib=46068, data_centers=("US-TX-3", "EU-RO-1")),
    GpuModel(id="NVIDIA H100 80GB HBM3", name="H100 SXM", memory=80, secure=2.69, community=2.39,
             smi_name="NVIDIA H100 80GB HBM3", memory_mib=81559, data_centers=("US-KS-2", "EUR-IS-1")),
)
_GPU = {g.id: g for g in GPUS}
_STOCK = {1: 4, 2: 2, 4: 1, 8: 1}


def type_name(gpu_id: str, count: int) -> str:
    return f"{count}x {gpu_id}"


def _instance_type(g: GpuModel, count: int) -> InstanceType:
    def price(dc: str) -> float:
        return round((g.secure if _DC[dc][3] == "SECURE" else g.community) * count, 4)
    return InstanceType(
        name=type_name(g.id, count), description=f"{count}x {g.name}", gpu_description=g.name,
        vcpus=2 * count, memory_gib=8 * count, storage_gib=50,  # the v1-documented per-GPU floors
        gpu=Gpu(g.name.replace(" ", ""), g.smi_name, g.memory_mib, count),
        prices={dc: price(dc) for dc in g.data_centers}, spot_factor=None,
        default_stock={dc: _STOCK[count] for dc in g.data_centers})


INSTANCE_TYPES = tuple(_instance_type(g, n) for g in GPUS for n in g.counts)
REGIONS = tuple(Region(d[0], d[4]) for d in DATA_CENTERS)

# The windows RateLimit-Policy documents by example: '"minute";q=60;w=60, "hour";q=3000;w=3600,
# "day";q=50000;w=86400', per user (here: per API key). [unconfirmed] that these are the real quotas.
WINDOWS = (("minute", 60, 60.0), ("hour", 3000, 3600.0), ("day", 50000, 86400.0))
RATE_LIMITS = tuple(Limit(calls=q, per_s=w, what=f"rate limit for the {n} window") for n, q, w in WINDOWS)
POLICY = ", ".join(f'"{n}";q={q};w={int(w)}' for n, q, w in WINDOWS)

# ------------------------------------------------------------------ errors (RFC 9457 problem+json)

_TITLES = {400: "Bad Request", 401: "Unauthorized", 402: "Payment Required", 403: "Forbidden",
           404: "Not Found", 409: "Conflict", 422: "Unprocessable Entity", 429: "Too Many Requests",
           500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
           504: "Gateway Timeout"}


class Unprocessable(Invalid):
    """The body does not match the schema: 422 with one `errors` entry per violation."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("Request validation failed.")
        self.errors = errors


class Conflict(CloudError):
    pass


def problem(status: int, detail: str, errors: list[str] | None = None,
            headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"title": _TITLES.get(status, "Error"), "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return JSONResponse(body, status_code=status, media_type="application/problem+json", headers=headers)


def error_response(exc: CloudError, _request: Request | None = None) -> JSONResponse:
    if isinstance(exc, BadBody):  # the body's every violation, in the API's words
        errors = schema_errors(exc.problems) if exc.problems else ["$: request body must be JSON"]
        return problem(422, "Request validation failed.", errors, {"RateLimit-Policy": POLICY})
    if isinstance(exc, Unprocessable):
        return problem(422, exc.message, exc.errors, {"RateLimit-Policy": POLICY})
    if isinstance(exc, RateLimit):
        window = next((n for n, _, w in WINDOWS if f"per {w:g} s" in exc.message), "minute")
        wait = retry_after_header(exc.retry_after)
        return problem(429, f"rate limit exceeded for the {window} window", headers={
            "Retry-After": wait, "RateLimit": f'"{window}";r=0;t={wait}', "RateLimit-Policy": POLICY})
    if isinstance(exc, Unauthorized):
        return problem(401, "invalid or missing bearer token")  # no RateLimit headers: not authenticated
    status = 500
    for cls, st in ((NotFound, 404), (Invalid, 400), (NoCapacity, 400), (QuotaExceeded, 402),
                    (Conflict, 409), (LostResponse, 504)):
        if isinstance(exc, cls):
            status = st
    if isinstance(exc, ServerFault):
        status = exc.status
    detail = {NoCapacity: NO_CAPACITY,
              QuotaExceeded: "Insufficient balance: add funds to your account to deploy this pod.",
              ServerFault: "upstream failure", LostResponse: "upstream timed out"}.get(type(exc), exc.message)
    return problem(status, detail, headers={"RateLimit-Policy": POLICY})


def schema_errors(problems: list[dict[str, Any]]) -> list[str]:
    """pydantic's errors in the API's style: "$.gpu.count: ..." / "$: additional properties ..."."""
    out = []
    for err in problems:
        *parent, last = ["$", *(str(p) for p in err["loc"])] if err["loc"] else ["$", ""]
        if err["type"] == "extra_forbidden":
            out.append(f"{'.'.join(parent)}: additional properties '{last}' not allowed")
        elif err["type"] == "missing":
            out.append(f"{'.'.join(parent)}: missing property '{last}'")
        else:
            out.append(f"{'.'.join([*parent, last])}: {err['msg']}")
    return out


async def parse(request: Request, model: type[M]) -> M:
    """The body validated into `model`; any JSON value (not only an object) goes to the model, so
    a list is refused in the schema's words."""
    return validated(await json_value(request), model)


# ------------------------------------------------------------------ request bodies (the v2 schemas)

_STRICT = ConfigDict(extra="forbid")
_CUDA = r"^\d+\.\d+$"


class GpuBody(BaseModel):
    model_config = _STRICT
    id: str
    count: int = Field(default=1, ge=1)
    allowedCudaVersions: list[Annotated[str, Field(pattern=_CUDA)]] | None = None  # noqa: N815 — API names
    minCudaVersion: str | None = Field(default=None, pattern=_CUDA)  # noqa: N815


class CreatePod(BaseModel):
    model_config = _STRICT
    name: str = Field(min_length=1)
    image: str | None = None
    args: str | None = None
    disk: int | None = Field(default=None, ge=1)
    env: dict[str, str] = Field(default_factory=dict)
    ports: list[str] = Field(default_factory=list)
    registry: str | None = None
    cloud: Literal["SECURE", "COMMUNITY"] = "SECURE"
    cpu: dict[str, Any] | None = None
    dataCenterIds: list[str] = Field(default_factory=list)  # noqa: N815
    globalNetworking: bool = False  # noqa: N815
    gpu: GpuBody | None = None
    mounts: dict[str, Any] | None = None
    startJupyter: bool = False  # noqa: N815
    startSsh: bool = False  # noqa: N815
    templateId: str | None = Field(default=None, min_length=1)  # noqa: N815


class SshKeysBody(BaseModel):
    model_config = _STRICT
    keys: list[str]  # each must match _KEY_LINE (checked after the schema, one error per entry)


class ActionBody(BaseModel):
    model_config = _STRICT
    action: Literal["start", "stop", "restart", "terminate"]


_KEY_LINE = re.compile(r"^(ssh|ecdsa|sk)-\S+ \S+([ \t][^\n\r]*)?$")
_PORT = re.compile(r"^\d{1,5}/(tcp|http|udp)$")


# ------------------------------------------------------------------ JSON shapes


_LEVELS = ["NONE", "LOW", "MEDIUM", "HIGH"]


def _level(stock: int) -> str:
    # RunPod publishes no thresholds; the simulation's: none, 1, 2-3, 4+.
    return "NONE" if stock <= 0 else "LOW" if stock == 1 else "MEDIUM" if stock < 4 else "HIGH"


def _status(m: Machine, boot_delay: float) -> str:
    if m.status == PENDING:  # allocated first, then the container starts
        return "PROVISIONING" if time.time() < m.created_at + boot_delay / 2 else "STARTING"
    return {RUNNING: "RUNNING", TERMINATING: "TERMINATED"}.get(m.status, "ERROR")


_ACTIONS = {"PROVISIONING": ["stop", "terminate"], "STARTING": ["stop", "terminate"],
            "RUNNING": ["stop", "restart", "terminate"], "ERROR": ["start", "terminate"], "TERMINATED": []}


def gpu_json(g: GpuModel) -> dict[str, Any]:
    tiers = {t: any(_DC[d][3] == t for d in g.data_centers) for t in ("SECURE", "COMMUNITY")}
    return {"id": g.id, "name": g.name, "pool": None, "manufacturer": "NVIDIA", "memory": g.memory,
            "secure": tiers["SECURE"], "community": tiers["COMMUNITY"],
            "price": {"secure": g.secure, "community": g.community},
            "maxCount": {t.lower(): max(g.counts) if sells else 0 for t, sells in tiers.items()}}


def pod_json(m: Machine, boot_delay: float, status: str | None = None) -> dict[str, Any]:
    x = m.extra
    status = status or _status(m, boot_delay)
    sshd = status == "RUNNING" and m.host is not None and "22/tcp" in x["ports"]
    direct = {"host": m.host, "port": m.ssh_port, "username": "root",
              "command": f"ssh root@{m.host} -p {m.ssh_port}"} if sshd else None
    user = x["proxy_user"]
    proxy = None if status in ("PROVISIONING", "TERMINATED") else {
        "host": PROXY_HOST, "port": 22, "username": user, "command": f"ssh {user}@{PROXY_HOST}"}
    runtime = None
    if status == "RUNNING":
        ports = [{"private": int(p.split("/")[0]), "public": None, "type": p.split("/")[1], "ip": None}
                 for p in x["ports"] if p != "22/tcp"]
        if sshd:
            ports.insert(0, {"private": 22, "public": m.ssh_port, "type": "tcp", "ip": m.host})
        runtime = {"uptime": int(max(0.0, time.time() - m.boot_at)), "ports": ports}
    return {
        "id": m.id, "name": m.name, "image": x["image"], "args": x.get("args") or "", "disk": x["disk"],
        "ports": list(x["ports"]), "env": dict(x["env"]), "registry": None, "status": status,
        "actions": list(_ACTIONS.get(status, [])), "mounts": {},
        "gpu": {"id": x["gpu_id"], "count": x["gpu_count"]}, "cloud": x["cloud"], "dataCenterId": m.region,
        "cudaVersion": "12.8", "ssh": {"proxy": proxy, "direct": direct},
        "template": None, "cost": 0.0 if status == "TERMINATED" else m.price_per_hour, "locked": False,
        "globalNetworking": {"enabled": False}, "runtime": runtime, "createdAt": iso(m.created_at),
        "startedAt": iso(m.boot_at) if status in ("RUNNING", "ERROR") else None,
    }


def pod_id() -> str:
    """RunPod pod ids look like '7h9k2m4n6p' (lower-case letters and digits; length [unconfirmed])."""
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=14))


def _csv(request: Request, name: str) -> list[str]:
    raw = request.query_params.get(name)
    return [v.strip() for v in raw.split(",") if v.strip()] if raw else []


def _bool(request: Request, name: str) -> bool | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if raw not in ("true", "false"):
        raise Unprocessable([f"$.query.{name}: must be a boolean"])
    return raw == "true"


# ------------------------------------------------------------------ the API


def build_router(engine: Engine, token: str) -> APIRouter:
    router = vendor_router(error_response)
    state = engine.facade_state[NAME]

    async def call(request: Request, op: str, effect: Any, *, status: int = 200,
                   region: str | None = None) -> Response:
        """Auth, the documented limits, faults, the effect; RateLimit-Policy on every answer."""
        check_bearer(request, token)
        check_rate(engine, NAME, request, op)
        body = await run_op(engine, NAME, op, effect, region)
        headers = {"RateLimit-Policy": POLICY}
        if status == 204:
            return Response(status_code=204, headers=headers)
        return JSONResponse(body, status_code=status, headers=headers)

    def stock(type_: str, dc: str) -> int:
        return engine.in_stock(NAME, type_, dc)

    def live(m: Machine) -> bool:
        return m.status != TERMINATING  # a deleted pod leaves listings at once

    @router.get("/catalog/gpus")
    async def catalog_gpus(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            include, product = _csv(request, "include"), _csv(request, "product")
            countries, cloud = _csv(request, "countryCodes"), request.query_params.get("cloud", "SECURE")
            count_raw = request.query_params.get("count", "1")
            bad = [v for v in include if v != "AVAILABILITY"]
            bad += [v for v in product if v not in ("POD", "CLUSTER", "SERVERLESS")]
            bad += [c for c in countries if not re.fullmatch(r"[A-Z]{2}", c)]
            if bad or cloud not in ("SECURE", "COMMUNITY") or not count_raw.isdigit() or int(count_raw) < 1:
                raise Unprocessable(["$.query: invalid include, product, cloud, count or countryCodes value"])
            with_availability = bool(include)
            if with_availability != bool(product):
                raise Invalid("include=AVAILABILITY and product must be given together")
            given = set(request.query_params) & {"count", "cloud", "countryCodes", "cudaVersions",
                                                 "minCudaVersion"}
            if given and not with_availability:
                raise Invalid(f"{', '.join(sorted(given))} valid only with include=AVAILABILITY")
            count = int(count_raw)
            out = []
            for g in GPUS:
                row = gpu_json(g)
                if with_availability:
                    dcs = [d for d in g.data_centers if _DC[d][3] == cloud and count in g.counts
                           and (not countries or _DC[d][2] in countries)]
                    if countries and not any(_DC[d][2] in countries for d in g.data_centers):
                        continue  # no data center in those countries: the type drops out
                    levels = [_level(stock(type_name(g.id, count), d)) for d in dcs]
                    row["availability"] = max(levels, key=_LEVELS.index, default="NONE")
                    if dcs:
                        row["dataCenters"] = [{"id": d, "name": _DC[d][4], "availability": lv}
                                              for d, lv in zip(dcs, levels, strict=True)]
                out.append(row)
            return {"gpus": out}
        return await call(request, "offers", effect)

    @router.get("/catalog/datacenters")
    async def catalog_datacenters(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            include, regions = _csv(request, "include"), _csv(request, "regions")
            if any(v not in ("GPU_AVAILABILITY", "CPU_AVAILABILITY") for v in include) \
                    or any(r not in CONTINENTS for r in regions):
                raise Unprocessable(["$.query: invalid include or regions value"])
            global_network = _bool(request, "globalNetwork")
            out = []
            for dc, continent, _country, tier, desc in DATA_CENTERS:
                if (regions and continent not in regions) or global_network is True:
                    continue  # no simulated data center has global networking
                row: dict[str, Any] = {"id": dc, "name": desc, "region": continent, "globalNetwork": False,
                                       "networkVolumeTypes": ["STANDARD"] if tier == "SECURE" else [],
                                       "compliance": []}
                if "GPU_AVAILABILITY" in include:
                    row["gpuAvailability"] = [{"id": g.id, "name": g.name,
                                               "availability": _level(stock(type_name(g.id, 1), dc))}
                                              for g in GPUS if dc in g.data_centers]
                out.append(row)
            return {"dataCenters": out}
        return await call(request, "offers", effect)

    @router.get("/account/ssh-keys")
    async def get_keys(request: Request) -> Response:
        return await call(request, "ssh_keys", lambda _: {"keys": list(state.get("ssh_keys", []))})

    @router.put("/account/ssh-keys")
    async def put_keys(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            return {"keys": list(state.get("ssh_keys", []))}

        check_bearer(request, token)
        body = await parse(request, SshKeysBody)
        bad = [f"$.keys.{i}: does not match pattern" for i, k in enumerate(body.keys)
               if not _KEY_LINE.match(k)]
        if bad:
            raise Unprocessable(bad)

        def replace(plan: CallPlan) -> dict[str, Any]:
            state["ssh_keys"] = list(body.keys)  # a complete replacement, not a merge
            engine.save()
            return effect(plan)
        return await call(request, "ssh_keys", replace)

    def authorized_keys(body: CreatePod) -> list[str]:
        """What the image's sshd will authorize: PUBLIC_KEY's lines (startSsh fills it with the account's
        keys unless the request set it). A line that is no key is ignored, as sshd ignores it."""
        text = body.env.get("PUBLIC_KEY")
        if text is None and body.startSsh:
            text = "\n".join(state.get("ssh_keys", []))
        keys = []
        for line in (text or "").splitlines():
            try:
                parse_public_key(line)
            except ValueError:
                continue
            keys.append(line.strip())
        return keys

    def check_rules(body: CreatePod) -> GpuModel:
        """The handler's cross-field rules (400), after the schema (422)."""
        if body.templateId is not None:
            raise NotFound(f"template {body.templateId!r} not found")  # the simulation has no templates
        if body.image is None:
            raise Unprocessable(["$: missing property 'image'"])
        if (body.gpu is None) == (body.cpu is None):
            raise Invalid("exactly one of gpu or cpu must be set")
        if body.cpu is not None or body.gpu is None:
            raise Invalid("CPU pods are not offered by this simulation")
        gpu = _GPU.get(body.gpu.id)
        if gpu is None:
            raise Invalid(f"unknown GPU type {body.gpu.id!r}")
        unknown = [d for d in body.dataCenterIds if d not in _DC]
        if unknown:
            raise Invalid(f"unknown data center {unknown[0]!r}")
        bad_ports = [p for p in body.ports if not _PORT.match(p)]
        if bad_ports:
            raise Invalid(f"port {bad_ports[0]!r} must be formatted as port/protocol")
        if body.gpu.allowedCudaVersions and body.gpu.minCudaVersion:
            raise Invalid("allowedCudaVersions and minCudaVersion are mutually exclusive")
        return gpu

    @router.post("/pods")
    async def create_pod(request: Request) -> Response:
        check_bearer(request, token)
        body = await parse(request, CreatePod)
        gpu = check_rules(body)
        assert body.gpu is not None and body.image is not None
        count, type_ = body.gpu.count, type_name(gpu.id, body.gpu.count)

        def effect(plan: CallPlan) -> dict[str, Any]:
            # Placement: the first requested data center of the tier with stock, else any of them.
            offered = [d for d in (body.dataCenterIds or gpu.data_centers)
                       if d in gpu.data_centers and _DC[d][3] == body.cloud and count in gpu.counts]
            placed = next((d for d in offered if stock(type_, d) > 0), None)
            if placed is None:
                raise NoCapacity(NO_CAPACITY)
            keys = authorized_keys(body)
            # No key: the container starts without SSH access. The engine's sshd needs one; a key whose
            # private half nobody holds authorizes nobody.
            keys = keys or [asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()]
            (m,) = engine.create(
                NAME, name=body.name, instance_type=type_, region=placed, public_keys=keys,
                stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot,
                extra={"image": body.image, "env": dict(body.env), "ports": list(body.ports),
                       "args": body.args, "disk": body.disk or 50, "cloud": body.cloud, "gpu_id": gpu.id,
                       "gpu_count": count, "proxy_user": f"{pod_id()[:10]}-{random.getrandbits(32):08x}"},
            )
            return pod_json(m, engine.boot_delay, status="PROVISIONING")
        region = body.dataCenterIds[0] if body.dataCenterIds else None
        return await call(request, "create", effect, status=201, region=region)

    @router.get("/pods")
    async def list_pods(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            _bool(request, "includeClusterPods")
            return {"pods": [pod_json(m, engine.boot_delay) for m in engine.live(NAME) if live(m)]}
        return await call(request, "list", effect)

    @router.get("/pods/{pod}")
    async def get_pod(request: Request, pod: str) -> Response:
        return await call(request, "get", lambda _: pod_json(engine.get(NAME, pod), engine.boot_delay))

    def delete(pod: str) -> None:
        m = engine.get(NAME, pod)
        if not live(m):
            raise NotFound("pod not found")
        engine.terminate(NAME, m.id)

    @router.delete("/pods/{pod}")
    async def delete_pod(request: Request, pod: str) -> Response:
        return await call(request, "terminate", lambda _: delete(pod), status=204)

    @router.post("/pods/{pod}/action")
    async def pod_action(request: Request, pod: str) -> Response:
        check_bearer(request, token)
        body = await parse(request, ActionBody)
        if body.action == "terminate":
            return await call(request, "terminate", lambda _: delete(pod), status=204)

        def refuse(_: CallPlan) -> None:
            status = _status(engine.get(NAME, pod), engine.boot_delay)
            if body.action not in _ACTIONS.get(status, []):
                raise Conflict(f"action {body.action!r} is not valid for a pod in status {status}")
            raise Invalid(f"action {body.action!r} is not modelled by this simulation")
        return await call(request, "get", refuse)

    return router


FACADE = Facade(
    name=NAME, prefix="/runpod/v2", display_name="RunPod (simulated)", build_router=build_router,
    credentials=lambda token: {"api_key": token},
    login_user="root", regions=REGIONS, instance_types=INSTANCE_TYPES,
    # v2 requires a name (minLength 1) and says nothing of uniqueness; v1 documents "does not need to
    # be unique" and at most 191 characters.
    names=NameRule(required=True, unique=False, max_length=191, hint="name must be 1-191 characters"),
    machine_id=pod_id, ssh_port=None, rate_limits=RATE_LIMITS,
    api_self_end="runpodctl",  # every pod has RUNPOD_POD_ID and a RUNPOD_API_KEY scoped to it
)

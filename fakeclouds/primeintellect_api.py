"""Prime Intellect, simulated: a GPU marketplace and its public API (/api/v1, research/provider-facts.md
B.5, shapes as the official `prime` CLI and SkyPilot read them). `FACADE` at the bottom declares it.

What it models:
- Offers are marketplace listings: one item per (upstream provider, GPU configuration, data center) in
  stock, `GET /availability/gpus` paginated as `{items, totalCount}` (`page` from 1, `page_size` at
  most 100 [unconfirmed cap]) and filtered by `regions` (PI region slugs: united_states, canada, ...),
  `gpu_type`, `gpu_count`; an unknown region is a 422. `GET /availability/` answers the older grouped
  shape and, without its trailing slash, 307s (the quirk one client notes).
- The collections are served where the vendor's OpenAPI puts them, with a trailing slash: `/pods/` and
  `/ssh_keys/` (GET, POST); the slashless forms 307 to them, as a FastAPI server does. Which form the
  real server answers without a redirect is [unconfirmed] (one client notes "use trailing slash to avoid
  redirects"), so `facade_state["primeintellect"]["slashless"] = True` turns it around: the slashless
  forms serve and the slash forms 307 to them (FastAPI's routes declared without the slash).
- SSH keys are account-level (`GET/POST /ssh_keys/ {name, publicKey}`): every pod is created with every
  key on the account [unconfirmed: no client passes a key per pod]. A public key already registered is
  refused (400) [unconfirmed].
- `POST /pods {pod: {name, cloudId, gpuType, socket, gpuCount, dataCenterId?, ...}, provider: {type}}`
  launches on the matching listing (without `dataCenterId`, in any data center that has stock). Names
  are optional, not unique, at most 64 chars of letters, digits and dashes with one letter at least
  [length unconfirmed; charset as the CLI's prompt checks].
- Pods go PROVISIONING (installationStatus PENDING) -> ACTIVE while the image installs (installationStatus
  ACTIVE: the spec's InstallationStatusEnum is PENDING/ACTIVE/FINISHED/ERROR/TERMINATED, never null in a
  pod; `sshConnection` `[null]`) -> ACTIVE with `sshConnection` "root@127.0.0.1 -p <port>" (the pod's SSH
  is a mapped port; `Facade.ssh_port=None`) -> DELETING -> gone from `/pods` and `/pods/status` (in
  `/pods/history`; `GET /pods/{id}` 404s [unconfirmed]); ERROR when it died. No idempotency token.
  `DELETE /pods/{id}` answers the pod's status (`APIDeletePodResponse {status}`).
- GPU types are the spec's `GPUType` words (`A6000_48GB`, not `RTXA6000_48GB`); SSH key items carry the
  spec's required `userId`, `isPrimary`, `isUserKey`.
- A body/query that does not validate is a 422 `{"errors": [{param, details}]}` (the spec's
  ErrorResponse, not FastAPI's default `{detail: [{loc, msg, type}]}`). Other errors are `{"detail": ...}`
  [sdk: the CLI reads `detail`; the spec documents no other error body]. Out of stock is a 400 whose
  detail says so (no error code: clients classify by words) [status unconfirmed]; the account's quota
  is a 402 (the CLI reads 402 as "payment required"); 429 `{"detail": "Too many requests"}` +
  Retry-After [unconfirmed], under an [unconfirmed] limit (no number is published).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fakeclouds import k3s
from fakeclouds.bodies import M, json_value, validated
from fakeclouds.catalog import Gpu, InstanceType, Region
from fakeclouds.common import check_bearer, iso, make_call
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
from fakeclouds.facade import Facade, NameRule, hex_id
from fakeclouds.faults import CallPlan
from fakeclouds.ratelimit import Limit
from fakeclouds.ssh import parse_public_key
from fakeclouds.vendor_errors import retry_after_header, vendor_router

NAME = "primeintellect"
LOGIN_USER = "root"  # what `sshConnection` names on the pods of this simulation
MAX_PAGE = 100
DEFAULT_IMAGE = "ubuntu_22_cuda_12"

# Data centers as the marketplace names them, with their PI region slug and country.
DATA_CENTERS: dict[str, tuple[str, str]] = {
    "US-KS-2": ("united_states", "US"),
    "US-CA-2": ("united_states", "US"),
    "CA-MTL-1": ("canada", "CA"),
    "CA-MTL-3": ("canada", "CA"),
    "EUR-IS-1": ("eu_north", "IS"),
}


@dataclass(frozen=True)
class Listing:
    """One GPU configuration an upstream provider sells through the marketplace, in some data centers."""

    provider: str
    cloud_id: str
    gpu_type: str
    socket: str
    gpu: Gpu
    vcpus: int
    memory_gb: int
    disk_gb: int
    price: float
    stock: dict[str, int]  # data center -> default stock
    security: str = "secure_cloud"

    @property
    def name(self) -> str:  # the engine's instance type (admin stock knobs use it)
        return f"pi-{self.provider}-{self.gpu.count}x{self.gpu_type}-{self.socket}".lower()


LISTINGS = (
    Listing("tensordock", "NVIDIA RTX A6000", "A6000_48GB", "PCIe",
            Gpu("A6000", "NVIDIA RTX A6000", 49140, 1),
            9, 50, 120, 0.49, {"US-KS-2": 4, "CA-MTL-1": 2}),
    Listing("datacrunch", "1A6000.10V", "A6000_48GB", "PCIe", Gpu("A6000", "NVIDIA RTX A6000", 49140, 1),
            10, 60, 100, 0.59, {"EUR-IS-1": 2}),
    Listing("tensordock", "NVIDIA A100 80GB PCIe", "A100_80GB", "PCIe",
            Gpu("A100", "NVIDIA A100 80GB PCIe", 81920, 1), 14, 125, 120, 1.64, {"US-KS-2": 2}),
    Listing("tensordock", "NVIDIA H100 80GB HBM3", "H100_80GB", "SXM5",
            Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 1), 20, 125, 120, 2.69,
            {"CA-MTL-3": 2, "US-CA-2": 1}),
    Listing("lambdalabs", "gpu_8x_h100_sxm5", "H100_80GB", "SXM5",
            Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 8), 208, 1800, 1000, 23.92, {"US-CA-2": 1}),
)
_BY_NAME = {listing.name: listing for listing in LISTINGS}
REGIONS = tuple(Region(dc, f"{country} ({region})") for dc, (region, country) in DATA_CENTERS.items())
PI_REGIONS = sorted({region for region, _ in DATA_CENTERS.values()} | {"eu_east", "eu_west", "asia_northeast",
                                                                      "australia"})
INSTANCE_TYPES = tuple(
    InstanceType(name=ls.name, description=f"{ls.gpu.count}x {ls.gpu_type} ({ls.provider})",
                 gpu_description=ls.cloud_id, vcpus=ls.vcpus, memory_gib=ls.memory_gb, storage_gib=ls.disk_gb,
                 gpu=ls.gpu, prices={dc: ls.price for dc in ls.stock}, default_stock=dict(ls.stock))
    for ls in LISTINGS
)
# Pod names: the CLI asks for letters, digits and dashes with at least one letter.
NAMES = NameRule(required=False, unique=False, max_length=64, pattern=r"(?=.*[A-Za-z])[A-Za-z0-9-]+",
                 hint="name must be 1-64 letters, digits or dashes, with at least one letter")


class Unprocessable(Invalid):
    """A request that does not validate: 422 with its list of `{loc, msg, type}` (answered in the spec's
    ErrorResponse shape by error_response)."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__("validation failed")
        self.errors = errors


def error_response(exc: CloudError, _request: Request | None = None) -> JSONResponse:
    if isinstance(exc, BadBody):  # as FastAPI answers a request body it cannot validate
        exc = Unprocessable(
            [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.problems]
            or [{"loc": ["body"], "msg": "JSON decode error", "type": "json_invalid"}])
    headers = None
    detail: Any = exc.message
    if isinstance(exc, Unprocessable):  # the spec's ErrorResponse: {"errors": [{param, details}]}
        errors = [{"param": ".".join(str(p) for p in e["loc"]), "details": str(e["msg"])}
                  for e in exc.errors]
        return JSONResponse({"errors": errors}, status_code=422)
    elif isinstance(exc, Unauthorized):
        status, detail = 401, "Invalid or missing API key"
    elif isinstance(exc, NotFound):
        status = 404
    elif isinstance(exc, NoCapacity):
        status, detail = 400, f"Pod creation failed: {exc.message} (out of stock)"
    elif isinstance(exc, QuotaExceeded):
        status, detail = 402, f"Payment required: {exc.message}"
    elif isinstance(exc, RateLimit):
        status, detail = 429, "Too many requests"
        headers = {"Retry-After": retry_after_header(exc.retry_after)}
    elif isinstance(exc, LostResponse):
        status, detail = 504, "Gateway Timeout"
    elif isinstance(exc, ServerFault):
        status, detail = exc.status, "Internal Server Error"
    else:
        status = 400
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _validate(model: type[BaseModel], raw: Any, where: str) -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        errors = [{"loc": [where, *e["loc"]], "msg": e["msg"], "type": e["type"]}
                  for e in exc.errors(include_url=False, include_input=False, include_context=False)]
        raise Unprocessable(errors) from None


async def _body(request: Request, model: type[M]) -> M:
    """The body validated into `model`, any JSON value (the model refuses a non-object)."""
    return validated(await json_value(request), model)


# --------------------------------------------------------------------------- request shapes


class _Strict(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


class AvailabilityQuery(_Strict):
    regions: list[str] = Field(default_factory=list)
    gpu_type: str | None = None
    gpu_count: int | None = Field(default=None, ge=1)
    page: int = Field(default=1, ge=1)
    page_size: int = Field(default=MAX_PAGE, ge=1, le=MAX_PAGE)


class PodSpec(_Strict):
    name: str | None = None
    cloud_id: str = Field(alias="cloudId")
    gpu_type: str = Field(alias="gpuType")
    socket: str
    gpu_count: int = Field(alias="gpuCount", ge=1)
    disk_size: int | None = Field(default=None, alias="diskSize")
    vcpus: int | None = None
    memory: int | None = None
    image: str | None = None
    data_center_id: str | None = Field(default=None, alias="dataCenterId")
    country: str | None = None
    security: str | None = None


class ProviderSpec(_Strict):
    type: str


class CreatePod(_Strict):
    pod: PodSpec
    provider: ProviderSpec
    team: dict[str, Any] | None = None


class SshKeyBody(_Strict):
    name: str = Field(min_length=1, max_length=100)
    public_key: str = Field(alias="publicKey", min_length=1)


# --------------------------------------------------------------------------- answers


def _stock_status(n: int) -> str:
    return "High" if n >= 5 else "Medium" if n >= 3 else "Low"


def item_json(ls: Listing, dc: str, stock: int) -> dict[str, Any]:
    region, country = DATA_CENTERS[dc]
    fixed = {"minCount": None, "maxCount": None, "pricePerUnit": None, "step": None,
             "defaultIncludedInPrice": None, "additionalInfo": None}
    return {
        "cloudId": ls.cloud_id, "gpuType": ls.gpu_type, "socket": ls.socket, "provider": ls.provider,
        "region": region, "dataCenter": dc, "country": country, "gpuCount": ls.gpu.count,
        "gpuMemory": ls.gpu.memory_gib,
        "disk": {**fixed, "minCount": ls.disk_gb, "defaultCount": ls.disk_gb, "maxCount": ls.disk_gb * 10},
        "vcpu": {**fixed, "defaultCount": ls.vcpus}, "memory": {**fixed, "defaultCount": ls.memory_gb},
        "internetSpeed": None, "interconnect": None, "interconnectType": None, "provisioningTime": None,
        "stockStatus": _stock_status(stock), "security": ls.security,
        "prices": {"onDemand": ls.price, "communityPrice": None, "isVariable": None, "currency": "USD"},
        "images": [DEFAULT_IMAGE, "cuda_12_4_pytorch_2_5"], "isSpot": None, "prepaidTime": None,
    }


def _items(engine: Engine, q: AvailabilityQuery) -> list[dict[str, Any]]:
    out = []
    for ls in LISTINGS:
        if (q.gpu_type and ls.gpu_type != q.gpu_type) or (q.gpu_count and ls.gpu.count != q.gpu_count):
            continue
        for dc in ls.stock:
            stock = engine.in_stock(NAME, ls.name, dc)
            if stock > 0 and (not q.regions or DATA_CENTERS[dc][0] in q.regions):
                out.append(item_json(ls, dc, stock))
    return out


def _phase(m: Machine) -> tuple[str, str]:
    """(status, installationStatus): a pending pod is PROVISIONING for the first half of its boot, then
    ACTIVE while its image installs (no SSH yet), like the marketplace's pods."""
    if m.status == PENDING:
        if time.time() < m.created_at + (m.boot_at - m.created_at) / 2 or m.stuck:
            return "PROVISIONING", "PENDING"
        return "ACTIVE", "ACTIVE"  # installing: InstallationStatusEnum has no INSTALLING
    return {RUNNING: ("ACTIVE", "FINISHED"), TERMINATING: ("DELETING", "FINISHED")}.get(
        m.status, ("ERROR", "ERROR") if m.status == "error" else ("TERMINATED", "TERMINATED"))


def _connection(m: Machine) -> tuple[Any, Any]:
    """(sshConnection, ip): `[null]` until SSH is up, as the API sends them while provisioning."""
    if m.status == RUNNING and m.address and m.ssh_port:
        return f"{m.ssh_user}@{m.address} -p {m.ssh_port}", m.address
    return [None], [None]


def pod_json(m: Machine) -> dict[str, Any]:
    ls = _BY_NAME[m.instance_type]
    status, installation = _phase(m)
    ssh, ip = _connection(m)
    progress = {"FINISHED": 100, "ACTIVE": 50}.get(installation)
    return {
        "id": m.id, "name": m.name, "gpuName": ls.gpu_type, "gpuCount": ls.gpu.count, "status": status,
        "createdAt": iso(m.created_at), "updatedAt": iso(m.created_at), "providerType": ls.provider,
        "installationStatus": installation, "installationFailure": None, "installationProgress": progress,
        "teamId": m.extra.get("team_id"), "resources": None, "attachedResources": [],
        "primePortMapping": [], "sshConnection": ssh, "ip": ip, "priceHr": m.price_per_hour,
        "environmentType": m.extra.get("image"), "socket": ls.socket, "type": "HOSTED", "userId": "sim-user",
        "walletId": None, "jupyterPassword": None, "customTemplateId": None, "isSpot": False,
        "autoRestart": False,
    }


def status_json(m: Machine) -> dict[str, Any]:
    pod = pod_json(m)
    return {"podId": m.id, "providerType": pod["providerType"], "status": pod["status"],
            "sshConnection": pod["sshConnection"], "ip": pod["ip"], "priceHr": pod["priceHr"],
            "primePortMapping": [], "installationFailure": None,
            "installationProgress": pod["installationProgress"]}


def history_json(m: Machine) -> dict[str, Any]:
    ls = _BY_NAME[m.instance_type]
    return {"id": m.id, "name": m.name, "providerType": ls.provider, "type": "HOSTED",
            "createdAt": iso(m.created_at), "terminatedAt": iso(m.ended_at or m.created_at),
            "gpuName": ls.gpu_type, "gpuCount": ls.gpu.count, "socket": ls.socket,
            "priceHr": m.price_per_hour,
            "userId": "sim-user", "teamId": m.extra.get("team_id"),
            "totalBilledPrice": round(m.price_per_hour * m.billing_seconds() / 3600, 6)}


def _listing_for(spec: PodSpec, provider: str) -> Listing:
    for ls in LISTINGS:
        if (ls.provider, ls.cloud_id, ls.gpu_type, ls.socket, ls.gpu.count) == \
                (provider, spec.cloud_id, spec.gpu_type, spec.socket, spec.gpu_count):
            return ls
    raise Invalid(f"No GPU configuration {spec.gpu_count}x {spec.gpu_type} ({spec.socket}) with cloudId "
                  f"{spec.cloud_id!r} from provider {provider!r}")


def _keys(engine: Engine) -> dict[str, dict[str, Any]]:
    keys: dict[str, dict[str, Any]] = engine.facade_state[NAME].setdefault("ssh_keys", {})
    return keys


def _same_key(a: str, b: str) -> bool:
    return a.split()[:2] == b.split()[:2]  # type and body; the comment does not matter


# --------------------------------------------------------------------------- routes


def _other_form(engine: Engine, request: Request) -> Response | None:
    """The 307 to the served form of a collection path asked in the other form (see the docstring)."""
    slashless = bool(engine.facade_state[NAME].get("slashless"))
    path = request.url.path
    if path.endswith("/") != slashless:
        return None
    return RedirectResponse(str(request.url.replace(path=path.rstrip("/") if slashless else path + "/")),
                            status_code=307)


def build_router(engine: Engine, token: str) -> APIRouter:
    router = vendor_router(error_response)
    call = make_call(engine, NAME, token)

    @router.get("/user/whoami")
    async def whoami(request: Request) -> Response:
        return await call(request, "verify", lambda _: {"data": {
            "id": "sim-user", "email": "sim@example.invalid", "name": "Simulated user", "slug": "sim-user",
            "scope": {"pods": {"read": True, "write": True}}}})

    @router.get("/availability/gpus")
    async def availability(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            params = request.query_params
            q: AvailabilityQuery = _validate(AvailabilityQuery, {
                **{k: v for k, v in params.items() if k != "regions"}, "regions": params.getlist("regions")},
                "query")
            unknown = [r for r in q.regions if r not in PI_REGIONS]
            if unknown:
                raise Unprocessable([{"loc": ["query", "regions"], "type": "enum",
                                      "msg": f"Input should be one of {', '.join(PI_REGIONS)}"}])
            items = _items(engine, q)
            start = (q.page - 1) * q.page_size
            return {"items": items[start:start + q.page_size], "totalCount": len(items)}
        return await call(request, "offers", effect)

    @router.get("/availability/")
    async def availability_grouped(request: Request) -> Response:
        # The older unpaginated shape, {gpuType: [item...]}; only with the trailing slash (307 without).
        def effect(_: CallPlan) -> dict[str, Any]:
            grouped: dict[str, list[dict[str, Any]]] = {}
            for item in _items(engine, AvailabilityQuery()):
                grouped.setdefault(item["gpuType"], []).append(item)
            return grouped
        return await call(request, "offers", effect)

    @router.get("/ssh_keys/")
    @router.get("/ssh_keys")
    async def list_keys(request: Request) -> Response:
        if (moved := _other_form(engine, request)) is not None:
            return moved
        return await call(request, "ssh_keys", lambda _: {"data": list(_keys(engine).values())})

    @router.post("/ssh_keys/")
    @router.post("/ssh_keys")
    async def add_key(request: Request) -> Response:
        if (moved := _other_form(engine, request)) is not None:
            return moved
        check_bearer(request, token)
        body = await _body(request, SshKeyBody)

        def effect(_: CallPlan) -> dict[str, Any]:
            try:
                parse_public_key(body.public_key)
            except ValueError:
                raise Invalid("Invalid SSH public key") from None
            keys = _keys(engine)
            if any(_same_key(k["publicKey"], body.public_key) for k in keys.values()):
                raise Invalid("This SSH key already exists")
            entry: dict[str, Any] = {"id": uuid.uuid4().hex, "name": body.name,
                                     "publicKey": body.public_key.strip(), "isPrimary": not keys,
                                     "userId": "sim-user", "isUserKey": True}  # required by APISSHKeyConfig
            keys[entry["id"]] = entry
            engine.save()
            return entry
        return await call(request, "ssh_keys", effect)

    @router.delete("/ssh_keys/{key_id}")
    async def delete_key(request: Request, key_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            if _keys(engine).pop(key_id, None) is None:
                raise NotFound("SSH key not found")
            engine.save()
            return {}
        return await call(request, "ssh_keys", effect)

    @router.post("/pods/")
    @router.post("/pods")
    async def create_pod(request: Request) -> Response:
        if (moved := _other_form(engine, request)) is not None:
            return moved
        check_bearer(request, token)
        body = await _body(request, CreatePod)
        spec = body.pod
        ls = _listing_for_or_none(spec, body.provider.type)
        region = None
        if ls is not None:  # the data center it lands in: the one asked for, or any with stock
            region = spec.data_center_id or next(
                (dc for dc in ls.stock if engine.in_stock(NAME, ls.name, dc) > 0), next(iter(ls.stock)))

        def effect(plan: CallPlan) -> dict[str, Any]:
            listing = _listing_for(spec, body.provider.type)
            assert region is not None
            if region not in listing.stock:
                raise Invalid(f"Data center {region!r} does not offer this GPU configuration")
            keys = list(_keys(engine).values())
            if not keys:
                raise Invalid("Add an SSH key to your account before creating a pod")
            [m] = engine.create(
                NAME, name=spec.name, instance_type=listing.name, region=region,
                public_keys=[k["publicKey"] for k in keys], stuck=plan.stuck_booting,
                die_after_boot=plan.die_after_boot,
                extra={"image": spec.image or DEFAULT_IMAGE, "ssh_keys": [k["name"] for k in keys],
                       "team_id": (body.team or {}).get("teamId")},
            )
            return pod_json(m)
        return await call(request, "create", effect, region=region)

    @router.get("/pods/")
    @router.get("/pods")
    async def list_pods(request: Request) -> Response:
        if (moved := _other_form(engine, request)) is not None:
            return moved

        def effect(_: CallPlan) -> dict[str, Any]:
            offset, limit = _page(request)
            pods = engine.live(NAME)
            return {"total_count": len(pods), "offset": offset, "limit": limit,
                    "data": [pod_json(m) for m in pods[offset:offset + limit]]}
        return await call(request, "list", effect)

    @router.get("/pods/history")
    async def history(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            offset, limit = _page(request)
            gone = sorted((m for m in engine.machines.values() if m.facade == NAME and m.ended_at),
                          key=lambda m: (m.created_at, m.id))
            rows = [history_json(m) for m in gone[offset:offset + limit]]
            return {"total_count": len(gone), "offset": offset, "limit": limit, "data": rows}
        return await call(request, "list", effect)

    @router.get("/pods/status")
    async def pod_status(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            ids = request.query_params.getlist("pod_ids")
            if not ids:
                raise Unprocessable([{"loc": ["query", "pod_ids"], "msg": "Field required",
                                      "type": "missing"}])
            live = {m.id: m for m in engine.live(NAME)}
            return {"data": [status_json(live[i]) for i in ids if i in live]}  # unknown or gone: left out
        return await call(request, "get", effect)

    @router.get("/pods/{pod_id}")
    async def get_pod(request: Request, pod_id: str) -> Response:
        return await call(request, "get", lambda _: pod_json(_pod(engine, pod_id)))

    @router.delete("/pods/{pod_id}")
    async def delete_pod(request: Request, pod_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            m = engine.terminate(NAME, _pod(engine, pod_id).id)
            return {"status": _phase(m)[0]}  # APIDeletePodResponse: the pod's status (DELETING)
        return await call(request, "terminate", effect)

    return router


def _listing_for_or_none(spec: PodSpec, provider: str) -> Listing | None:
    try:
        return _listing_for(spec, provider)
    except Invalid:
        return None


def _pod(engine: Engine, pod_id: str) -> Machine:
    try:
        return engine.get(NAME, pod_id)
    except NotFound:
        raise NotFound("Pod not found") from None


def _page(request: Request) -> tuple[int, int]:
    params = request.query_params
    try:
        offset, limit = int(params.get("offset", 0)), int(params.get("limit", MAX_PAGE))
    except ValueError:
        raise Unprocessable([{"loc": ["query", "offset"], "msg": "Input should be a valid integer",
                              "type": "int_parsing"}]) from None
    if offset < 0 or not 1 <= limit <= MAX_PAGE:
        raise Unprocessable([{"loc": ["query", "limit"], "msg": f"limit must be 1-{MAX_PAGE}, offset >= 0",
                              "type": "value_error"}])
    return offset, limit


FACADE = Facade(
    name=NAME, prefix="/primeintellect/api/v1", display_name="Prime Intellect (simulated)",
    build_router=build_router, credentials=lambda token: {"api_key": token},
    login_user=LOGIN_USER, regions=REGIONS, instance_types=INSTANCE_TYPES, names=NAMES, machine_id=hex_id,
    # The simulated image ships the simulated k3s (no network to fetch get.k3s.io), like the others.
    preinstalled={"k3s": k3s.SCRIPT}, ssh_port=None,
    # No published number: a guess, per API key, so the 429 path is real [unconfirmed].
    rate_limits=(Limit(calls=120, per_s=60.0, what="Prime Intellect API rate limit"),),
)

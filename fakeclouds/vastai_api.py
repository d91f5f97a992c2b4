"""Vast.ai, simulated: a marketplace of asks (one host's GPUs at a price) and its public API, as the
official CLI (vast-ai/vast-cli, vastai/api/*.py) and the docs' OpenAPI (vast-ai/docs,
api-reference/openapi/yaml/*.yaml) call it, under `/vastai` + `/api/v0/...` and `/api/v1/...`.

Asks are the engine's instance types (name = the ask id, priced in one country, spot factor = its
min bid / base price); an ask's stock is how many times it can still be rented. An ask **vanishes**
when someone else rents it: set its stock to 0 (admin `set_stock(<ask id>, <country>, 0)`), and
it leaves the search and a create on it answers 404 `no_such_ask`, as documented. A host raising
its **min bid** (simulation route `PUT /vastai/_fake/asks/{id}` `{"min_bid": x}`) makes an
interruptible create with a lower `price` answer an error AND a `new_contract`: the instance is
made, stopped, and bills until destroyed (dstack's `VastAICreateInstanceError.created_instance_id`).

Instances are Docker containers reached as root on a mapped port: `public_ipaddr` (with the
trailing newline real answers carry: dstack and the CLI strip it) and `ports["22/tcp"][0].HostPort`
(a string), so machines share 127.0.0.1 on random ports (`Facade.ssh_port=None`). A new instance
admits nobody until keys are attached (`POST /instances/{id}/ssh/`); `onstart` runs once at boot.
A destroyed instance is gone at once: `GET` answers `{"instances": null}`, `DELETE` 404
`no_such_instance`. The instance list (`GET /api/v1/instances/`) is keyset-paginated (≤ 25 a page,
`next_token`).

An interruptible instance **outbid** (`admin.preempt`, fakeclouds/preemption.py): the host stops it
— `actual_status` stopped, `intended_status` still running, `status_msg` saying outbid [the fields'
values unconfirmed: Vast documents none for it] — and its GPUs stop billing; it stays listed until
destroyed. A machine that dies (`admin.kill`) is `offline`: its host went away.

Rate limits are per endpoint and identity, a minimum interval between calls (the docs'
`x-rate-limit` thresholds, read as seconds [unconfirmed]); a refusal is a 429 with no Retry-After
and the endpoint's documented body (`{"detail"}` or `{success, error, msg}`; plain text where none is
documented). Injected `rate_limit` faults add Retry-After (a simulation extension, so tests can steer
the delay).
"""

from __future__ import annotations

import base64
import binascii
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncssh
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from fakeclouds import preemption
from fakeclouds.bodies import json_body
from fakeclouds.catalog import Gpu, InstanceType, Region
from fakeclouds.common import check_bearer, check_rate, run_op
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
from fakeclouds.facade import Facade, NameRule
from fakeclouds.faults import CallPlan
from fakeclouds.ratelimit import Limit
from fakeclouds.vendor_errors import retry_after_header, vendor_router

M = TypeVar("M", bound=BaseModel)

NAME = "vastai"
STORAGE_COST = 0.15  # $/GB/month, what hosts commonly charge; allocated storage is priced by the hour
PAGE_MAX = 25  # the v1 instance list's documented page size limit


@dataclass(frozen=True)
class Ask:
    id: int
    machine_id: int
    gpu_name: str  # as Vast names it
    gpu: Gpu  # what the simulated nvidia-smi prints
    vcpus: float  # cpu_cores_effective
    ram_mb: int
    dph_base: float  # $/h for the GPUs, on demand
    min_bid: float  # $/h, the lowest interruptible bid
    geolocation: str  # "Region, CC" or a bare "CC", as search results show both
    stock: int  # free slices of the host this ask can still rent out

    @property
    def country(self) -> str:
        return country_code(self.geolocation)


def country_code(geolocation: str) -> str:
    return geolocation.rsplit(",", 1)[-1].strip().upper()


REGIONS = (Region("CA", "Canada"), Region("US", "United States"), Region("SE", "Sweden"),
           Region("DE", "Germany"), Region("NL", "Netherlands"))

_3090, _4090 = "NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090"
ASKS = (
    # An 8-GPU host in Quebec rents 1x and 2x slices under two asks (stock = slices left).
    Ask(21040117, 8812, "RTX 3090", Gpu("RTX3090", _3090, 24576, 1), 8.0, 32768, 0.16, 0.09,
        "Quebec, CA", 6),
    Ask(21040120, 8812, "RTX 3090", Gpu("RTX3090", _3090, 24576, 2), 16.0, 65536, 0.32, 0.18,
        "Quebec, CA", 3),
    Ask(20977563, 10231, "RTX 4090", Gpu("RTX4090", _4090, 24564, 1), 12.0, 64000, 0.35, 0.21,
        "Texas, US", 4),
    Ask(20977570, 10231, "RTX 4090", Gpu("RTX4090", _4090, 24564, 4), 48.0, 256000, 1.40, 0.84,
        "Texas, US", 1),
    Ask(19888411, 7720, "RTX A6000", Gpu("A6000", "NVIDIA RTX A6000", 49140, 1), 16.0, 128000, 0.45, 0.28,
        "SE", 2),
    Ask(21100345, 11007, "A100 SXM4", Gpu("A100", "NVIDIA A100-SXM4-80GB", 81920, 1), 32.0, 257000, 1.10,
        0.70, "Germany, DE", 2),
    Ask(21100390, 11540, "H100 SXM", Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 8), 192.0, 2064000, 17.60,
        11.00, "California, US", 1),
    Ask(21020202, 9931, "L40S", Gpu("L40S", "NVIDIA L40S", 46068, 1), 24.0, 128000, 0.62, 0.40,
        "Netherlands, NL", 2),
)
_ASKS = {a.id: a for a in ASKS}
INSTANCE_TYPES = tuple(
    InstanceType(name=str(a.id), description=f"{a.gpu.count}x {a.gpu_name}", gpu_description=a.gpu_name,
                 vcpus=int(a.vcpus), memory_gib=a.ram_mb // 1024, storage_gib=1000, gpu=a.gpu,
                 prices={a.country: a.dph_base}, spot_factor=a.min_bid / a.dph_base,
                 default_stock={a.country: a.stock})
    for a in ASKS)

# Documented `x-rate-limit` thresholds (vast-ai/docs api-reference/openapi/yaml): a minimum interval
# per endpoint and identity; search is 10 a minute. (create's `penalty: 12` is not modelled.)
RATE_LIMITS = (
    Limit(1, 4.5, frozenset({"create"}), what="API requests too frequent endpoint threshold=4.5"),
    Limit(1, 2.0, frozenset({"get"}), what="API requests too frequent endpoint threshold=2.0"),
    Limit(1, 1.0, frozenset({"list"}), what="API requests too frequent endpoint threshold=1.0"),
    Limit(1, 3.0, frozenset({"terminate"}), what="API requests too frequent endpoint threshold=3.0"),
    Limit(10, 60.0, frozenset({"offers"}), what="API requests too frequent"),
)
_THRESHOLD = {"create": 4.5, "get": 2.0, "list": 1.0, "terminate": 3.0}

# Nobody holds this key's private half: the engine wants one key per machine, and a real instance
# starts with the account's keys only (this simulated account has none).
_NOBODY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


class AskRejected(CloudError):
    """A failed create that still made an instance (stopped): the answer names it."""

    def __init__(self, message: str, contract: str) -> None:
        super().__init__(message)
        self.contract = contract


class CreateBody(BaseModel):
    """PUT /asks/{id}/ (docs create_instance.yaml); fields the simulation ignores are accepted."""

    model_config = ConfigDict(extra="ignore")
    client_id: str = "me"
    image: str | None = Field(default=None, max_length=1024)
    label: str | None = Field(default=None, max_length=256)
    disk: float = Field(default=10.0, ge=8.0)
    runtype: str | None = None
    price: float | None = Field(default=None, ge=0.001, le=128.0)
    env: dict[str, str] | str | None = None
    onstart: str | None = None
    args: list[str] | None = None
    target_state: str = "running"


class SshKeyBody(BaseModel):
    ssh_key: str = Field(min_length=1)


class AskAdminBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    min_bid: float = Field(gt=0)


_RUNTYPES = {"ssh", "jupyter", "args", "ssh_proxy", "ssh_direct", "jupyter_proxy", "jupyter_direct"}


# --------------------------------------------------------------------------- answers


def _fail(status: int, error: str | None, msg: str, **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {"success": False}
    if error:
        body["error"] = error
    return JSONResponse({**body, "msg": msg, **extra}, status_code=status)


def too_frequent(op: str, retry_after: float | None) -> Response:
    """The endpoint's documented 429 body; never a Retry-After from the real API.

    The vendored spec documents `{"detail"}` for create, show and list (yaml/create_instance.yaml,
    show_instance.yaml, show_instances.yaml) and `{success, error, msg}` for destroy; search documents
    no 429, and the docs' error page says such bodies are often plain text."""
    headers = {"Retry-After": retry_after_header(retry_after)} if retry_after is not None else None
    text = "API requests too frequent" + (f" endpoint threshold={_THRESHOLD[op]}" if op in _THRESHOLD else "")
    if op == "terminate":
        return JSONResponse({"success": False, "error": "rate_limit_exceeded", "msg": text}, status_code=429,
                            headers=headers)
    if op in _THRESHOLD:
        return JSONResponse({"detail": text}, status_code=429, headers=headers)
    return PlainTextResponse(text, status_code=429, headers=headers)


def error_response(exc: CloudError, op: str, ask_id: int | None = None) -> Response:
    if isinstance(exc, Unauthorized):
        if op == "offers":  # search answers a bad key with 404 (docs search_offers.yaml)
            return JSONResponse({"error": "invalid_user_key", "msg": "Invalid user key"}, status_code=404)
        return _fail(401, "auth_error", "Invalid user key")  # error code [unconfirmed]
    if isinstance(exc, RateLimit):
        return too_frequent(op, exc.retry_after)
    if isinstance(exc, AskRejected):  # [unconfirmed] status and code; dstack reads only new_contract
        return JSONResponse({"success": False, "error": "bid_too_low", "msg": exc.message,
                             "new_contract": int(exc.contract)})
    if isinstance(exc, NoCapacity):
        return _fail(404, "invalid_args", f"error 404/3603: no_such_ask Instance type by id {ask_id} is not "
                                          "available.", ask_id=ask_id)
    if isinstance(exc, QuotaExceeded):  # an account out of credit; code [unconfirmed]
        return _fail(400, "insufficient_credit", "Insufficient credit: add credit to rent this instance.")
    if isinstance(exc, NotFound):
        return _fail(404, "no_such_instance", "Instance not found.")
    if isinstance(exc, LostResponse):
        return PlainTextResponse("<html><body><h1>504 Gateway Time-out</h1></body></html>", status_code=504,
                                 media_type="text/html")
    if isinstance(exc, ServerFault):
        if exc.status == 500:  # some answers carry only `msg`
            return JSONResponse({"msg": "Internal server error"}, status_code=500)
        return PlainTextResponse(f"<html><body><h1>{exc.status} Bad Gateway</h1></body></html>",
                                 status_code=exc.status, media_type="text/html")
    if op in ("offers", "list"):  # search and the v1 list name it so (docs)
        return _fail(400, "invalid_request", f"Error in query parameters: {exc.message}")
    extra = {"ask_id": ask_id} if ask_id is not None else {}
    return _fail(400, "invalid_args", f"Invalid args: {exc.message}", **extra)


# --------------------------------------------------------------------------- search


def min_bid(engine: Engine, ask: Ask) -> float:
    return float(engine.facade_state[NAME].get("min_bid", {}).get(str(ask.id), ask.min_bid))


def offer_json(ask: Ask, low: float, storage_gb: float, bid: bool) -> dict[str, Any]:
    """One search result; `low` is the ask's current minimum bid."""
    storage = round(STORAGE_COST * storage_gb / (30 * 24), 6)
    base = low if bid else ask.dph_base  # type "bid": priced at the minimum bid (docs search_offers.yaml)
    return {
        "id": ask.id, "ask_contract_id": ask.id, "bundle_id": ask.id + 700_000_000,
        "machine_id": ask.machine_id,
        "host_id": ask.machine_id // 10, "gpu_name": ask.gpu_name, "num_gpus": ask.gpu.count,
        "gpu_ram": ask.gpu.memory_mib, "gpu_total_ram": ask.gpu.memory_mib * ask.gpu.count,
        "cpu_cores_effective": ask.vcpus, "cpu_cores": int(ask.vcpus) * 2, "cpu_ram": ask.ram_mb,
        "disk_space": 1000.0, "dph_base": ask.dph_base, "min_bid": low, "storage_cost": STORAGE_COST,
        "storage_total_cost": storage, "dph_total": round(base + storage, 6), "geolocation": ask.geolocation,
        "reliability2": 0.995, "reliability": 0.995, "score": round(100 / ask.dph_base, 2), "verified": True,
        "rentable": True, "rented": False, "external": False, "direct_port_count": 100, "static_ip": True,
        "public_ipaddr": "127.0.0.1", "inet_down": 900.0, "inet_up": 800.0, "cuda_max_good": 12.8,
        "compute_cap": 860, "is_bid": bid,
    }


_OFFER_COLUMNS = frozenset(offer_json(ASKS[0], ASKS[0].min_bid, 1.0, False))
_SEARCH_KEYS = {"order", "type", "limit", "allocated_storage", "disable_bundling"}
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda a, b: a == b, "neq": lambda a, b: a != b, "gt": lambda a, b: a > b,
    "gte": lambda a, b: a >= b, "lt": lambda a, b: a < b, "lte": lambda a, b: a <= b,
    "in": lambda a, b: a in b, "notin": lambda a, b: a not in b,
}


def matches(row: dict[str, Any], filters: dict[str, Any], *, computed: frozenset[str] = frozenset()) -> bool:
    """Vast's `{"col": {"op": value}}` filters; Invalid names what is wrong."""
    for col, cond in filters.items():
        if col not in row or col in computed:
            raise Invalid(f"{col} is not a valid search key")
        if not isinstance(cond, dict):
            raise Invalid(f"filter on {col} must be an object of operators")
        value = country_code(row[col]) if col == "geolocation" else row[col]
        for op, operand in cond.items():
            if op not in _OPS:
                raise Invalid(f"unknown operator {op!r} on {col}")
            try:
                if not _OPS[op](value, operand):
                    return False
            except TypeError:
                raise Invalid(f"bad operand for {col} {op}") from None
    return True


def search(engine: Engine, q: dict[str, Any]) -> dict[str, Any]:
    kind = q.get("type", "ondemand")
    if kind not in ("ondemand", "on-demand", "bid", "reserved"):
        raise Invalid(f"type must be ondemand, bid or reserved, not {kind!r}")
    storage = q.get("allocated_storage", 5.0)
    if not isinstance(storage, int | float) or storage <= 0:
        raise Invalid("allocated_storage must be a positive number")
    rows = [offer_json(a, min_bid(engine, a), storage, kind == "bid") for a in ASKS
            if engine.in_stock(NAME, str(a.id), a.country) > 0]
    filters = {k: v for k, v in q.items() if k not in _SEARCH_KEYS}
    rows = [r for r in rows if matches(r, filters)]
    for col, direction in reversed(q.get("order") or [["score", "desc"]]):
        if col not in _OFFER_COLUMNS:
            raise Invalid(f"cannot order by {col}")
        rows.sort(key=lambda r: r[col], reverse=direction == "desc")  # noqa: B023 - sorted at once
    limit = q.get("limit")
    return {"offers": rows[:int(limit)] if isinstance(limit, int) and limit > 0 else rows}


# --------------------------------------------------------------------------- instances


def _status(m: Machine) -> tuple[str | None, str, str]:
    """(actual_status, intended_status, status_msg) as Vast shows them."""
    if preemption.reclaimed(m):  # outbid (admin preempt): the host stopped it; the user still wants it
        return "stopped", "running", "outbid: a higher bid took the host's GPUs"  # wording [unconfirmed]
    if m.extra.get("stopped"):
        return "stopped", "stopped", "bid below the host's minimum: instance created stopped"
    if m.status == "running":
        return "running", "running", f"success, running {m.extra.get('image')}/ssh"
    if m.status == "error":  # its host went away (an outbid is the engine's preempt, above)
        return "offline", "running", m.detail or "offline"
    return "loading", "running", "Pulling image"


def instance_json(m: Machine) -> dict[str, Any]:
    ask = _ASKS[int(m.instance_type)]
    actual, intended, msg = _status(m)
    running = actual == "running" and m.ssh_port is not None
    port = str(m.ssh_port) if running else None
    return {
        "id": int(m.id), "label": m.name, "actual_status": actual, "cur_state": intended,
        "next_state": intended,
        "intended_status": intended, "status_msg": msg, "image_uuid": m.extra.get("image"),
        "image_runtype": m.extra.get("runtype"), "onstart": m.extra.get("onstart"),
        "extra_env": [[k, v] for k, v in (m.extra.get("env") or {}).items()],
        # the host's address is known at once, with the trailing newline real answers carry
        "public_ipaddr": "127.0.0.1\n", "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": port}]}
        if running else {}, "ssh_host": "127.0.0.1",
        "machine_id": ask.machine_id, "host_id": ask.machine_id // 10, "gpu_name": ask.gpu_name,
        "num_gpus": ask.gpu.count, "gpu_ram": ask.gpu.memory_mib, "cpu_cores_effective": ask.vcpus,
        "cpu_ram": ask.ram_mb, "geolocation": ask.geolocation, "disk_space": m.extra.get("disk"),
        "dph_base": ask.dph_base, "dph_total": m.price_per_hour, "min_bid": ask.min_bid, "is_bid": m.spot,
        "start_date": m.created_at, "verification": "verified",
        # an integer where there is one (docs: Instance.ssh_port `type: integer`, never null): a
        # booting instance's port is not known yet, so the key is left out rather than null
        **({"ssh_port": m.ssh_port} if running else {}),
    }


_LIST_COLUMNS = frozenset({"id", "label", "actual_status", "intended_status", "gpu_name", "machine_id",
                           "verification", "is_bid"})


def _json_param(request: Request, name: str, default: Any) -> Any:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return json.loads(raw)
    except ValueError:
        raise Invalid(f"{name} must be JSON") from None


def list_page(engine: Engine, request: Request) -> dict[str, Any]:
    """GET /api/v1/instances/: keyset pages over the live instances (docs show_instances.yaml)."""
    filters = _json_param(request, "select_filters", {})
    order = _json_param(request, "order_by", [{"col": "id", "dir": "asc"}])
    if not isinstance(filters, dict) or not isinstance(order, list):
        raise Invalid("select_filters must be an object and order_by an array")
    descending = False
    for item in order:
        col = item.get("col") if isinstance(item, dict) else None
        if col != "id":  # the simulation keeps keyset pages on id only
            raise Invalid(f"cannot order by {col!r} here")
        descending = item.get("dir") == "desc"
    try:
        limit = int(request.query_params.get("limit", PAGE_MAX))
    except ValueError:
        raise Invalid("limit must be an integer") from None
    limit = 5 if limit <= 0 else min(limit, PAGE_MAX)
    rows = [instance_json(m) for m in preemption.visible(engine, NAME) if m.status != "terminating"]
    rows = [r for r in rows if matches({c: r[c] for c in _LIST_COLUMNS}, filters)]
    rows.sort(key=lambda r: r["id"], reverse=descending)
    total, labels = len(rows), dict[str, int]()
    for r in rows:
        labels[r["label"] or ""] = labels.get(r["label"] or "", 0) + 1
    token = request.query_params.get("after_token")
    if token:
        try:
            after = int(json.loads(base64.b64decode(token, validate=True))["values"]["id"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise Invalid("invalid after_token") from None
        rows = [r for r in rows if (r["id"] < after if descending else r["id"] > after)]
    page, more = rows[:limit], len(rows) > limit
    next_token = base64.b64encode(json.dumps({"values": {"id": page[-1]["id"]}}).encode()).decode() \
        if more else None
    return {"success": True, "instances_found": len(page), "total_instances": total, "label_counts": labels,
            "next_token": next_token, "instances": page}


def _instance_id(raw: str) -> str:
    if not raw.isdigit():
        raise Invalid("invalid instance_id")
    return str(int(raw))


def _visible(engine: Engine, raw: str) -> Machine:
    """The instance if it exists for the API: a destroyed one is gone at once; an outbid one stays
    (stopped) until destroyed."""
    m = preemption.held_one(engine, NAME, _instance_id(raw)) or engine.get(NAME, _instance_id(raw))
    if m.status == "terminating":
        raise NotFound(f"no instance {raw}")
    return m


def create(engine: Engine, ask_id: int, body: CreateBody, plan: CallPlan) -> dict[str, Any]:
    ask = _ASKS.get(ask_id)
    if ask is None or engine.in_stock(NAME, str(ask_id), ask.country) < 1:
        raise NoCapacity(f"ask {ask_id} is not available", ask.country if ask else None)
    if body.client_id != "me":
        raise Invalid("client_id must be 'me'")
    if not body.image:
        raise Invalid("image is required")
    if body.runtype is not None and body.runtype not in _RUNTYPES:
        raise Invalid(f"runtype must be one of {sorted(_RUNTYPES)}")
    if len(body.onstart or "") + sum(len(a) for a in body.args or []) > 4096:
        raise Invalid("args and onstart together exceed 4096 characters")
    env = body.env if isinstance(body.env, dict) else {}
    if any(len(v) > 256 for v in env.values()):
        raise Invalid("env values are limited to 256 characters")
    onstart = body.onstart or None
    script = onstart if onstart is None or onstart.startswith("#!") else "#!/bin/sh\n" + onstart
    low = min_bid(engine, ask)
    outbid = body.price is not None and body.price < low
    stopped = outbid or body.target_state == "stopped"
    [m] = engine.create(
        NAME, name=body.label, instance_type=str(ask_id), region=ask.country, public_keys=[_NOBODY],
        spot=body.price is not None, user_data=None if outbid else script,
        stuck=stopped or plan.stuck_booting, die_after_boot=plan.die_after_boot,
        preempt_after=plan.preempt_after,
        extra={"image": body.image, "runtype": body.runtype or "ssh", "onstart": onstart, "env": env,
               "disk": body.disk, "bid": body.price, "stopped": stopped},
    )
    if outbid:
        raise AskRejected(f"bid {body.price} is below the minimum bid {low} for ask {ask_id}: the instance "
                          "was created stopped", m.id)
    return {"success": True, "new_contract": int(m.id)}


def _machine_id() -> str:
    return str(random.randint(10_000_000, 39_999_999))


# --------------------------------------------------------------------------- routes


def build_router(engine: Engine, token: str) -> APIRouter:
    def render(exc: CloudError, request: Request) -> Response:
        """Vast.ai answers each endpoint's refusals in its own shape: by the op (and ask) the
        request was serving, which `serving` noted."""
        op, ask_id = getattr(request.state, "vastai_call", ("admin", None))
        return error_response(exc, op, ask_id)

    def serving(request: Request, op: str, ask_id: int | None = None) -> None:
        request.state.vastai_call = (op, ask_id)

    router = vendor_router(render)

    async def call(request: Request, op: str, effect: Callable[[CallPlan], Any], *,
                   region: str | None = None, ask_id: int | None = None) -> Response:
        # common.make_call, but a limiter refusal and an injected one answer differently (above).
        serving(request, op, ask_id)
        check_bearer(request, token)
        try:
            check_rate(engine, NAME, request, op)
        except RateLimit:
            return too_frequent(op, None)
        return JSONResponse(await run_op(engine, NAME, op, effect, region))

    async def parsed(request: Request, model: type[M], op: str) -> M:
        serving(request, op)
        check_bearer(request, token)
        return await json_body(request, model)

    @router.post("/api/v0/bundles/")
    async def bundles(request: Request) -> Response:
        q = await parsed(request, _Query, "offers")
        return await call(request, "offers", lambda _: search(engine, q.model_dump()))

    @router.put("/api/v0/search/asks/")
    async def search_asks(request: Request) -> Response:
        q = await parsed(request, _NewSearch, "offers")
        return await call(request, "offers", lambda _: search(engine, dict(q.q)))

    @router.put("/api/v0/asks/{ask_id}/")
    async def create_instance(request: Request, ask_id: str) -> Response:
        serving(request, "create")
        if not ask_id.isdigit():
            raise Invalid("'id' is required and must be a valid offer ID")
        body = await parsed(request, CreateBody, "create")
        ask = _ASKS.get(int(ask_id))
        return await call(request, "create", lambda plan: create(engine, int(ask_id), body, plan),
                          region=ask.country if ask else None, ask_id=int(ask_id))

    @router.get("/api/v0/instances/{instance_id}/")
    async def show_instance(request: Request, instance_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            try:
                return {"instances": instance_json(_visible(engine, instance_id))}
            except NotFound:
                return {"instances": None}
        return await call(request, "get", effect)

    @router.delete("/api/v0/instances/{instance_id}/")
    async def destroy_instance(request: Request, instance_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            m = _visible(engine, instance_id)
            if preemption.reclaimed(m):  # outbid: nothing runs (or bills) any more, it just goes
                preemption.release(engine, m)
            else:
                engine.terminate(NAME, m.id)
            return {"success": True, "msg": "Instance destroyed successfully"}
        return await call(request, "terminate", effect)

    @router.get("/api/v1/instances/")
    async def show_instances(request: Request) -> Response:
        return await call(request, "list", lambda _: list_page(engine, request))

    @router.post("/api/v0/instances/{instance_id}/ssh/")
    async def attach_ssh(request: Request, instance_id: str) -> Response:
        body = await parsed(request, SshKeyBody, "ssh_keys")

        def effect(_: CallPlan) -> dict[str, Any]:
            m = _visible(engine, instance_id)
            if body.ssh_key.strip() in m.public_keys:  # [unconfirmed] what a second attach answers
                raise Invalid("this ssh key is already attached to the instance")
            engine.authorize_key(NAME, m.id, body.ssh_key)
            return {"success": True, "msg": "SSH key attached successfully"}
        return await call(request, "ssh_keys", effect)

    @router.get("/api/v0/instances/{instance_id}/ssh/")
    async def instance_ssh_keys(request: Request, instance_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            keys = [k for k in _visible(engine, instance_id).public_keys if k != _NOBODY]
            # `ssh_keys` is a JSON *string* holding the array (docs show_instance_ssh_keys.yaml)
            return {"success": True, "ssh_keys": json.dumps([{"id": i + 1, "public_key": k}
                                                              for i, k in enumerate(keys)])}
        return await call(request, "ssh_keys", effect)

    @router.get("/api/v0/users/current/")
    async def current_user(request: Request) -> Response:
        return await call(request, "verify", lambda _: {
            "id": 424242, "username": "sim-user", "email": "sim-user@example.invalid", "credit": 100.0,
            "balance": 0.0, "has_billing": True})

    @router.put("/_fake/asks/{ask_id}")
    async def set_ask(request: Request, ask_id: str) -> Response:
        """Simulation only (no auth): a host changes an ask's minimum bid."""
        serving(request, "admin")
        if not ask_id.isdigit() or int(ask_id) not in _ASKS:
            raise NotFound(f"no ask {ask_id}")
        body = await json_body(request, AskAdminBody)  # refused: "Invalid args: min_bid: ..."
        engine.facade_state[NAME].setdefault("min_bid", {})[ask_id] = body.min_bid
        engine.save()
        return JSONResponse({"success": True, "min_bid": body.min_bid})

    return router


class _Query(BaseModel):
    """POST /bundles/: the search query itself is the body."""

    model_config = ConfigDict(extra="allow")


class _NewSearch(BaseModel):
    """PUT /search/asks/: `{"select_cols": [...], "q": {...}}`."""

    select_cols: list[str] = Field(default_factory=lambda: ["*"])
    q: dict[str, Any] = Field(default_factory=dict)


FACADE = Facade(
    name=NAME, prefix="/vastai", display_name="Vast.ai (simulated)", build_router=build_router,
    credentials=lambda token: {"api_key": token},
    login_user="root", regions=REGIONS, instance_types=INSTANCE_TYPES,
    # Labels are optional, free-form, at most 256 characters (docs x-input-validation) and not unique.
    names=NameRule(required=False, unique=False, max_length=256),
    machine_id=_machine_id, ssh_port=None, rate_limits=RATE_LIMITS,
    api_self_end=NAME,  # the `vastai` CLI: every instance has CONTAINER_ID and its own CONTAINER_API_KEY
)

"""Hyperstack (NexGen Cloud Infrahub), simulated: its public API under /hyperstack/v1, translating
to the engine. Shapes follow the official SDK (NexGenCloud/hyperstack-sdk-python docs/*.md) and
research/provider-facts.md B.1; guesses are marked [unconfirmed].
Its regions, flavors, images and protocols: `hyperstack_catalog.py`.

What it models:
- auth by the `api_key` header (not Bearer); every error as `{status: false, message, error_reason}`;
- environments (one region each) and key pairs (per environment), in `engine.facade_state`;
- flavors (GET /core/flavors, grouped by GPU and region), stocks (per model, per "<n>x"
  configuration) and the pricebook (price per GPU-hour by GPU model): three calls an offer joins;
- spot flavors: `<flavor>-spot`, labelled "spot", priced as `<model>-spot` in the pricebook [unconfirmed];
- VMs with integer ids, names unique in the account (a duplicate is 409) [unconfirmed scope],
  `count` required (count > 1 names them `<name>-1`, `<name>-2`, ... [unconfirmed]), labels a list of
  strings, status CREATING -> BUILD -> ACTIVE, ERROR, DELETING, then GET 404;
- security rules at create and per VM (/sg-rules), recorded, and enforced through `ingress` (the
  facade's firewall answer, read by the simulated Kubernetes API): the VM's inbound TCP (or `any`)
  rules; nothing else is let in (the default security group admits no outside traffic, as
  OpenStack's does not [unconfirmed for Hyperstack]); `enable_port_randomization` defaults to
  true with a floating IP and is reported on the VM (where the random SSH port would be reported is
  unknown, so the simulation always serves SSH on 22 at the floating IP: adapters must turn it off);
- the documented rate limit: 500 requests a minute per IP, then every call blocked for a minute.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from fakeclouds import k3s
from fakeclouds.bodies import json_body
from fakeclouds.catalog import InstanceType
from fakeclouds.common import check_rate, iso, run_op
from fakeclouds.engine import ERROR, PENDING, RUNNING, TERMINATING, Engine, Machine
from fakeclouds.errors import (
    CloudError,
    Invalid,
    LostResponse,
    NameConflict,
    NoCapacity,
    NotFound,
    QuotaExceeded,
    RateLimit,
    ServerFault,
    Unauthorized,
)
from fakeclouds.facade import Facade, IngressRule, NameRule
from fakeclouds.faults import CallPlan
from fakeclouds.hyperstack_catalog import (
    BY_NAME,
    DEFAULT_IMAGE,
    FLAVORS,
    IMAGES,
    INSTANCE_TYPES,
    PROTOCOLS,
    REGIONS,
    SPOT_SUFFIX,
)
from fakeclouds.ratelimit import Limit
from fakeclouds.ssh import parse_public_key
from fakeclouds.vendor_errors import CodeTable, retry_after, status_of, vendor_router

NAME = "hyperstack"


class Conflict(CloudError):
    """409 for a state conflict (deleting a VM that is already being deleted) [unconfirmed]."""


# error class -> (HTTP status, error_reason); the last class that matches wins. Only `bad_request`
# is seen in the docs; the rest (and the 400 for out-of-stock) are [unconfirmed].
_ERRORS = CodeTable([
    (Unauthorized, (401, "unauthorized")),
    (NotFound, (404, "not_found")),
    (Invalid, (400, "bad_request")),
    (NameConflict, (409, "already_exist")),
    (NoCapacity, (400, "out_of_stock")),
    (QuotaExceeded, (400, "quota_exceeded")),
    (RateLimit, (429, "too_many_requests")),
    (ServerFault, (500, "internal_server_error")),
    (LostResponse, (504, "gateway_timeout")),  # simulation only: the answer was lost on the way
    (Conflict, (409, "conflict")),
], default=(500, "internal_server_error"))


def error_response(exc: CloudError, _request: Request | None = None) -> JSONResponse:
    status, reason = _ERRORS(exc)
    # Retry-After on a 429 [unconfirmed: the docs only say calls are blocked for the next minute].
    return JSONResponse({"status": False, "message": exc.message, "error_reason": reason},
                        status_code=status_of(exc, status), headers=retry_after(exc))


# --------------------------------------------------------------------------- request bodies


class EnvironmentBody(BaseModel):
    name: str = Field(min_length=1, max_length=50)
    region: str


class KeypairBody(BaseModel):
    name: str = Field(min_length=1, max_length=50)
    environment_name: str
    public_key: str


class RuleBody(BaseModel):
    direction: str
    ethertype: str
    protocol: str
    remote_ip_prefix: str
    port_range_min: int | None = None
    port_range_max: int | None = None


class CreateBody(BaseModel):
    name: str
    environment_name: str
    flavor_name: str
    key_name: str
    count: int  # required, like the real API
    image_name: str | None = None
    user_data: str | None = None
    assign_floating_ip: bool = False
    enable_port_randomization: bool = True
    create_bootable_volume: bool = False
    security_rules: list[RuleBody] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    callback_url: str | None = None
    volume_name: str | None = None


# --------------------------------------------------------------------------- account state


def _state(engine: Engine) -> dict[str, Any]:
    st = engine.facade_state[NAME]
    st.setdefault("environments", {})
    st.setdefault("keypairs", {})
    st.setdefault("seq", 1000)
    return st


def _next_id(engine: Engine) -> int:
    st = _state(engine)
    st["seq"] += 1
    return int(st["seq"])


def _environment(engine: Engine, name: str) -> dict[str, Any]:
    env = next((e for e in _state(engine)["environments"].values() if e["name"] == name), None)
    if env is None:
        raise NotFound(f"Environment {name} not found")
    return dict(env)


def _rule(engine: Engine, body: RuleBody) -> dict[str, Any]:
    if body.direction not in ("ingress", "egress"):
        raise Invalid("direction must be 'ingress' or 'egress'")
    if body.ethertype not in ("IPv4", "IPv6"):
        raise Invalid("ethertype must be 'IPv4' or 'IPv6'")
    if body.protocol not in PROTOCOLS:
        raise Invalid(f"protocol must be one of GET /core/sg-rules-protocols ({', '.join(PROTOCOLS)})")
    low, high = body.port_range_min, body.port_range_max
    if any(p is not None and not 1 <= p <= 65535 for p in (low, high)):
        raise Invalid("port_range_min/port_range_max must be within 1-65535")
    if low is not None and high is not None and low > high:
        raise Invalid("port_range_min must not exceed port_range_max")
    return {"id": _next_id(engine), **body.model_dump(), "status": "ACTIVE", "created_at": iso(time.time())}


# --------------------------------------------------------------------------- JSON of things


def flavor_json(itype: InstanceType, spot: bool = False) -> dict[str, Any]:
    """InstanceFlavorFields: a flavor as a VM reports it (the flavor list adds region and stock)."""
    flavor = FLAVORS[itype.name]
    return {"id": flavor.id + (1000 if spot else 0), "name": itype.name + (SPOT_SUFFIX if spot else ""),
            "cpu": itype.vcpus, "ram": float(itype.memory_gib), "disk": flavor.disk,
            "ephemeral": flavor.ephemeral, "gpu": flavor.model,
            "gpu_count": itype.gpu.count if itype.gpu else 0,
            "labels": [{"id": 1, "label": "spot"}] if spot else [], "features": {}}


def _ip(m: Machine) -> str:
    digest = hashlib.sha256(m.id.encode()).digest()
    return f"10.0.{digest[0]}.{digest[1] % 250 + 2}"


def _status(m: Machine) -> tuple[str, str, str]:
    """(status, vm_state, power_state). Half the boot is CREATING, the rest BUILD. The vm_state and
    power_state words are [unconfirmed] (OpenStack's, which Hyperstack runs on)."""
    if m.status == PENDING:
        creating = time.time() < m.created_at + (m.boot_at - m.created_at) / 2 or m.stuck
        return ("CREATING" if creating else "BUILD"), "building", "NOSTATE"
    words = {RUNNING: ("ACTIVE", "active", "RUNNING"), ERROR: ("ERROR", "error", "SHUTDOWN"),
             TERMINATING: ("DELETING", "deleting", "SHUTDOWN")}
    return words.get(m.status, ("DELETED", "deleted", "SHUTDOWN"))


def instance_json(m: Machine) -> dict[str, Any]:
    status, vm_state, power = _status(m)
    floating = bool(m.extra.get("assign_floating_ip"))
    randomized = floating and bool(m.extra.get("port_randomization"))
    up = m.status in (RUNNING, ERROR, TERMINATING) and m.address is not None
    return {
        "id": int(m.id), "name": m.name, "status": status, "vm_state": vm_state, "power_state": power,
        "fixed_ip": _ip(m) if status != "CREATING" else None,
        "floating_ip": m.address if floating and up else None,
        "floating_ip_status": ("ATTACHED" if up else "ATTACHING") if floating else "NOT_ATTACHED",
        "port_randomization": randomized,
        "port_randomization_status": "ENABLED" if randomized else "DISABLED",
        "labels": list(m.extra.get("labels", [])), "security_rules": list(m.extra.get("security_rules", [])),
        "flavor": flavor_json(BY_NAME[m.instance_type], m.spot), "image": {"name": m.extra.get("image_name")},
        "keypair": {"name": m.extra.get("key_name")}, "environment": m.extra.get("environment"),
        "created_at": iso(m.created_at), "os": "linux", "locked": False, "requires_public_ip": floating,
        "callback_url": m.extra.get("callback_url"), "contract_id": None, "volume_attachments": [],
        "features": {},
    }


def environment_json(env: dict[str, Any]) -> dict[str, Any]:
    return {**env, "features": {"network_optimised": False, "green_status": "NOT_GREEN"}}


def keypair_json(engine: Engine, kp: dict[str, Any]) -> dict[str, Any]:
    env = next((e for e in _state(engine)["environments"].values() if e["name"] == kp["environment"]), None)
    return {**{k: v for k, v in kp.items() if k != "environment"},
            "environment": environment_json(env) if env else {"name": kp["environment"]}}


def _paged(request: Request, rows: list[dict[str, Any]], what: str) -> dict[str, Any]:
    """Hyperstack's list envelope: the query's page (1-based) and `pageSize` (default 20 [unconfirmed]),
    as the official SDKs send them (hyperstack-sdk-python hyperstack/api/virtual_machine_api.py:4461,
    environment_api.py:1692, keypair_api.py:872 `('pageSize', page_size)`); the answer names it
    `page_size`. Any other query parameter (`page_size` too) is not read."""
    try:
        page = int(request.query_params.get("page") or 1)
        size = int(request.query_params.get("pageSize") or 20)
    except ValueError:
        raise Invalid("page and pageSize must be integers") from None
    if page < 1 or size < 1:
        raise Invalid("page and pageSize must be >= 1")
    chunk = rows[(page - 1) * size: page * size]
    return {"status": True, "message": f"Getting {what} list success", what: chunk, "count": len(rows),
            "page": page, "page_size": size}


def _search(request: Request, rows: list[dict[str, Any]], *fields: str) -> list[dict[str, Any]]:
    """`search`: a case-insensitive substring of the id or a name field [unconfirmed semantics]."""
    needle = (request.query_params.get("search") or "").lower()
    if not needle:
        return rows
    return [r for r in rows if any(needle in str(r.get(f) or "").lower() for f in ("id", *fields))]


def _vm_id(vm_id: str) -> str:
    if not vm_id.isdigit():
        raise Invalid("vm_id must be an integer")
    return vm_id


def _machine_id() -> str:
    return str(random.randint(100_000, 9_999_999))  # Hyperstack's VM ids are integers


def build_router(engine: Engine, token: str) -> APIRouter:
    router = vendor_router(error_response)

    async def call(request: Request, op: str, effect: Callable[[CallPlan, Any], Any], *,
                   model: type[BaseModel] | None = None,
                   region: Callable[[Any], str | None] | None = None) -> Response:
        # The limit counts (and its block refuses) every call from the address, before the key
        # is looked at: "all API calls for the next minute will be blocked".
        check_rate(engine, NAME, request, op)
        if request.headers.get("api_key", "").strip() != token:
            raise Unauthorized("Invalid or missing API key")
        body = await json_body(request, model) if model is not None else None
        where = region(body) if region is not None else None
        result = await run_op(engine, NAME, op, lambda plan: effect(plan, body), where)
        return JSONResponse(result)

    def ok(message: str, **fields: Any) -> dict[str, Any]:
        return {"status": True, "message": message, **fields}

    # ---------------------------------------------------------------- account

    @router.get("/auth/me")
    async def me(request: Request) -> Response:
        user = {"name": "Simulated User", "username": "sim-user", "email": "sim-user@example.com",
                "created_at": "2024-01-01T00:00:00Z"}
        return await call(request, "verify", lambda _p, _b: ok("Getting user details success", user=user))

    # ---------------------------------------------------------------- environments

    @router.get("/core/environments")
    async def list_environments(request: Request) -> Response:
        def effect(_p: CallPlan, _b: Any) -> dict[str, Any]:
            rows = [environment_json(e) for e in _state(engine)["environments"].values()]
            return _paged(request, _search(request, rows, "name", "region"), "environments")
        return await call(request, "side_resources", effect)

    @router.get("/core/environments/name-availability/{name}")
    async def environment_name(request: Request, name: str) -> Response:
        def effect(_p: CallPlan, _b: Any) -> dict[str, Any]:
            taken = any(e["name"] == name for e in _state(engine)["environments"].values())
            return {"available": not taken, "name": name,
                    "message": "Name is already taken" if taken else "Name is available"}
        return await call(request, "side_resources", effect)

    @router.post("/core/environments")
    async def create_environment(request: Request) -> Response:
        def effect(_p: CallPlan, body: EnvironmentBody) -> dict[str, Any]:
            if FACADE.region(body.region) is None:
                raise Invalid(f"Region {body.region} does not exist")
            envs = _state(engine)["environments"]
            if any(e["name"] == body.name for e in envs.values()):
                raise NameConflict(f"Environment {body.name} already exists")
            env = {"id": _next_id(engine), "name": body.name, "region": body.region,
                   "created_at": iso(time.time())}
            envs[str(env["id"])] = env
            engine.save()
            return ok("Environment created successfully", environment=environment_json(env))
        return await call(request, "side_resources", effect, model=EnvironmentBody)

    # ---------------------------------------------------------------- key pairs (per environment)

    @router.get("/core/keypairs")
    async def list_keypairs(request: Request) -> Response:
        def effect(_p: CallPlan, _b: Any) -> dict[str, Any]:
            rows = [keypair_json(engine, kp) for kp in _state(engine)["keypairs"].values()]
            return _paged(request, _search(request, rows, "name"), "keypairs")
        return await call(request, "ssh_keys", effect)

    @router.post("/core/keypairs")
    async def import_keypair(request: Request) -> Response:
        def effect(_p: CallPlan, body: KeypairBody) -> dict[str, Any]:
            env = _environment(engine, body.environment_name)
            keypairs = _state(engine)["keypairs"]
            if any(k["name"] == body.name and k["environment"] == env["name"] for k in keypairs.values()):
                raise NameConflict(f"Keypair {body.name} already exists in {env['name']}")
            try:
                parse_public_key(body.public_key)
            except ValueError:
                raise Invalid("public_key is not a valid SSH public key") from None
            kp = {"id": _next_id(engine), "name": body.name, "environment": env["name"],
                  "public_key": body.public_key.strip(), "created_at": iso(time.time()),
                  "fingerprint": hashlib.md5(body.public_key.encode(), usedforsecurity=False).hexdigest()}
            keypairs[str(kp["id"])] = kp
            engine.save()
            return ok("Keypair imported successfully", keypair=keypair_json(engine, kp))
        return await call(request, "ssh_keys", effect, model=KeypairBody)

    @router.delete("/core/keypair/{keypair_id}")  # singular, as documented
    async def delete_keypair(request: Request, keypair_id: str) -> Response:
        def effect(_p: CallPlan, _b: Any) -> dict[str, Any]:
            if _state(engine)["keypairs"].pop(keypair_id, None) is None:
                raise NotFound(f"Keypair {keypair_id} not found")
            engine.save()
            return ok("Keypair deleted successfully")
        return await call(request, "ssh_keys", effect)

    # ---------------------------------------------------------------- offers: flavors, stocks, pricebook

    @router.get("/core/flavors")
    async def flavors(request: Request) -> Response:
        wanted = request.query_params.get("region")

        def effect(_p: CallPlan, _b: Any) -> dict[str, Any]:
            if wanted and FACADE.region(wanted) is None:
                raise Invalid(f"Region {wanted} does not exist")
            groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
            for itype in INSTANCE_TYPES:
                for region in itype.prices:
                    if wanted and region != wanted:
                        continue
                    rows = groups.setdefault((FLAVORS[itype.name].model, region), [])
                    for spot in (False, True) if itype.spot_factor else (False,):
                        rows.append({**flavor_json(itype, spot), "region_name": region,
                                     "display_name": itype.name + (" (spot)" if spot else ""),
                                     "stock_available": engine.in_stock(NAME, itype.name, region) > 0,
                                     "created_at": "2024-01-01T00:00:00Z"})
            data = [{"gpu": gpu, "region_name": region, "flavors": rows}
                    for (gpu, region), rows in groups.items()]
            return ok("Getting flavors success", data=data)
        return await call(request, "offers", effect)

    @router.get("/core/stocks")
    async def stocks(request: Request) -> Response:
        def effect(_p: CallPlan, _b: Any) -> dict[str, Any]:
            out = []
            for region in REGIONS:
                models: dict[str, dict[str, Any]] = {}
                for itype in INSTANCE_TYPES:
                    if region.name not in itype.prices or itype.gpu is None:
                        continue
                    row = models.setdefault(FLAVORS[itype.name].model, {
                        "model": FLAVORS[itype.name].model, "available": 0, "planned_7_days": "0",
                        "planned_30_days": "0", "planned_100_days": "0",
                        "configurations": {"1x": 0, "2x": 0, "4x": 0, "8x": 0, "10x": 0}})
                    n = engine.in_stock(NAME, itype.name, region.name)
                    row["configurations"][f"{itype.gpu.count}x"] += n
                    row["available"] += n * itype.gpu.count
                for row in models.values():
                    row["available"] = str(row["available"])  # a string in the SDK's model
                out.append({"region": region.name, "stock_type": "GPU", "models": list(models.values())})
            return {"stocks": out}
        return await call(request, "offers", effect)

    @router.get("/pricebook")
    async def pricebook(request: Request) -> Response:
        def effect(_p: CallPlan, _b: Any) -> list[dict[str, Any]]:
            rows: dict[str, float] = {}
            for itype in INSTANCE_TYPES:  # per GPU-hour, by model; one price for every region
                count = itype.gpu.count if itype.gpu else 1
                per_gpu = min(itype.prices.values()) / count
                rows[FLAVORS[itype.name].model] = per_gpu
                if itype.spot_factor:
                    rows[FLAVORS[itype.name].model + SPOT_SUFFIX] = per_gpu * itype.spot_factor
            return [{"id": i + 1, "name": name, "value": round(value, 4), "original_value": round(value, 4),
                     "discount_applied": False, "start_time": None, "end_time": None}
                    for i, (name, value) in enumerate(sorted(rows.items()))]
        return await call(request, "offers", effect)

    @router.get("/core/sg-rules-protocols")
    async def protocols(request: Request) -> Response:
        return await call(request, "side_resources",
                          lambda _p, _b: ok("Getting protocols success", protocols=list(PROTOCOLS)))

    # ---------------------------------------------------------------- virtual machines

    def vms(request: Request) -> list[dict[str, Any]]:
        rows = [instance_json(m) for m in engine.live(NAME)]
        env = request.query_params.get("environment")
        if env:
            exact = request.query_params.get("exact_environment_match", "false").lower() == "true"
            rows = [r for r in rows if (r["environment"]["name"] == env if exact
                                        else env.lower() in r["environment"]["name"].lower())]
        return _search(request, rows, "name")

    @router.get("/core/virtual-machines")
    async def list_vms(request: Request) -> Response:
        return await call(request, "list", lambda _p, _b: _paged(request, vms(request), "instances"))

    @router.get("/core/virtual-machines/name-availability/{name}")
    async def vm_name(request: Request, name: str) -> Response:
        def effect(_p: CallPlan, _b: Any) -> dict[str, Any]:
            count = int(request.query_params.get("count") or 1)
            names = [name] if count == 1 else [f"{name}-{i}" for i in range(1, count + 1)]
            taken = {m.name for m in engine.live(NAME)} & set(names)
            return {"available": not taken, "name": name,
                    "message": "Name is already taken" if taken else "Name is available"}
        return await call(request, "list", effect)

    @router.post("/core/virtual-machines")
    async def create_vms(request: Request) -> Response:
        def region_of(body: CreateBody) -> str | None:
            env = next((e for e in _state(engine)["environments"].values()
                        if e["name"] == body.environment_name), None)
            return env["region"] if env else None

        def effect(plan: CallPlan, body: CreateBody) -> dict[str, Any]:
            return ok("Virtual machine(s) created successfully",
                      instances=[instance_json(m) for m in _create(engine, plan, body)])
        return await call(request, "create", effect, model=CreateBody, region=region_of)

    @router.get("/core/virtual-machines/{vm_id}")
    async def get_vm(request: Request, vm_id: str) -> Response:
        return await call(request, "get", lambda _p, _b: ok(
            "Getting virtual machine success", instance=instance_json(engine.get(NAME, _vm_id(vm_id)))))

    @router.delete("/core/virtual-machines/{vm_id}")
    async def delete_vm(request: Request, vm_id: str) -> Response:
        def effect(_p: CallPlan, _b: Any) -> dict[str, Any]:
            m = engine.get(NAME, _vm_id(vm_id))
            if m.status == TERMINATING:
                raise Conflict(f"Virtual machine {vm_id} is already being deleted")
            engine.terminate(NAME, m.id)
            return ok("Virtual machine deleted successfully")
        return await call(request, "terminate", effect)

    @router.post("/core/virtual-machines/{vm_id}/sg-rules")
    async def add_rule(request: Request, vm_id: str) -> Response:
        def effect(_p: CallPlan, body: RuleBody) -> dict[str, Any]:
            m = engine.get(NAME, _vm_id(vm_id))
            rule = _rule(engine, body)
            m.extra.setdefault("security_rules", []).append(rule)
            engine.save()
            return ok("Security rule added successfully", security_rule=rule)
        return await call(request, "side_resources", effect, model=RuleBody)

    @router.delete("/core/virtual-machines/{vm_id}/sg-rules/{rule_id}")
    async def delete_rule(request: Request, vm_id: str, rule_id: str) -> Response:
        def effect(_p: CallPlan, _b: Any) -> dict[str, Any]:
            m = engine.get(NAME, _vm_id(vm_id))
            rules = m.extra.get("security_rules", [])
            kept = [r for r in rules if str(r["id"]) != rule_id]
            if len(kept) == len(rules):
                raise NotFound(f"Security rule {rule_id} not found")
            m.extra["security_rules"] = kept
            engine.save()
            return ok("Security rule deleted successfully")
        return await call(request, "side_resources", effect)

    return router


def _create(engine: Engine, plan: CallPlan, body: CreateBody) -> list[Machine]:
    """Validate like the API, then make `count` VMs in one go (the engine call is synchronous)."""
    if body.count < 1:
        raise Invalid("count must be at least 1")
    env = _environment(engine, body.environment_name)
    keypair = next((k for k in _state(engine)["keypairs"].values()
                    if k["name"] == body.key_name and k["environment"] == env["name"]), None)
    if keypair is None:
        raise NotFound(f"Keypair {body.key_name} not found in environment {env['name']}")
    spot = body.flavor_name.endswith(SPOT_SUFFIX)
    base = body.flavor_name.removesuffix(SPOT_SUFFIX) if spot else body.flavor_name
    itype = BY_NAME.get(base)
    if itype is None or env["region"] not in itype.prices or (spot and not itype.spot_factor):
        raise Invalid(f"Flavor {body.flavor_name} is not available in region {env['region']}")
    image = body.image_name or DEFAULT_IMAGE
    if image not in IMAGES:
        raise Invalid(f"Image {image} is not available in region {env['region']}")
    if any(not label or len(label) > 255 for label in body.labels):  # [unconfirmed] label limits
        raise Invalid("labels must be 1-255 characters each")
    rules = [_rule(engine, r) for r in body.security_rules]
    names = [body.name] if body.count == 1 else [f"{body.name}-{i}" for i in range(1, body.count + 1)]
    for name in names:  # all or nothing: refuse before anything is made
        problem = FACADE.names.problem(name)
        if problem:
            raise Invalid(problem)
        if any(m.name == name for m in engine.live(NAME)):
            raise NameConflict(f"Virtual machine name {name} already exists")
    if engine.in_stock(NAME, base, env["region"]) < body.count:
        raise NoCapacity(f"Not enough stock for flavor {body.flavor_name} in {env['region']}", env["region"])
    ports = [int(r["port_range_min"]) for r in rules if r["direction"] == "ingress" and r["protocol"] == "tcp"
             and r["port_range_min"] is not None and r["port_range_min"] == r["port_range_max"]]
    extra = {"labels": list(body.labels), "security_rules": rules, "key_name": body.key_name,
             "image_name": image, "assign_floating_ip": body.assign_floating_ip,
             "port_randomization": body.enable_port_randomization, "callback_url": body.callback_url,
             "environment": {"id": env["id"], "name": env["name"], "region": env["region"], "org_id": 1}}
    made: list[Machine] = []
    for name in names:
        made += engine.create(NAME, name=name, instance_type=base, region=env["region"], spot=spot,
                              public_keys=[keypair["public_key"]], user_data=body.user_data, ports=ports,
                              stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot, extra=dict(extra))
    return made


def ingress(_engine: Engine, m: Machine) -> list[IngressRule]:
    """What the VM's security group lets in: its ingress rules for TCP or any protocol, a rule
    without ports covering them all."""
    rules: list[IngressRule] = []
    for r in m.extra.get("security_rules", []):
        if r.get("direction") != "ingress" or r.get("protocol") not in ("tcp", "any"):
            continue
        low, high = r.get("port_range_min"), r.get("port_range_max")
        first = int(low) if low is not None else 1 if high is None else int(high)
        last = int(high) if high is not None else 65535 if low is None else int(low)
        cidr = str(r.get("remote_ip_prefix") or ("::/0" if r.get("ethertype") == "IPv6" else "0.0.0.0/0"))
        if (first, last, cidr) not in rules:
            rules.append((first, last, cidr))
    return rules


def side_resources(engine: Engine) -> list[dict[str, Any]]:
    """The account's environments and key pairs (shared per region, never per machine)."""
    st = _state(engine)
    return [{"kind": kind, "id": str(row["id"]), "name": row["name"]}
            for kind, rows in (("environment", st["environments"]), ("keypair", st["keypairs"]))
            for row in rows.values()]


FACADE = Facade(
    name=NAME, prefix="/hyperstack/v1", display_name="Hyperstack (simulated)", build_router=build_router,
    credentials=lambda token: {"api_key": token},
    login_user="ubuntu", regions=REGIONS, instance_types=INSTANCE_TYPES,
    # Unique among live VMs of the account (the name-availability endpoint takes no environment);
    # length 50 per PROVIDER-APIS.md; the character set is [unconfirmed].
    names=NameRule(required=True, unique=True, max_length=50, pattern=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
                   hint="name must be 1-50 characters of letters, digits, '-', '_' or '.'"),
    machine_id=_machine_id, preinstalled={"k3s": k3s.SCRIPT}, ssh_port=22,
    side_resources=side_resources, ingress=ingress,
    # "500 requests per minute per IP; over it, all API calls for the next minute are blocked".
    rate_limits=(Limit(calls=500, per_s=60, by="ip", block_s=60, what="Hyperstack API rate limit"),),
)

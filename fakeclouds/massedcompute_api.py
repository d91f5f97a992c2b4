"""Massed Compute, simulated: its VM API (`https://vm.massedcompute.com/api/v1`) over the engine.
`FACADE` at the bottom declares it to the simulation.

Documented (research/provider-facts.md B.2; the official MCP tool catalog, 1:1 with /api/v1):
Bearer auth; `GET /gpu-inventory` (Lambda-like `{gpu_inventory: {name: {instance_type{name,
description, price_cents_per_hour, specs{vcpu_count, memory_gib, storage_gb}},
regions_with_capacity_available[{name, description}], capacity_available}}}`); `GET /images`;
`POST /instance/launch {imageId (int, required), productName, regionName ("any": Massed picks),
instanceName?, coupon?, command?, sshKeys?: [key names]}`; `GET /instance` `{runningInstances}`;
`GET /instance/{uuid}` `{runningInstance}` with a cleartext `password`; `POST /instance/terminate
{instanceUuids}`; `POST /account/token/validation` `{message: "Valid Token"}`; account SSH keys
`GET/POST /ssh-keys {name, publicKey}`, `DELETE /ssh-keys/{id}`. Launch needs billing configured.

[unconfirmed], chosen to be plausible and marked where they appear: every error body and code,
the status values besides the documented example "rented" (here a booting VM is already "rented"
with `os_booted: 0`, so only `os_booted` tells it is up), the launch / ssh-key / terminate answers,
`product_name` / `region_name` on an instance, region names, image catalogue, products and prices,
names being free-form and not unique, and the rate limit. The startup `command` runs once at boot
in the login user's home (like the engine's `#!` user data); it cannot authorize further SSH keys
in the simulation, since a machine's SSH server takes its keys at launch.
"""

from __future__ import annotations

import secrets
import time
import uuid
from typing import Any

import asyncssh
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from fakeclouds import k3s
from fakeclouds.catalog import Gpu, InstanceType, Region
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
    ServerFault,
    Unauthorized,
)
from fakeclouds.facade import Facade, NameRule
from fakeclouds.ratelimit import Limit
from fakeclouds.ssh import parse_public_key
from fakeclouds.vendor_errors import CodeTable, retry_after, status_of, vendor_router

NAME = "massedcompute"
LOGIN_USER = "Ubuntu"  # the documented instance sample's `username` (the seed: `Ubuntu@22`)
MAX_COMMAND = 16 * 1024  # [unconfirmed]
KEY_NAME_MAX = 64  # [unconfirmed]

# [unconfirmed] region names: the docs' example is "us-central-3"; all of Massed's capacity is in the US.
REGIONS = (
    Region("us-central-1", "US Central 1"),
    Region("us-central-3", "US Central 3"),
)
_REGION_NAMES = [r.name for r in REGIONS]


def _product(name: str, gpu: Gpu, desc: str, vcpus: int, mem: int, storage: int, price: float,
             stock: dict[str, int] | None = None) -> InstanceType:
    return InstanceType(
        name=name, description=f"{gpu.count}x {desc}", gpu_description=desc, vcpus=vcpus, memory_gib=mem,
        storage_gib=storage, gpu=gpu, spot_factor=None,
        prices={r: price for r in (stock or dict.fromkeys(_REGION_NAMES))},
        default_stock=stock or dict.fromkeys(_REGION_NAMES, 3),
    )


# Product names follow the documented example `gpu_1x_l40`; specs and prices are [unconfirmed]
# (plausible on-demand prices for Massed's 24-48 GB workstation/datacenter cards). nvidia-smi
# names and memory are what those GPUs report.
A5000 = Gpu("A5000", "NVIDIA RTX A5000", 24564, 1)
A6000 = Gpu("A6000", "NVIDIA RTX A6000", 49140, 1)
INSTANCE_TYPES = (
    _product("gpu_1x_a5000", A5000, "NVIDIA RTX A5000 (24 GB)", 8, 48, 256, 0.41),
    _product("gpu_1x_a6000", A6000, "NVIDIA RTX A6000 (48 GB)", 12, 64, 256, 0.57),
    _product("gpu_2x_a6000", Gpu("A6000", "NVIDIA RTX A6000", 49140, 2), "NVIDIA RTX A6000 (48 GB)",
             24, 128, 512, 1.14),
    _product("gpu_1x_l40", Gpu("L40", "NVIDIA L40", 46068, 1), "NVIDIA L40 (48 GB)", 16, 64, 512, 0.99),
    _product("gpu_1x_h100", Gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 1), "NVIDIA H100 (80 GB)",
             20, 128, 1024, 2.98, stock={"us-central-1": 1}),
)
_TYPES = {t.name: t for t in INSTANCE_TYPES}
_REGION_INFO = {r.name: r for r in REGIONS}

# [unconfirmed] the image catalogue; the documented instance sample shows {"id": 7, "name": "Art"}.
IMAGES = (
    {"id": 1, "name": "Ubuntu 22.04 Desktop (Base)",
     "description": "Ubuntu 22.04 with NVIDIA drivers and CUDA, no extra software"},
    {"id": 4, "name": "Ubuntu 24.04 Desktop (Base)",
     "description": "Ubuntu 24.04 with NVIDIA drivers and CUDA, no extra software"},
    {"id": 7, "name": "Art", "description": "AI-powered tools for artists and creatives"},
    {"id": 9, "name": "LLM", "description": "Tools to run and fine-tune large language models"},
)
_IMAGES = {i["id"]: i for i in IMAGES}


class Rejected(Invalid):
    """A 4xx with its own code: a launch naming something that does not exist, a duplicate key name."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.status = code, status


class BillingNotConfigured(CloudError):
    """Documented: launching needs billing (recharge amount and threshold) configured."""


# (HTTP status, code) per error class — every one [unconfirmed]; the most specific class wins (last).
_ERRORS = CodeTable([
    (Unauthorized, (401, "unauthorized")),
    (NotFound, (404, "not_found")),
    (Invalid, (400, "invalid_request")),
    (NameConflict, (409, "conflict")),
    (NoCapacity, (400, "insufficient_capacity")),
    (QuotaExceeded, (403, "instance_limit_reached")),
    (BillingNotConfigured, (402, "billing_not_configured")),
    (RateLimit, (429, "rate_limited")),
    (ServerFault, (500, "internal_error")),
    (LostResponse, (504, "gateway_timeout")),  # simulation only: the answer was lost on the way
], default=(500, "internal_error"))


def error_response(exc: CloudError, _request: Request | None = None) -> JSONResponse:
    status, code = (exc.status, exc.code) if isinstance(exc, Rejected) else _ERRORS(exc)
    body = {"error": {"code": code, "message": exc.message}}
    return JSONResponse(body, status_code=status_of(exc, status), headers=retry_after(exc))


class LaunchBody(BaseModel):
    # The MCP tool's schema has additionalProperties: false; an unknown field (e.g. the doc page's
    # older `sshKey`) is refused rather than silently dropped. [unconfirmed] for the API itself.
    model_config = ConfigDict(extra="forbid")

    imageId: StrictInt
    productName: str = Field(min_length=1)
    regionName: str = Field(min_length=1)
    instanceName: str | None = None
    coupon: str | None = None
    command: str | None = Field(default=None, max_length=MAX_COMMAND)
    sshKeys: list[str] = Field(default_factory=list)


class UuidsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    instanceUuids: list[str] = Field(min_length=1)


class SshKeyBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=KEY_NAME_MAX)
    publicKey: str = Field(min_length=1)


def product_json(itype: InstanceType) -> dict[str, Any]:
    return {"name": itype.name, "description": itype.description,
            "price_cents_per_hour": round(min(itype.prices.values()) * 100),
            "specs": {"vcpu_count": itype.vcpus, "memory_gib": itype.memory_gib,
                      "storage_gb": itype.storage_gib}}


def region_json(name: str) -> dict[str, str]:
    return {"name": name, "description": _REGION_INFO[name].description}


def _status(m: Machine) -> tuple[str, int, int]:
    """(status, os_booted, active). A booting VM is already "rented" (the documented example):
    only os_booted says it is up. error/terminating are [unconfirmed]."""
    if m.status == "pending":
        return "rented", 0, 1
    if m.status == "running":
        return "rented", 1, 1
    if m.status == "terminating":
        return "terminating", 0, 0
    return "error", 0, 1  # died: still billed until terminated


def instance_json(m: Machine) -> dict[str, Any]:
    status, booted, active = _status(m)
    image = _IMAGES[m.extra["image_id"]]
    return {
        "uuid": m.id, "name": m.name or "", "ip": m.address if m.status != "pending" else None,
        "username": m.ssh_user,
        "password": m.extra.get("password"),  # documented: the API returns it in clear (it is a fake)
        "status": status, "os_booted": booted, "command_startup": m.extra.get("command") or "",
        "created": iso(m.created_at), "active": active, "image": dict(image),
        # [unconfirmed] simulation fields: what was launched, where Massed put it.
        "product_name": m.instance_type, "region_name": m.region,
    }


def _keys(engine: Engine) -> dict[str, dict[str, str]]:
    return engine.ssh_keys[NAME]


def _key_json(k: dict[str, str]) -> dict[str, str]:
    return {"id": k["id"], "name": k["name"], "publicKey": k["public_key"], "created": k.get("created", "")}


def _pick_region(engine: Engine, product: str, asked: str) -> str:
    """The region to launch in: the one asked for, or for "any" the first with stock."""
    if asked != "any":
        if asked not in _REGION_INFO:
            raise Rejected("invalid_region", f"unknown region {asked!r}")
        if asked not in _TYPES[product].prices:
            raise NoCapacity(f"{product} is not available in {asked}", asked)
        return asked
    for region in _TYPES[product].prices:
        if engine.in_stock(NAME, product, region) > 0:
            return region
    raise NoCapacity(f"no capacity available for {product}")


def build_router(engine: Engine, token: str) -> APIRouter:
    router = vendor_router(error_response)
    call = make_call(engine, NAME, token)

    @router.post("/account/token/validation")
    async def validate(request: Request) -> Response:
        return await call(request, "verify", lambda _: {"message": "Valid Token"})

    @router.get("/gpu-inventory")
    async def inventory(request: Request) -> Response:
        def effect(_: Any) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for itype in INSTANCE_TYPES:
                stock = {r: engine.in_stock(NAME, itype.name, r) for r in itype.prices}
                out[itype.name] = {
                    "instance_type": product_json(itype),
                    "regions_with_capacity_available": [region_json(r) for r, n in stock.items() if n > 0],
                    "capacity_available": sum(stock.values()),
                }
            return {"gpu_inventory": out}
        return await call(request, "offers", effect)

    @router.get("/images")
    async def images(request: Request) -> Response:
        return await call(request, "offers", lambda _: {"images": [dict(i) for i in IMAGES]})

    @router.get("/ssh-keys")
    async def list_keys(request: Request) -> Response:
        return await call(request, "ssh_keys",
                          lambda _: {"sshKeys": [_key_json(k) for k in _keys(engine).values()]})

    @router.post("/ssh-keys")
    async def add_key(request: Request) -> Response:
        body = await authorized_body(request, token, SshKeyBody)

        def effect(_: Any) -> dict[str, Any]:
            if any(k["name"] == body.name for k in _keys(engine).values()):
                raise Rejected("ssh_key_exists", f"an SSH key named {body.name!r} already exists", 409)
            try:
                parse_public_key(body.publicKey)
            except ValueError as exc:
                raise Rejected("invalid_public_key", "publicKey is not an OpenSSH public key") from exc
            entry = {"id": str(uuid.uuid4()), "name": body.name, "public_key": body.publicKey.strip(),
                     "created": iso(time.time())}
            _keys(engine)[entry["id"]] = entry
            engine.save()
            return {"message": "SSH key added", "sshKey": _key_json(entry)}  # [unconfirmed] shape
        return await call(request, "ssh_keys", effect)

    @router.delete("/ssh-keys/{key_id}")
    async def delete_key(request: Request, key_id: str) -> Response:
        def effect(_: Any) -> dict[str, Any]:
            engine.delete_ssh_key(NAME, key_id)  # NotFound -> 404
            return {"message": "SSH key deleted"}
        return await call(request, "ssh_keys", effect)

    @router.post("/instance/launch")
    async def launch(request: Request) -> Response:
        body = await authorized_body(request, token, LaunchBody)

        def effect(plan: Any) -> dict[str, Any]:
            # Looked up per call: reset() replaces the facade's state.
            if not engine.facade_state[NAME].get("billing_configured", True):
                raise BillingNotConfigured("billing is not configured: set a recharge amount and threshold")
            if body.productName not in _TYPES:
                raise Rejected("invalid_product", f"unknown product {body.productName!r}")
            if body.imageId not in _IMAGES:
                raise Rejected("invalid_image", f"unknown image {body.imageId}")
            if body.coupon:
                raise Rejected("invalid_coupon", "coupon is not valid")  # the simulation has no coupons
            by_name = {k["name"]: k for k in _keys(engine).values()}
            missing = [n for n in body.sshKeys if n not in by_name]
            if missing:
                raise Rejected("invalid_ssh_key", f"unknown SSH key {missing[0]!r}")
            keys = [by_name[n]["public_key"] for n in body.sshKeys] or [_nobodys_key()]
            region = _pick_region(engine, body.productName, body.regionName)
            (m,) = engine.create(
                NAME, name=body.instanceName, instance_type=body.productName, region=region, public_keys=keys,
                # The startup command runs once at boot, like a `#!` user-data script.
                user_data=f"#!/bin/bash\n{body.command}\n" if body.command else None,
                stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot,
                extra={"image_id": body.imageId, "command": body.command or "",
                       "password": secrets.token_urlsafe(12), "ssh_keys": list(body.sshKeys)},
            )
            # [unconfirmed] answer shape: a message and the new VM's uuid.
            return {"message": "Instance launched", "instanceUuid": m.id}
        region = None if body.regionName == "any" else body.regionName
        return await call(request, "create", effect, region=region)

    @router.get("/instance")
    async def list_instances(request: Request) -> Response:
        return await call(request, "list",
                          lambda _: {"runningInstances": [instance_json(m) for m in engine.live(NAME)]})

    @router.get("/instance/{instance_uuid}")
    async def get_instance(request: Request, instance_uuid: str) -> Response:
        return await call(request, "get",
                          lambda _: {"runningInstance": instance_json(engine.get(NAME, instance_uuid))})

    @router.post("/instance/terminate")
    async def terminate(request: Request) -> Response:
        body = await authorized_body(request, token, UuidsBody)

        def effect(_: Any) -> dict[str, Any]:
            machines = [engine.get(NAME, u) for u in body.instanceUuids]  # all exist, or 404 for all
            for m in machines:
                engine.terminate(NAME, m.id)  # terminating again is a no-op
            return {"message": "Instances terminated", "instanceUuids": [m.id for m in machines]}
        return await call(request, "terminate", effect)

    return router


def _nobodys_key() -> str:
    # Launched without sshKeys: the real VM is reachable with its password only. The simulated SSH
    # server takes keys, so it gets one whose private half is thrown away: nobody logs in.
    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


FACADE = Facade(
    name=NAME, prefix="/massedcompute/api/v1", display_name="Massed Compute (simulated)",
    build_router=build_router, credentials=lambda token: {"api_key": token},
    login_user=LOGIN_USER, regions=REGIONS, instance_types=INSTANCE_TYPES,
    names=NameRule(required=False, unique=False, max_length=64),  # [unconfirmed]: free-form, not unique
    machine_id=lambda: str(uuid.uuid4()),  # documented: instances are addressed by UUID
    preinstalled={"k3s": k3s.SCRIPT},  # stands in for what gpuprov's installer would put there
    ssh_port=22,  # the API reports only `ip`: SSH is on 22 there
    # [unconfirmed]: no limit is documented; 120 calls a minute per API token.
    rate_limits=(Limit(calls=120, per_s=60.0, what="API rate limit"),),
)

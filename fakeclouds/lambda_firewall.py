"""Lambda Cloud's firewall, simulated (part of fakeclouds/lambda_api.py): per-instance rulesets
(`/firewall-rulesets`, OpenAPI 1.10) and the account-wide rules (`/firewall-rules`, and the same
rules as the `global` ruleset).

A ruleset lives in one region and is attached at launch (`firewall_rulesets: [{id}]`, same
region); nothing attaches or detaches one later. It is in use while an instance that carries it
is listed — until that instance is really gone, not merely `terminating` — and deleting it then is
refused with 400 `firewall-rulesets/firewall-ruleset-in-use`. The rules are enforced where the
simulation serves a port beside SSH: the simulated Kubernetes API on 6443 (`ingress`,
fakeclouds/k8s_api.py); SSH itself is not filtered. State: `engine.facade_state["lambda"]["rulesets"]`.
"""

from __future__ import annotations

import ipaddress
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field, field_validator, model_validator

from fakeclouds.common import iso
from fakeclouds.engine import Engine, Machine
from fakeclouds.errors import Invalid, NotFound, QuotaExceeded
from fakeclouds.faults import CallPlan

NAME = "lambda"  # the facade whose state this is (fakeclouds/lambda_api.py)
MAX_RULES = 20  # the older docs' limit per ruleset [unconfirmed for rulesets]
MAX_RULESETS = 50  # per account, before 400 global/quota-exceeded [unconfirmed: no number is documented]
# What the account's global rules start as: "only ICMP and TCP/22 inbound" (older docs).
DEFAULT_GLOBAL: list[dict[str, Any]] = [
    {"protocol": "icmp", "source_network": "0.0.0.0/0", "description": "Allow ICMP"},
    {"protocol": "tcp", "port_range": [22, 22], "source_network": "0.0.0.0/0", "description": "Allow SSH"},
]


class RulesetInUse(Invalid):
    """400 firewall-rulesets/firewall-ruleset-in-use."""


class Rule(BaseModel):
    protocol: Literal["tcp", "udp", "icmp", "all"]
    port_range: list[int] | None = Field(default=None, min_length=2, max_length=2)
    source_network: str
    description: str = Field(max_length=128)

    @field_validator("source_network")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            ipaddress.IPv4Network(v if "/" in v else f"{v}/32")
        except ValueError as exc:
            raise ValueError("source_network must be an IPv4 CIDR") from exc
        return v

    @model_validator(mode="after")
    def _ports(self) -> Rule:
        if self.protocol == "icmp":
            if self.port_range is not None:
                raise ValueError("port_range is not allowed for icmp")
        elif self.port_range is None:
            raise ValueError(f"port_range is required for {self.protocol}")
        elif not 1 <= self.port_range[0] <= self.port_range[1] <= 65535:
            raise ValueError("port_range must be [min, max] within 1-65535")
        return self


class RulesetCreate(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    region: str
    rules: list[Rule] = Field(max_length=MAX_RULES)


class RulesetPatch(BaseModel):
    name: str | None = Field(default=None, min_length=1, max_length=64)
    rules: list[Rule] | None = Field(default=None, max_length=MAX_RULES)


class RulesPut(BaseModel):
    data: list[Rule] = Field(max_length=MAX_RULES)


def state(engine: Engine) -> dict[str, Any]:
    return engine.facade_state[NAME]


def rulesets(engine: Engine) -> dict[str, dict[str, Any]]:
    return state(engine).setdefault("rulesets", {})


def global_rules(engine: Engine) -> list[dict[str, Any]]:
    return state(engine).setdefault("global_rules", [dict(r) for r in DEFAULT_GLOBAL])


def attached(m: Machine) -> list[str]:
    return list(m.extra.get("firewall_rulesets", []))


def check_launch(engine: Engine, ids: list[str], region: str) -> None:
    """A launch's `firewall_rulesets`: each exists (else 404) and lies in the launch's region."""
    for rid in ids:
        rs = rulesets(engine).get(rid)
        if rs is None:
            raise NotFound(f"firewall ruleset {rid!r} does not exist")
        if rs["region"] != region:
            raise Invalid(f"firewall ruleset {rid!r} is in {rs['region']}, not {region}")


def ingress(engine: Engine, m: Machine) -> list[tuple[int, int, str]]:
    """What reaches `m` (Facade.ingress): its rulesets' TCP rules, or the account's global rules when
    it carries none. (Whether a ruleset adds to the global rules is undocumented; here it replaces
    them, which is why the adapter puts tcp/22 in every ruleset.)"""
    ids = attached(m)
    rules = [r for rid in ids for r in rulesets(engine).get(rid, {}).get("rules", [])] if ids \
        else global_rules(engine)
    found = []
    for r in rules:
        if r.get("protocol") in ("tcp", "all"):
            first, last = r.get("port_range") or [1, 65535]
            found.append((int(first), int(last), str(r["source_network"])))
    return found


def side_resource_rows(engine: Engine) -> list[dict[str, Any]]:
    return [{"kind": "firewall-ruleset", "id": rs["id"], "name": rs["name"]}
            for rs in rulesets(engine).values()]


def _rule_json(rule: Rule) -> dict[str, Any]:
    return rule.model_dump(exclude_none=True)


Effect = Callable[[CallPlan], Any]
Call = Callable[..., Awaitable[Response]]


def add_routes(router: APIRouter, engine: Engine, call: Call, visible: Callable[[], list[Machine]],
               region_json: Callable[[str], dict[str, str]]) -> None:
    """The firewall endpoints on `router`; `call(request, op, effect, model=)` runs each (auth, rate,
    faults); `visible()` are the instances the API lists (what keeps a ruleset in use)."""

    def ruleset_json(rs: dict[str, Any]) -> dict[str, Any]:
        users = [m.id for m in visible() if rs["id"] in attached(m)]
        return {"id": rs["id"], "name": rs["name"], "region": region_json(rs["region"]), "rules": rs["rules"],
                "created": rs["created"], "instance_ids": users}

    def find(rid: str) -> dict[str, Any]:
        rs = rulesets(engine).get(rid)
        if rs is None:
            raise NotFound(f"firewall ruleset {rid!r} does not exist")
        return rs

    def global_json() -> dict[str, Any]:
        return {"id": "global", "name": "Default Workspace Global Rules", "rules": global_rules(engine)}

    @router.get("/firewall-rulesets")
    async def list_rulesets(request: Request) -> Response:
        return await call(request, "side_resources",
                          lambda _p, _b: {"data": [ruleset_json(rs) for rs in rulesets(engine).values()]})

    @router.post("/firewall-rulesets")
    async def create_ruleset(request: Request) -> Response:
        def effect(_: CallPlan, body: RulesetCreate) -> dict[str, Any]:
            if engine.facade(NAME).region(body.region) is None:
                raise Invalid(f"unknown region {body.region!r}")
            if len(rulesets(engine)) >= MAX_RULESETS:
                raise QuotaExceeded(f"at most {MAX_RULESETS} firewall rulesets")
            rs: dict[str, Any] = {"id": uuid.uuid4().hex, "name": body.name, "region": body.region,
                  "rules": [_rule_json(r) for r in body.rules], "created": iso(time.time())}
            rulesets(engine)[rs["id"]] = rs
            engine.save()
            return {"data": ruleset_json(rs)}
        return await call(request, "side_resources", effect, model=RulesetCreate)

    # `global` is declared before `{ruleset_id}` so it is not taken for an id.
    @router.get("/firewall-rulesets/global")
    async def get_global(request: Request) -> Response:
        return await call(request, "side_resources", lambda _p, _b: {"data": global_json()})

    @router.patch("/firewall-rulesets/global")
    async def patch_global(request: Request) -> Response:
        def effect(_: CallPlan, body: RulesetPatch) -> dict[str, Any]:
            if body.rules is not None:
                state(engine)["global_rules"] = [_rule_json(r) for r in body.rules]
                engine.save()
            return {"data": global_json()}
        return await call(request, "side_resources", effect, model=RulesetPatch)

    @router.get("/firewall-rulesets/{ruleset_id}")
    async def get_ruleset(request: Request, ruleset_id: str) -> Response:
        return await call(request, "side_resources", lambda _p, _b: {"data": ruleset_json(find(ruleset_id))})

    @router.patch("/firewall-rulesets/{ruleset_id}")
    async def patch_ruleset(request: Request, ruleset_id: str) -> Response:
        def effect(_: CallPlan, body: RulesetPatch) -> dict[str, Any]:
            rs = find(ruleset_id)
            if body.name is not None:
                rs["name"] = body.name
            if body.rules is not None:  # applies to every instance that carries it
                rs["rules"] = [_rule_json(r) for r in body.rules]
            engine.save()
            return {"data": ruleset_json(rs)}
        return await call(request, "side_resources", effect, model=RulesetPatch)

    @router.delete("/firewall-rulesets/{ruleset_id}")
    async def delete_ruleset(request: Request, ruleset_id: str) -> Response:
        def effect(_: CallPlan, _b: None) -> dict[str, Any]:
            rs = find(ruleset_id)
            if any(ruleset_id in attached(m) for m in visible()):
                raise RulesetInUse("Firewall ruleset is in use by one or more instances.")
            del rulesets(engine)[rs["id"]]
            engine.save()
            return {"data": {}}
        return await call(request, "side_resources", effect)

    @router.get("/firewall-rules")
    async def get_rules(request: Request) -> Response:
        return await call(request, "side_resources", lambda _p, _b: {"data": global_rules(engine)})

    @router.put("/firewall-rules")
    async def put_rules(request: Request) -> Response:
        def effect(_: CallPlan, body: RulesPut) -> dict[str, Any]:
            state(engine)["global_rules"] = [_rule_json(r) for r in body.data]  # overwrites all
            engine.save()
            return {"data": global_rules(engine)}
        return await call(request, "side_resources", effect, model=RulesPut)

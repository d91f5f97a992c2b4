"""The /_fake admin API: faults, stock, timing, inspection. No auth (tests, bench, demo only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from fakeclouds import preemption
from fakeclouds.bodies import json_body, optional_object
from fakeclouds.engine import Engine, Machine
from fakeclouds.errors import BadBody, CloudError, NotFound
from fakeclouds.faults import FaultRule
from fakeclouds.vendor_errors import vendor_router


class FaultBody(BaseModel):
    model_config = ConfigDict(extra="allow")  # kind-specific parameters; FaultRule.build checks them
    facade: str = "*"
    op: str = "*"
    kind: str
    times: int = 1


class StockBody(BaseModel):
    instance_type: str
    region: str
    count: int
    facade: str | None = None  # needed only when several facades sell a type of that name


class ConfigBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    boot_delay: float | None = None
    terminate_delay: float | None = None
    quota: dict[str, int | None] | None = None  # facade -> max live machines (None: unlimited)
    time_scale: float | None = None  # documented rate-limit windows x this (1: real speed, 0: off)
    hold_boots: bool | None = None  # machines created from now boot only at POST /machines/{id}/boot


def _error(exc: CloudError, _request: Request | None = None) -> JSONResponse:
    status = 404 if isinstance(exc, NotFound) else 400
    code = "Invalid" if isinstance(exc, BadBody) else type(exc).__name__  # codes name the engine's errors
    return JSONResponse({"error": {"code": code, "message": exc.message}}, status_code=status)


def admin_machine_json(engine: Engine, m: Machine) -> dict[str, Any]:
    d = m.to_dict()
    d.update(billing_seconds=round(m.billing_seconds(), 3), host=m.host, home=str(engine.machine_home(m)))
    return d


def build_router(engine: Engine) -> APIRouter:
    router = vendor_router(_error)

    @router.post("/faults", status_code=201)
    async def add_fault(request: Request) -> Response:
        body = await json_body(request, FaultBody)
        try:
            built = FaultRule.build(body.facade, body.op, body.kind, body.times, facades=engine.facades,
                                    **(body.model_extra or {}))
        except TypeError as exc:
            raise CloudError(f"bad fault parameters: {exc}") from None
        rule = engine.faults.add(built)
        return JSONResponse(rule.to_dict(), status_code=201)

    @router.get("/faults")
    async def list_faults() -> dict[str, Any]:
        return {"faults": [r.to_dict() for r in engine.faults.rules]}

    @router.delete("/faults")
    async def clear_faults() -> dict[str, Any]:
        n = len(engine.faults.rules)
        engine.faults.clear()
        return {"cleared": n}

    @router.get("/machines")
    async def machines() -> dict[str, Any]:
        return {"machines": [admin_machine_json(engine, m) for m in engine.machines.values()]}

    @router.get("/machines/{machine_id}")
    async def machine(machine_id: str) -> Response:
        m = engine.machines.get(machine_id)
        if m is None:
            raise NotFound(f"no machine {machine_id!r}")
        return JSONResponse(admin_machine_json(engine, m))

    @router.post("/machines/{machine_id}/die")
    async def die(machine_id: str) -> Response:
        m = await engine.kill(machine_id)
        return JSONResponse(admin_machine_json(engine, m))

    @router.post("/machines/{machine_id}/boot")
    async def boot(machine_id: str) -> Response:
        """A booting machine's boot ends now (Engine.boot_now)."""
        return JSONResponse(admin_machine_json(engine, engine.boot_now(machine_id)))

    @router.post("/machines/{machine_id}/preempt")
    async def preempt(machine_id: str, request: Request) -> Response:
        """The cloud takes the machine back: now, or (`{"notice_s": s}`) after its interruption notice
        has been out `s` seconds while the machine still runs (fakeclouds/preemption.py)."""
        body = await optional_object(request) or {}
        notice = body.get("notice_s", 0.0)
        if isinstance(notice, bool) or not isinstance(notice, int | float):
            raise CloudError("notice_s must be a number of seconds")
        m = await preemption.preempt(engine, machine_id, float(notice))
        return JSONResponse(admin_machine_json(engine, m))

    @router.get("/side-resources")
    async def side_resources() -> dict[str, Any]:
        """Account-level resources that outlive machines: Lambda's SSH key objects, and what facades list."""
        rows = [{"facade": f, "kind": "ssh-key", "id": k["id"], "name": k["name"]}
                for f, keys in engine.ssh_keys.items() for k in keys.values()]
        for facade in engine.facades.values():  # those a facade keeps itself (Facade.side_resources)
            if facade.side_resources is not None:
                rows += [{**row, "facade": facade.name} for row in facade.side_resources(engine)]
        return {"side_resources": rows}

    @router.get("/tls")
    async def tls(request: Request) -> Response:
        """The TLS listener's URL and the CA its certificate chains to (for facades with `tls`)."""
        info = getattr(request.app.state, "tls", None)
        if info is None:
            raise NotFound("this server has no TLS listener")
        return JSONResponse(info)

    @router.get("/stock")
    async def get_stock() -> dict[str, Any]:
        rows = [{"facade": f, "instance_type": t, "region": r, "count": n}
                for (f, t, r), n in engine.stock.items()]
        return {"stock": rows}

    @router.put("/stock")
    async def set_stock(request: Request) -> Response:
        body = await json_body(request, StockBody)
        engine.set_stock(body.instance_type, body.region, body.count, body.facade)
        return JSONResponse(body.model_dump())

    @router.get("/config")
    async def get_config() -> dict[str, Any]:
        return {"boot_delay": engine.boot_delay, "terminate_delay": engine.terminate_delay,
                "quota": engine.quota, "time_scale": engine.time_scale, "hold_boots": engine.hold_boots}

    @router.put("/config")
    async def set_config(request: Request) -> Response:
        body = await json_body(request, ConfigBody)
        engine.configure(boot_delay=body.boot_delay, terminate_delay=body.terminate_delay,
                         quota=body.quota, time_scale=body.time_scale, hold_boots=body.hold_boots)
        return JSONResponse(await get_config())

    @router.get("/calls")
    async def calls() -> dict[str, Any]:
        """Per facade, the calls served since the last clear (fakeclouds/calls.py), how many of each,
        and per running machine the SSH logins its server accepted."""
        return {"calls": engine.calls.as_json(), "counts": engine.calls.counts_json(),
                "ssh_logins": engine.calls.logins_json()}

    @router.delete("/calls")
    async def clear_calls() -> dict[str, Any]:
        engine.calls.clear()
        return {"ok": True}

    @router.post("/reset")
    async def reset() -> dict[str, Any]:
        await engine.reset()
        return {"ok": True}

    return router

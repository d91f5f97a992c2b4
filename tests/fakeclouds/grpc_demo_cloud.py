"""FAKE_GRPC_DEMO: a made-up cloud that exists only in tests, speaking gRPC only. It proves that a
facade can serve gRPC (fakeclouds/grpc_host.py) on the server's gRPC port while sharing the engine,
its machines and the `/_fake` fault rules with the HTTP facades. No vendor's API looks like it.

Service `fakeclouds.grpcdemo.v1.MachineService`, every message a `google.protobuf.Struct` (the real
Nebius/Modal facades bring their vendors' protos):

| method | request | response |
|---|---|---|
| `Create` | `{instance_type, region, ssh_public_keys: [..], name?}` | the machine |
| `Get` | `{id}` | the machine |
| `List` | `{}` | `{machines: [..]}` |
| `Delete` | `{id}` | the machine (status `terminating`) |

A machine: `{id, name, instance_type, region, status, host, ssh_port, ssh_user}`; SSH on 127.0.0.1
at a port of its own (`host`/`ssh_port` set while running). Fault ops: `create`, `get`, `list`,
`terminate`.
"""

from __future__ import annotations

import uuid
from typing import Any

import grpc
from fastapi import APIRouter
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct

from fakeclouds.catalog import InstanceType, Region
from fakeclouds.engine import Engine, Machine
from fakeclouds.errors import Invalid
from fakeclouds.facade import FREE_FORM_64, Facade
from fakeclouds.faults import CallPlan
from fakeclouds.grpc_call import GrpcCaller
from fakeclouds.grpc_host import service, unary

NAME = "fake-grpc-demo"
SERVICE = "fakeclouds.grpcdemo.v1.MachineService"
LOGIN_USER = "demo"

REGIONS = (Region("demo-1", "A region of the gRPC demo cloud"),)
INSTANCE_TYPES = (
    InstanceType(name="demo-cpu", description="2 vCPU, 4 GiB RAM (CPU only)", gpu_description=None, vcpus=2,
                 memory_gib=4, storage_gib=20, gpu=None, prices={"demo-1": 0.01},
                 default_stock={"demo-1": 4}),
)


def struct(fields: dict[str, Any]) -> Struct:
    message = Struct()
    message.update(fields)
    return message


def fields_of(message: Struct) -> dict[str, Any]:
    return json_format.MessageToDict(message)


def machine_struct(m: Machine) -> Struct:
    running = m.status == "running"
    return struct({"id": m.id, "name": m.name, "instance_type": m.instance_type, "region": m.region,
                   "status": m.status, "host": m.host, "ssh_port": m.ssh_port if running else None,
                   "ssh_user": m.ssh_user})


def _text(fields: dict[str, Any], key: str, required: bool = True) -> str | None:
    value = fields.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise Invalid(f"{key}: a non-empty string is required")
    return value


def _required(fields: dict[str, Any], key: str) -> str:
    value = _text(fields, key)
    assert value is not None
    return value


def _keys(fields: dict[str, Any]) -> list[str]:
    keys = fields.get("ssh_public_keys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise Invalid("ssh_public_keys: a non-empty list of strings is required")
    return keys


def build_services(engine: Engine, token: str) -> list[Any]:
    caller = GrpcCaller(engine, NAME, token)

    async def create(request: Struct, context: grpc.aio.ServicerContext) -> Struct:
        fields = fields_of(request)
        body = await caller.parse(context, lambda: (
            _required(fields, "instance_type"), _required(fields, "region"), _keys(fields),
            _text(fields, "name", required=False)))
        instance_type, region, keys, name = body

        def effect(plan: CallPlan) -> Struct:
            (m,) = engine.create(NAME, instance_type=instance_type, region=region, public_keys=keys,
                                 name=name, stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot,
                                 preempt_after=plan.preempt_after)
            return machine_struct(m)
        return await caller.run(context, "create", effect, region=region)

    async def get(request: Struct, context: grpc.aio.ServicerContext) -> Struct:
        machine_id = await caller.parse(context, lambda: _required(fields_of(request), "id"))
        return await caller.run(context, "get", lambda _: machine_struct(engine.get(NAME, machine_id)))

    async def list_machines(request: Struct, context: grpc.aio.ServicerContext) -> Struct:
        def effect(_: CallPlan) -> Struct:
            return struct({"machines": [fields_of(machine_struct(m)) for m in engine.live(NAME)]})
        return await caller.run(context, "list", effect)

    async def delete(request: Struct, context: grpc.aio.ServicerContext) -> Struct:
        machine_id = await caller.parse(context, lambda: _required(fields_of(request), "id"))
        return await caller.run(context, "terminate",
                                lambda _: machine_struct(engine.terminate(NAME, machine_id)))

    methods = {"Create": create, "Get": get, "List": list_machines, "Delete": delete}
    return [service(SERVICE, {name: unary(fn, Struct, Struct) for name, fn in methods.items()})]


FAKE_GRPC_DEMO = Facade(
    name=NAME, prefix="/fake-grpc-demo", display_name="gRPC demo cloud (simulated, tests only)",
    build_router=lambda engine, token: APIRouter(),  # gRPC only: no HTTP API
    credentials=lambda token: {"api_key": token}, login_user=LOGIN_USER, regions=REGIONS,
    instance_types=INSTANCE_TYPES, names=FREE_FORM_64, machine_id=lambda: f"demo-{uuid.uuid4().hex[:10]}",
    grpc=build_services,
)

"""Modal (simulated): the gRPC control plane the official `modal` client (1.6.4, pinned) talks to,
unchanged, through `MODAL_SERVER_URL`-style `http://host:port` (the client's `server_url`).

Messages are the client's own: `modal_proto.api_pb2` (modal_proto/api.proto, shipped in the `modal`
wheel), service `modal.client.ModalClient`. Modal's API is internal and changes with each release,
so only the RPCs a GPU Sandbox's life uses are answered (research/new-clouds-facts.md, "Modal"):

| RPC | op (fault rules) | answer |
|---|---|---|
| ClientHello | `offers` | empty hello (the adapter's verify and offers) |
| EnvironmentGetOrCreate | — | environment `main` with image builder version 2025.06 (others NOT_FOUND) |
| AppGetOrCreate | — | the app of that name in that environment (made if asked) |
| ImageGetOrCreate | — | an image id per definition, built at once |
| SandboxCreate | `create` | a sandbox = an engine machine of type `<GPU>[:N]`; name unique per app |
| SandboxGetTaskId | — | its task id (scheduled at once), or the finished task's result |
| SandboxGetTunnels | `get` | port 22's tunnel: the machine's SSH host and port, once it listens |
| SandboxWait, SandboxWaitV2 | `get` | its result: none while alive, TERMINATED, or TIMEOUT past its timeout |
| AuthTokenGet | — | a short-lived token (an unsigned JWT with `exp`, which is all the client reads) |
| SandboxList, SandboxListV2 | `list` | the app's sandboxes with every asked tag, newest first |
| SandboxTagsGet | `list` | the sandbox's tags |
| SandboxTerminate | `terminate` | terminated (already finished: nothing to do) |

SSH: the sandbox's machine is a real SSH server (fakeclouds/ssh.py) for user root, accepting exactly
the public keys the sandbox's command writes to /root/.ssh/authorized_keys before it execs sshd
(`modal_keys.keys_of`); a command that starts no sshd with keys is refused, as a simulation limit.
A sandbox lives at most `timeout_secs` (Modal: ≤ 24 h): then it is terminated with result TIMEOUT.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import grpc
from fastapi import APIRouter
from google.protobuf import empty_pb2
from modal_proto import api_pb2

from fakeclouds import modal_keys
from fakeclouds.catalog import Gpu, InstanceType, Region
from fakeclouds.engine import PENDING, RUNNING, TERMINATED, TERMINATING, Engine, Machine
from fakeclouds.errors import Invalid, NotFound, Unauthorized
from fakeclouds.facade import Facade, NameRule
from fakeclouds.faults import CallPlan
from fakeclouds.grpc_call import metadata_value
from fakeclouds.grpc_host import service, unary
from fakeclouds.modal_wire import ModalCaller, token_id_for
from providers.modal_gpus import BY_NAME, GPUS

NAME = "modal"
SERVICE = "modal.client.ModalClient"
REGION = "global"
ENVIRONMENTS = ("main",)
IMAGE_BUILDER_VERSION = "2025.06"  # one the client supports (modal/_image.py ImageBuilderVersion)
MAX_TIMEOUT_S = 24 * 3600  # Modal: "Sandboxes ... have a maximum lifetime of 24 hours"
STOCK = 4
AUTH_TOKEN_KEY = "x-modal-auth-token"
_ID_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
G = api_pb2.GenericResult


def _modal_id(prefix: str) -> str:
    """Modal's id shape: `sb-` + 22 base-62 characters (the client routes sb- ids of that shape to
    its V1 sandbox backend, modal/sandbox/_common.py `_is_v1_sandbox_id`)."""
    n = uuid.uuid4().int
    chars = []
    for _ in range(22):
        n, r = divmod(n, 62)
        chars.append(_ID_CHARS[r])
    return f"{prefix}-{''.join(chars)}"


def _types() -> tuple[InstanceType, ...]:
    out = []
    for g in GPUS:
        for count in range(1, g.max_count + 1):
            out.append(
                InstanceType(
                    name=g.spec(count),
                    description=f"{count}x {g.name} sandbox",
                    gpu_description=g.name,
                    vcpus=count,
                    memory_gib=count,
                    storage_gib=50,
                    gpu=Gpu(
                        name=g.canonical,
                        smi_name=f"NVIDIA {g.name}",
                        memory_mib=g.memory_gib * 1024,
                        count=count,
                    ),
                    prices={REGION: g.price_per_hour * count},
                    default_stock={REGION: STOCK},
                )
            )
    return tuple(out)


def _state(engine: Engine) -> dict[str, Any]:
    state = engine.facade_state[NAME]
    for part in ("apps", "images"):
        state.setdefault(part, {})
    state.setdefault("rpcs", [])
    return state


def _result(m: Machine) -> api_pb2.GenericResult | None:
    """The finished sandbox's result; None while it lives."""
    if m.status not in (TERMINATED, TERMINATING):
        return None
    if m.extra.get("ended") == "timeout":
        return G(status=G.GENERIC_STATUS_TIMEOUT, exception="Sandbox timed out")
    return G(status=G.GENERIC_STATUS_TERMINATED, exception="Sandbox terminated")


def expire(engine: Engine, now: float | None = None) -> None:
    """Terminate every sandbox past its timeout, with result TIMEOUT (checked on each call)."""
    now = time.time() if now is None else now
    for m in engine.live(NAME):
        if m.status != TERMINATING and now >= m.created_at + float(
            m.extra.get("timeout_secs", MAX_TIMEOUT_S)
        ):
            m.extra["ended"] = "timeout"
            engine.terminate(NAME, m.id)


def _sandbox(engine: Engine, sandbox_id: str) -> Machine:
    expire(engine)
    m = engine.machines.get(sandbox_id)
    if m is None or m.facade != NAME:
        raise NotFound(f"Sandbox {sandbox_id!r} not found")
    return m


def _info(m: Machine) -> api_pb2.SandboxInfo:
    x = m.extra
    task = api_pb2.TaskInfo(
        id=x["task_id"], sandbox_id=m.id, enqueued_at=m.created_at, gpu_type=m.instance_type
    )
    if (result := _result(m)) is not None:
        task.result.CopyFrom(result)
    return api_pb2.SandboxInfo(
        id=m.id,
        created_at=m.created_at,
        app_id=x["app_id"],
        name=m.name or "",
        image_id=x["image_id"],
        timeout_secs=int(x["timeout_secs"]),
        task_info=task,
        tags=[api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in sorted(m.labels.items())],
        metadata=api_pb2.SandboxHandleMetadata(app_id=x["app_id"]),
    )


def _instance_type(definition: api_pb2.Sandbox) -> str:
    gpu = definition.resources.gpu_config
    g = BY_NAME.get(gpu.gpu_type)
    if g is None:
        raise Invalid(f"GPU type {gpu.gpu_type!r} is not available for sandboxes")
    count = gpu.count or 1
    if count > g.max_count:
        raise Invalid(f"{g.name} supports at most {g.max_count} GPUs per container, got {count}")
    return g.spec(count)


def build_services(engine: Engine, token: str) -> list[Any]:
    state = _state(engine)

    def record(method: str) -> None:
        if method not in state["rpcs"]:
            state["rpcs"].append(method)

    caller = ModalCaller(engine, NAME, token, calls=record)

    async def hello(request: empty_pb2.Empty, ctx: grpc.aio.ServicerContext) -> api_pb2.ClientHelloResponse:
        return await caller.run(ctx, "ClientHello", "offers", lambda _: api_pb2.ClientHelloResponse())

    async def environment(
        request: api_pb2.EnvironmentGetOrCreateRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.EnvironmentGetOrCreateResponse:
        def effect(_: CallPlan) -> api_pb2.EnvironmentGetOrCreateResponse:
            name = request.deployment_name or "main"
            if name not in ENVIRONMENTS:
                raise NotFound(f"Environment '{name}' not found")
            settings = api_pb2.EnvironmentSettings(image_builder_version=IMAGE_BUILDER_VERSION)
            return api_pb2.EnvironmentGetOrCreateResponse(
                environment_id=f"en-{name}",
                metadata=api_pb2.EnvironmentMetadata(name=name, settings=settings),
            )

        return await caller.run(ctx, "EnvironmentGetOrCreate", None, effect)

    async def app(
        request: api_pb2.AppGetOrCreateRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.AppGetOrCreateResponse:
        def effect(_: CallPlan) -> api_pb2.AppGetOrCreateResponse:
            env = request.environment_name or "main"
            if env not in ENVIRONMENTS:
                raise NotFound(f"Environment '{env}' not found")
            key = f"{env}/{request.app_name}"
            if key not in state["apps"]:
                if request.object_creation_type != api_pb2.OBJECT_CREATION_TYPE_CREATE_IF_MISSING:
                    raise NotFound(f"App '{request.app_name}' not found in environment '{env}'")
                state["apps"][key] = _modal_id("ap")
                engine.save()
            return api_pb2.AppGetOrCreateResponse(app_id=state["apps"][key])

        return await caller.run(ctx, "AppGetOrCreate", None, effect)

    def known_app(app_id: str) -> None:
        if app_id not in state["apps"].values():
            raise NotFound(f"App {app_id!r} not found")

    async def image(
        request: api_pb2.ImageGetOrCreateRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.ImageGetOrCreateResponse:
        def effect(_: CallPlan) -> api_pb2.ImageGetOrCreateResponse:
            known_app(request.app_id)
            for base in request.image.base_images:
                if base.image_id not in state["images"]:
                    raise NotFound(f"Image {base.image_id!r} not found")
            image_id = "im-" + modal_keys.digest(request.image.SerializeToString(deterministic=True))
            state["images"][image_id] = list(request.image.dockerfile_commands)
            engine.save()
            return api_pb2.ImageGetOrCreateResponse(
                image_id=image_id, result=G(status=G.GENERIC_STATUS_SUCCESS)
            )

        return await caller.run(ctx, "ImageGetOrCreate", None, effect)

    async def create(
        request: api_pb2.SandboxCreateRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.SandboxCreateResponse:
        d = request.definition

        def effect(plan: CallPlan) -> api_pb2.SandboxCreateResponse:
            known_app(request.app_id)
            if d.image_id not in state["images"]:
                raise NotFound(f"Image {d.image_id!r} not found")
            if not 0 < d.timeout_secs <= MAX_TIMEOUT_S:
                raise Invalid(f"timeout must be between 1 second and 24 hours, got {d.timeout_secs}s")
            itype = _instance_type(d)
            keys = modal_keys.keys_of(list(d.entrypoint_args))
            expire(engine)  # an expired sandbox's name is free again
            tunnel = any(p.port == 22 and p.unencrypted for p in d.open_ports.ports)
            (m,) = engine.create(
                NAME,
                instance_type=itype,
                region=REGION,
                public_keys=keys,
                name=d.name or None,
                labels={t.tag_name: t.tag_value for t in request.tags},
                stuck=plan.stuck_booting,
                die_after_boot=plan.die_after_boot,
                preempt_after=plan.preempt_after,
                extra={
                    "app_id": request.app_id,
                    "image_id": d.image_id,
                    "timeout_secs": d.timeout_secs,
                    "task_id": _modal_id("ta"),
                    "ssh_tunnel": tunnel,
                },
            )
            return api_pb2.SandboxCreateResponse(
                sandbox_id=m.id, metadata=api_pb2.SandboxHandleMetadata(app_id=request.app_id)
            )

        return await caller.run(ctx, "SandboxCreate", "create", effect)

    async def task_id(
        request: api_pb2.SandboxGetTaskIdRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.SandboxGetTaskIdResponse:
        def effect(_: CallPlan) -> api_pb2.SandboxGetTaskIdResponse:
            m = _sandbox(engine, request.sandbox_id)
            result = _result(m)
            if result is not None:
                return api_pb2.SandboxGetTaskIdResponse(task_result=result)
            return api_pb2.SandboxGetTaskIdResponse(task_id=m.extra["task_id"])

        return await caller.run(ctx, "SandboxGetTaskId", None, effect)

    async def tunnels(
        request: api_pb2.SandboxGetTunnelsRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.SandboxGetTunnelsResponse:
        def effect(_: CallPlan) -> api_pb2.SandboxGetTunnelsResponse:
            m = _sandbox(engine, request.sandbox_id)
            if (result := _result(m)) is not None:
                return api_pb2.SandboxGetTunnelsResponse(result=result)
            if m.status == PENDING or m.host is None or m.ssh_port is None:
                # Not listening yet: the real call holds up to `timeout`; answering at once keeps the
                # simulation from tying up a call (the client reads it as SandboxTimeoutError).
                return api_pb2.SandboxGetTunnelsResponse(result=G(status=G.GENERIC_STATUS_TIMEOUT))
            out = api_pb2.SandboxGetTunnelsResponse(result=G(status=G.GENERIC_STATUS_SUCCESS))
            if m.status == RUNNING and m.extra.get("ssh_tunnel"):
                out.tunnels.append(
                    api_pb2.TunnelData(
                        container_port=22,
                        host=m.host,
                        port=m.ssh_port,
                        unencrypted_host=m.host,
                        unencrypted_port=m.ssh_port,
                    )
                )
            return out

        return await caller.run(ctx, "SandboxGetTunnels", "get", effect)

    async def wait(
        request: api_pb2.SandboxWaitRequest, ctx: grpc.aio.ServicerContext, method: str = "SandboxWait"
    ) -> api_pb2.SandboxWaitResponse:
        def effect(_: CallPlan) -> api_pb2.SandboxWaitResponse:
            m = _sandbox(engine, request.sandbox_id)
            out = api_pb2.SandboxWaitResponse(
                metadata=api_pb2.SandboxHandleMetadata(app_id=m.extra["app_id"])
            )
            if (result := _result(m)) is not None:  # a long poll (timeout > 0) is answered at once too
                out.result.CopyFrom(result)
            return out

        return await caller.run(ctx, method, "get", effect)

    async def list_sandboxes(
        request: api_pb2.SandboxListRequest, ctx: grpc.aio.ServicerContext, method: str = "SandboxList"
    ) -> api_pb2.SandboxListResponse:
        def effect(_: CallPlan) -> api_pb2.SandboxListResponse:
            expire(engine)
            wanted = {t.tag_name: t.tag_value for t in request.tags}
            rows = [
                m
                for m in engine.machines.values()
                if m.facade == NAME
                and (not request.app_id or m.extra.get("app_id") == request.app_id)
                and (request.include_finished or _result(m) is None)
                and (not request.before_timestamp or m.created_at < request.before_timestamp)
                and all(m.labels.get(k) == v for k, v in wanted.items())
            ]
            rows.sort(key=lambda m: m.created_at, reverse=True)
            return api_pb2.SandboxListResponse(sandboxes=[_info(m) for m in rows[:100]])

        return await caller.run(ctx, method, "list", effect)

    async def require_issued_token(ctx: grpc.aio.ServicerContext) -> None:
        """The V2 routes carry the short-lived token AuthTokenGet issued, not the token pair."""
        if not modal_keys.issued(state, metadata_value(ctx, AUTH_TOKEN_KEY)):
            await caller.abort(ctx, Unauthorized("missing or expired x-modal-auth-token"))

    async def wait_v2(
        request: api_pb2.SandboxWaitRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.SandboxWaitResponse:
        # Sandbox.from_id routes ids not of the V1 shape here (with the AuthTokenGet token).
        await require_issued_token(ctx)
        return await wait(request, ctx, "SandboxWaitV2")

    async def list_v2(
        request: api_pb2.SandboxListRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.SandboxListResponse:
        # The client's Sandbox.list (config sandbox_v2, on by default) lists V1 and V2 sandboxes here,
        # carrying the short-lived token AuthTokenGet issued.
        await require_issued_token(ctx)
        return await list_sandboxes(request, ctx, "SandboxListV2")

    async def auth_token(
        request: api_pb2.AuthTokenGetRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.AuthTokenGetResponse:
        return await caller.run(
            ctx, "AuthTokenGet", None, lambda _: api_pb2.AuthTokenGetResponse(token=modal_keys.issue(state))
        )

    async def tags(
        request: api_pb2.SandboxTagsGetRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.SandboxTagsGetResponse:
        def effect(_: CallPlan) -> api_pb2.SandboxTagsGetResponse:
            m = _sandbox(engine, request.sandbox_id)
            return api_pb2.SandboxTagsGetResponse(
                tags=[api_pb2.SandboxTag(tag_name=k, tag_value=v) for k, v in sorted(m.labels.items())]
            )

        return await caller.run(ctx, "SandboxTagsGet", "list", effect)

    async def terminate(
        request: api_pb2.SandboxTerminateRequest, ctx: grpc.aio.ServicerContext
    ) -> api_pb2.SandboxTerminateResponse:
        def effect(_: CallPlan) -> api_pb2.SandboxTerminateResponse:
            m = _sandbox(engine, request.sandbox_id)
            if _result(m) is None:
                engine.terminate(NAME, m.id)
            return api_pb2.SandboxTerminateResponse()

        return await caller.run(ctx, "SandboxTerminate", "terminate", effect)

    methods = {
        "ClientHello": unary(hello, empty_pb2.Empty, api_pb2.ClientHelloResponse),
        "EnvironmentGetOrCreate": unary(
            environment, api_pb2.EnvironmentGetOrCreateRequest, api_pb2.EnvironmentGetOrCreateResponse
        ),
        "AppGetOrCreate": unary(app, api_pb2.AppGetOrCreateRequest, api_pb2.AppGetOrCreateResponse),
        "ImageGetOrCreate": unary(image, api_pb2.ImageGetOrCreateRequest, api_pb2.ImageGetOrCreateResponse),
        "SandboxCreate": unary(create, api_pb2.SandboxCreateRequest, api_pb2.SandboxCreateResponse),
        "SandboxGetTaskId": unary(task_id, api_pb2.SandboxGetTaskIdRequest, api_pb2.SandboxGetTaskIdResponse),
        "SandboxGetTunnels": unary(
            tunnels, api_pb2.SandboxGetTunnelsRequest, api_pb2.SandboxGetTunnelsResponse
        ),
        "SandboxWait": unary(wait, api_pb2.SandboxWaitRequest, api_pb2.SandboxWaitResponse),
        "SandboxList": unary(list_sandboxes, api_pb2.SandboxListRequest, api_pb2.SandboxListResponse),
        "SandboxWaitV2": unary(wait_v2, api_pb2.SandboxWaitRequest, api_pb2.SandboxWaitResponse),
        "SandboxListV2": unary(list_v2, api_pb2.SandboxListRequest, api_pb2.SandboxListResponse),
        "AuthTokenGet": unary(auth_token, api_pb2.AuthTokenGetRequest, api_pb2.AuthTokenGetResponse),
        "SandboxTagsGet": unary(tags, api_pb2.SandboxTagsGetRequest, api_pb2.SandboxTagsGetResponse),
        "SandboxTerminate": unary(
            terminate, api_pb2.SandboxTerminateRequest, api_pb2.SandboxTerminateResponse
        ),
    }
    return [service(SERVICE, methods)]


FACADE = Facade(
    name=NAME,
    prefix="/modal",
    display_name="Modal (simulated)",
    build_router=lambda engine, token: APIRouter(),  # gRPC only
    credentials=lambda token: {"token_id": token_id_for(token), "token_secret": token, "environment": "main"},
    login_user="root",
    regions=(Region(REGION, "anywhere Modal schedules"),),
    instance_types=_types(),
    # Names are optional, at most 64 characters, unique among live sandboxes (Modal: within an app;
    # the simulation checks the account, which is the same for the one app gpuprov uses).
    names=NameRule(
        required=False,
        unique=True,
        max_length=64,
        pattern=r"[A-Za-z0-9._-]+",
        hint="sandbox names are 1-64 characters of letters, digits, '.', '_' and '-'",
    ),
    machine_id=lambda: _modal_id("sb"),
    grpc=build_services,
)

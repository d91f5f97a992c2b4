"""A gRPC facade (tests/fakeclouds/grpc_demo_cloud.py, FAKE_GRPC_DEMO) served on the simulation
server's gRPC port shares the engine, its machines and the /_fake fault rules with the HTTP side:
spoken to with a real grpc.aio client channel on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncssh
import grpc
import httpx
import pytest
from google.protobuf.struct_pb2 import Struct
from google.rpc import error_details_pb2, status_pb2

from fakeclouds import local_api
from fakeclouds.errors import CloudError, LostResponse, RateLimit, ServerFault
from fakeclouds.grpc_errors import RETRY_AFTER_KEY, STATUS_DETAILS_KEY, status_of
from fakeclouds.server import FakeCloudServer
from tests.fakeclouds import grpc_demo_cloud as demo
from tests.fakeclouds.helpers import eventually

NAME = demo.NAME


@pytest.fixture(scope="module")
def server() -> Iterator[FakeCloudServer]:
    # Passed explicitly: the test cloud is in no list of simulated clouds. `local` beside it shows
    # the HTTP facades are mounted as before on the same server.
    with FakeCloudServer(facades=[demo.FAKE_GRPC_DEMO, local_api.FACADE], boot_delay=0.1,
                         terminate_delay=0.02, time_scale=0) as cloud:
        yield cloud


@pytest.fixture
def fresh(server: FakeCloudServer) -> Iterator[FakeCloudServer]:
    server.admin.reset()
    yield server
    server.admin.reset()


class Client:
    """The demo service's four methods over one channel, with a token."""

    def __init__(self, channel: grpc.aio.Channel, token: str | None) -> None:
        self.channel, self.token = channel, token

    async def __call__(self, method: str, fields: dict[str, Any] | None = None, *, token: str | None = None,
                       deadline: float = 30) -> dict[str, Any]:
        """`deadline`: the gRPC deadline (seconds) the call carries to the server."""
        stub = self.channel.unary_unary(f"/{demo.SERVICE}/{method}",
                                        request_serializer=Struct.SerializeToString,
                                        response_deserializer=Struct.FromString)
        bearer = token or self.token
        metadata = (("authorization", f"Bearer {bearer}"),) if bearer else ()
        answer = await stub(demo.struct(fields or {}), metadata=metadata, timeout=deadline)
        return demo.fields_of(answer)


@pytest.fixture
async def rpc(fresh: FakeCloudServer) -> AsyncIterator[Client]:
    assert fresh.grpc_target is not None
    async with grpc.aio.insecure_channel(fresh.grpc_target) as channel:
        yield Client(channel, fresh.tokens[NAME])


def create_fields(pubkey: str, **more: Any) -> dict[str, Any]:
    return {"instance_type": "demo-cpu", "region": "demo-1", "ssh_public_keys": [pubkey], **more}


async def refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


def trailing(err: grpc.aio.AioRpcError) -> dict[str, Any]:
    return dict(err.trailing_metadata() or ())


def rich_status(err: grpc.aio.AioRpcError) -> tuple[str | None, error_details_pb2.RetryInfo | None]:
    """The ErrorInfo reason and the RetryInfo (if any) of the status details."""
    status = status_pb2.Status.FromString(trailing(err)[STATUS_DETAILS_KEY])
    assert status.code == err.code().value[0]
    reason, retry = None, None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
    return reason, retry


async def test_a_machine_made_over_grpc_is_the_engines_and_boots(
        fresh: FakeCloudServer, rpc: Client, ssh_key: asyncssh.SSHKey, pubkey: str) -> None:
    made = await rpc("Create", create_fields(pubkey, name="over-grpc"))
    assert made["status"] == "pending" and made["id"].startswith("demo-")
    seen = await fresh.admin.aio.machine(made["id"])  # the admin API (HTTP) sees the same machine
    assert seen["facade"] == NAME and seen["name"] == "over-grpc"
    assert [m["id"] for m in (await rpc("List"))["machines"]] == [made["id"]]

    async def running() -> dict[str, Any] | None:
        got = await rpc("Get", {"id": made["id"]})
        return got if got["status"] == "running" else None
    up = await eventually(running, "the machine to boot")
    async with asyncssh.connect(up["host"], int(up["ssh_port"]), username=demo.LOGIN_USER,
                                client_keys=[ssh_key], known_hosts=None, agent_path=None,
                                connect_timeout=30) as conn:
        assert (await conn.run("echo booted", check=True)).stdout == "booted\n"

    gone = await rpc("Delete", {"id": made["id"]})
    assert gone["status"] == "terminating"
    await eventually(lambda: fresh.engine.machines[made["id"]].status == "terminated", "the engine to end it")
    err = await refused(rpc("Get", {"id": made["id"]}))
    assert err.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(("op", "method", "kind", "params", "code", "reason"), [
    ("create", "Create", "capacity", {}, grpc.StatusCode.RESOURCE_EXHAUSTED, "NOT_ENOUGH_CAPACITY"),
    ("create", "Create", "quota", {}, grpc.StatusCode.RESOURCE_EXHAUSTED, "QUOTA_EXCEEDED"),
    ("create", "Create", "server_error", {}, grpc.StatusCode.INTERNAL, "SERVER_ERROR"),
    ("list", "List", "server_error", {"status": 503}, grpc.StatusCode.UNAVAILABLE, "SERVER_ERROR"),
    ("list", "List", "rate_limit", {"retry_after": 0.5}, grpc.StatusCode.RESOURCE_EXHAUSTED, "RATE_LIMITED"),
])
async def test_a_fault_added_over_http_fails_the_next_grpc_call_once(
        fresh: FakeCloudServer, rpc: Client, pubkey: str, op: str, method: str, kind: str,
        params: dict[str, Any], code: grpc.StatusCode, reason: str) -> None:
    await fresh.admin.aio.add_fault(NAME, op, kind, **params)
    fields = create_fields(pubkey) if method == "Create" else {}
    err = await refused(rpc(method, fields))
    assert err.code() == code, err.details()
    got_reason, retry = rich_status(err)
    assert got_reason == reason
    if kind == "rate_limit":
        assert trailing(err)[RETRY_AFTER_KEY] == "0.5"
        assert retry is not None and retry.retry_delay.ToMilliseconds() == 500
    else:
        assert retry is None and RETRY_AFTER_KEY not in trailing(err)
    assert await fresh.admin.aio.machines() == []  # a refusal has no effect
    assert await fresh.admin.aio.faults() == []  # the rule was used up by the gRPC call
    await rpc(method, fields)  # so the same call now succeeds
    assert len(await fresh.admin.aio.machines()) == (1 if method == "Create" else 0)


async def test_a_lost_response_took_effect_but_the_client_sees_a_deadline(
        fresh: FakeCloudServer, rpc: Client, pubkey: str) -> None:
    await fresh.admin.aio.add_fault(NAME, "create", "lose_response")
    err = await refused(rpc("Create", create_fields(pubkey, name="lost")))
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert STATUS_DETAILS_KEY not in trailing(err)  # nothing came back from the cloud
    (made,) = await fresh.admin.aio.machines()
    assert made["name"] == "lost" and made["facade"] == NAME
    assert [m["name"] for m in (await rpc("List"))["machines"]] == ["lost"]


async def test_latency_after_the_effect_outlasts_the_clients_deadline(
        fresh: FakeCloudServer, rpc: Client, pubkey: str) -> None:
    await fresh.admin.aio.add_fault(NAME, "create", "latency", seconds=5, when="after")
    err = await refused(rpc("Create", create_fields(pubkey, name="slow"), deadline=1))
    assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    (made,) = await fresh.admin.aio.machines()  # it took effect before the answer was held back
    assert made["name"] == "slow"


async def test_a_machine_that_dies_after_boot_over_grpc(
        fresh: FakeCloudServer, rpc: Client, pubkey: str) -> None:
    await fresh.admin.aio.add_fault(NAME, "create", "die_after_boot")
    made = await rpc("Create", create_fields(pubkey))

    async def died() -> bool:
        return (await rpc("Get", {"id": made["id"]}))["status"] == "error"
    await eventually(died, "the injected death")


async def test_a_wrong_or_missing_token_is_unauthenticated_before_any_fault(
        fresh: FakeCloudServer, rpc: Client, pubkey: str) -> None:
    await fresh.admin.aio.add_fault(NAME, "*", "server_error")
    for call in (rpc("List", token="local-dev-token"), rpc("Get", {"id": "x"}, token="nope"),
                 Client(rpc.channel, None)("Create", create_fields(pubkey))):
        err = await refused(call)
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "token" in (err.details() or "")
    assert len(await fresh.admin.aio.faults()) == 1  # auth is checked before faults


async def test_unknown_machines_and_malformed_requests(
        fresh: FakeCloudServer, rpc: Client, pubkey: str) -> None:
    for method in ("Get", "Delete"):
        err = await refused(rpc(method, {"id": "demo-nosuch"}))
        assert err.code() == grpc.StatusCode.NOT_FOUND and "demo-nosuch" in (err.details() or "")
        assert rich_status(err)[0] == "NOT_FOUND"
    await fresh.admin.aio.add_fault(NAME, "create", "server_error")
    err = await refused(rpc("Create", {"instance_type": "demo-cpu", "ssh_public_keys": [pubkey]}))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "region" in (err.details() or "")
    err = await refused(rpc("Create", create_fields(pubkey, region="mars-1")))  # the engine refuses it
    assert err.code() == grpc.StatusCode.INTERNAL  # ... after the fault, which a well-formed call draws
    assert await fresh.admin.aio.faults() == []
    err = await refused(rpc("Create", create_fields(pubkey, region="mars-1")))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "mars-1" in (err.details() or "")


async def test_the_http_side_is_served_beside_it(fresh: FakeCloudServer) -> None:
    async with httpx.AsyncClient(base_url=fresh.url) as http:
        r = await http.get("/_fake/grpc")
        assert r.status_code == 200
        assert r.json() == {"target": fresh.grpc_target, "tls_target": fresh.grpc_tls_target,
                            "services": [demo.SERVICE]}
        r = await http.get("/local/v1/account", headers={"Authorization": f"Bearer {fresh.tokens['local']}"})
        assert r.status_code == 200 and r.json()["id"] == "local"
    assert fresh.grpc_target == f"127.0.0.1:{fresh.grpc_port}" and fresh.grpc_port != fresh.port


def test_a_server_without_grpc_facades_has_no_grpc_listener() -> None:
    with FakeCloudServer(facades=[local_api.FACADE]) as cloud:
        assert cloud.grpc_port is None and cloud.grpc_target is None
        assert httpx.get(f"{cloud.url}/_fake/grpc").status_code == 404


@pytest.mark.parametrize(("exc", "code"), [
    (ServerFault("boom", 500), grpc.StatusCode.INTERNAL),
    (ServerFault("boom", 502), grpc.StatusCode.UNAVAILABLE),
    (LostResponse("lost"), grpc.StatusCode.DEADLINE_EXCEEDED),
    (RateLimit("slow down", 2), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (CloudError("a refusal the table does not name"), grpc.StatusCode.UNKNOWN),
])
def test_status_table(exc: CloudError, code: grpc.StatusCode) -> None:
    status = status_of(exc)
    assert status.code == code and status.message == exc.message
    keys = [k for k, _ in status.trailing_metadata]
    assert keys == ([] if isinstance(exc, LostResponse)
                    else [RETRY_AFTER_KEY, STATUS_DETAILS_KEY] if isinstance(exc, RateLimit)
                    else [STATUS_DETAILS_KEY])

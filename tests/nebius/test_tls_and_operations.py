"""The Nebius adapter and its simulation over TLS, with operations that are polled.

TLS: the simulation serves Nebius on the gRPC listener's TLS port with a certificate of its own CA; a
client that does not trust that CA, or that talks plain text, is refused, and the adapter hands the
SDK the connection's CA (and, with no endpoint, leaves the SDK its own endpoints and TLS).

Operations: Create and Delete answer an operation still running; the adapter polls it
(`OperationService/Get`) until it finishes, so a create returns once the instance runs and a
terminate once it is gone; a placement that fails ends the operation in RESOURCE_EXHAUSTED, which the
adapter reports as CapacityError (nothing left behind); an operation that never finishes holds the
adapter only for its bound."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import grpc
import pytest

from fakeclouds import connect, nebius_api
from fakeclouds import tls as fake_tls
from fakeclouds.server import FakeCloudServer
from providers import nebius, nebius_wire
from providers.base import (
    CapacityError,
    ConnectionOptions,
    InvalidRequest,
    LaunchSpec,
    OfferQuery,
    Ownership,
    QuotaError,
)
from providers.nebius import NebiusProvider

KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
OP_GET = "nebius.common.v1.OperationService/Get"


def credentials(server: FakeCloudServer) -> Any:
    return NebiusProvider.parse_credentials(nebius_api.FACADE.credentials(server.tokens["nebius"]))


@pytest.fixture
async def provider(server: FakeCloudServer) -> AsyncIterator[NebiusProvider]:
    server.admin.reset()
    options = connect.options(server, "nebius")
    p = NebiusProvider(credentials(server), installation_id="abcd1234", options=options)
    async with p:
        yield p


def spec(key: str) -> LaunchSpec:
    owner = Ownership(installation_id="abcd1234", allocation_id=key)
    return LaunchSpec(key=key, owner=owner, ssh_public_keys=[KEY])


async def running(p: NebiusProvider, ref: Any) -> None:
    """Poll `get` until the instance runs (the boot delay is the simulation's, 0.2 s)."""
    for _ in range(200):
        st = await p.get(ref)
        if st is not None and st.state == "running":
            return
        await asyncio.sleep(0.05)
    raise AssertionError("never running")


def operations(server: FakeCloudServer, resource_id: str | None = None) -> list[dict[str, Any]]:
    ops = server.engine.facade_state.get("nebius", {}).get("operations", {}).values()
    return [op for op in ops if resource_id is None or op["resource_id"] == resource_id]


# --------------------------------------------------------------------------- TLS


def test_the_simulation_points_nebius_at_the_tls_port_with_its_ca(server: FakeCloudServer) -> None:
    options = connect.options(server, "nebius")
    assert options.endpoint == f"https://{server.grpc_tls_target}"
    assert server.grpc_tls_target != server.grpc_target  # the plain port stays Modal's
    assert options.ca_bundle and options.ca_bundle == server.ca_pem


@pytest.mark.parametrize("client", ["plain-text", "tls-without-the-ca"])
async def test_a_client_that_does_not_trust_the_ca_is_refused(server: FakeCloudServer, client: str) -> None:
    from nebius.api.nebius.iam import v1 as iam

    target = str(server.grpc_tls_target)
    channel = (
        grpc.aio.insecure_channel(target)
        if client == "plain-text"
        else grpc.aio.secure_channel(target, grpc.ssl_channel_credentials())  # the system roots only
    )
    async with channel:
        call = channel.unary_unary(
            "/nebius.iam.v1.ProfileService/Get",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=iam.GetProfileResponse.FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(iam.GetProfileRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE  # no handshake: no call reached a handler


@pytest.mark.parametrize("ca", ["none", "another-ca"])
async def test_an_endpoint_whose_certificate_the_connection_does_not_trust_is_named_before_any_call(
    server: FakeCloudServer, ca: str, tmp_path: Path
) -> None:
    # Before the check, gRPC retried the failed handshake until the call's deadline: "call timed out"
    # (a Transient) after ten seconds, naming no certificate.
    other_ca = fake_tls.ensure(tmp_path).ca_pem if ca == "another-ca" else None
    options = ConnectionOptions(endpoint=f"https://{server.grpc_tls_target}", ca_bundle=other_ca)
    calls_before = nebius_calls(server)
    async with NebiusProvider(credentials(server), installation_id="abcd1234", options=options) as p:
        with pytest.raises(InvalidRequest) as caught:
            await p.verify()
    message = caught.value.message
    assert f"{server.grpc_tls_target} presents a TLS certificate the connection does not trust" in message
    assert "certificate verify failed" in message or "unable to get local issuer" in message
    assert nebius_calls(server) == calls_before  # no token exchange, no call reached the simulation


def nebius_calls(server: FakeCloudServer) -> int:
    return sum(server.engine.calls.counts_json().get("nebius", {}).values())


async def test_the_certificate_check_leaves_an_unreachable_endpoint_to_the_calls(
    server: FakeCloudServer,
) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now: refused, which the calls report (a Transient) as before
    await nebius_wire.check_endpoint_certificate("nebius", f"https://127.0.0.1:{port}", server.ca_pem)


async def test_with_the_simulations_own_ca_the_check_passes_and_the_calls_go_out(
    server: FakeCloudServer,
) -> None:
    options = connect.options(server, "nebius")
    calls_before = nebius_calls(server)
    async with NebiusProvider(credentials(server), installation_id="abcd1234", options=options) as p:
        assert "service account" in await p.verify()
    assert nebius_calls(server) > calls_before  # what the refused case's "no call" is counted by


async def test_a_plain_text_endpoint_is_refused_before_any_call(server: FakeCloudServer) -> None:
    options = ConnectionOptions(endpoint=f"http://{server.grpc_target}")
    async with NebiusProvider(credentials(server), installation_id="abcd1234", options=options) as p:
        with pytest.raises(InvalidRequest) as caught:
            await p.verify()
    assert "https" in caught.value.message


class FakeSdk:
    """Stands in for `nebius.sdk.SDK`: keeps what the adapter built it with."""

    made: list[dict[str, Any]] = []

    def __init__(self, **kwargs: Any) -> None:
        FakeSdk.made.append(kwargs)


def test_the_sdk_gets_the_connections_ca_and_no_endpoint_means_its_own(
    server: FakeCloudServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nebius.sdk

    roots: list[bytes] = []
    real = grpc.ssl_channel_credentials

    def recording(root_certificates: bytes | None = None, *args: Any) -> Any:
        roots.append(root_certificates or b"")
        return real(root_certificates, *args)

    monkeypatch.setattr(grpc, "ssl_channel_credentials", recording)
    monkeypatch.setattr(nebius.sdk, "SDK", FakeSdk)
    FakeSdk.made = []
    creds = credentials(server)
    common = {
        "service_account_id": creds.service_account_id,
        "public_key_id": creds.public_key_id,
        "private_key_pem": creds.private_key.get_secret_value(),
        "provider": "nebius",
    }
    nebius_wire.build_sdk(endpoint=f"https://{server.grpc_tls_target}", ca_bundle=server.ca_pem, **common)
    nebius_wire.build_sdk(endpoint=None, ca_bundle=None, **common)
    simulated, real_account = FakeSdk.made
    assert simulated["tls_credentials"] is not None and str(server.ca_pem).encode() in roots[0]
    assert "address_options" not in simulated  # nothing marks the address insecure
    # A real account: the SDK's own resolution of Nebius's public endpoints, and its own TLS.
    assert "resolver" not in real_account and "tls_credentials" not in real_account
    assert len(roots) == 1


# --------------------------------------------------------------------------- operations


@pytest.fixture
async def fresh(tmp_path: Any) -> AsyncIterator[tuple[FakeCloudServer, NebiusProvider]]:
    """A server of its own: the calls it saw are this test's alone."""
    async with FakeCloudServer(
        facades=[nebius_api.FACADE], boot_delay=0.2, terminate_delay=0.02, time_scale=0, state_dir=tmp_path
    ) as srv:
        options = connect.options(srv, "nebius")
        async with NebiusProvider(credentials(srv), installation_id="abcd1234", options=options) as p:
            yield srv, p  # type: ignore[misc]


async def operation(p: NebiusProvider, op_id: str) -> Any:
    """The operation as `OperationService/Get` answers it now (the SDK's Operation wrapper)."""
    from nebius.api.nebius.common.v1 import GetOperationRequest, OperationServiceClient

    return await OperationServiceClient(await p._sdk()).get(GetOperationRequest(id=op_id), timeout=10)


async def test_create_polls_its_operation_which_finishes_when_the_instance_runs(
    fresh: tuple[FakeCloudServer, NebiusProvider],
) -> None:
    server, provider = fresh
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    assert OP_GET not in nebius_api.calls_seen(server.engine)
    # Returned once placed (the contract's create returns while pending): the boot is get's to follow.
    # Shown on an instance held booting (a 0.2 s boot can be over by the time the
    # create's polls are done on a busy box), deleted before the one that boots.
    await server.admin.aio.configure(hold_boots=True)
    try:
        slow = await provider.create(offer, spec("op-0"))
        assert OP_GET in nebius_api.calls_seen(server.engine)  # the create asked how its operation went
        assert server.engine.machines[slow.instance_id].status == "pending"
        await provider.terminate(slow)
    finally:  # the module's server: its other tests boot on their own
        await server.admin.aio.configure(hold_boots=False)
    ref = await provider.create(offer, spec("op-1"))
    (created,) = operations(server, ref.instance_id)
    await running(provider, ref)
    answer = await operation(provider, created["id"])
    assert answer.resource_id == ref.instance_id
    assert answer.done() and answer.successful() and answer.finished_at is not None


async def test_terminate_waits_for_its_operation(fresh: tuple[FakeCloudServer, NebiusProvider]) -> None:
    server, provider = fresh
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    ref = await provider.create(offer, spec("del-1"))
    await provider.terminate(ref)
    # Returned once the operation finished, which it does when the instance is gone.
    assert server.engine.machines[ref.instance_id].status == "terminated"
    (deleted,) = [op for op in operations(server, ref.instance_id) if op["kind"] == "delete"]
    assert deleted["finished_at"] is not None
    assert (await provider.get(ref)) is None


async def test_an_operation_that_never_finishes_holds_create_only_for_its_bound(
    server: FakeCloudServer, provider: NebiusProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nebius, "CREATE_WAIT_S", 0.5)
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    server.admin.add_fault("nebius", "create", "stuck_booting")  # the instance never runs
    ref = await provider.create(offer, spec("stuck-1"))
    (created,) = operations(server, ref.instance_id)
    answer = await operation(provider, created["id"])
    assert not answer.done() and answer.status() is None  # running: the instance tells the rest
    status = await provider.get(ref)
    assert status is not None and status.state == "pending"


@pytest.mark.parametrize("how", ["injected", "out-of-stock"])
async def test_a_placement_that_fails_in_the_operation_is_capacity(
    server: FakeCloudServer, provider: NebiusProvider, how: str
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    if how == "injected":
        server.admin.add_fault("nebius", "create", "capacity")
    else:
        server.admin.set_stock(offer.instance_type, offer.region, 0, facade="nebius")
    with pytest.raises(CapacityError) as caught:
        await provider.create(offer, spec("full-1"))
    assert "RESOURCE_EXHAUSTED" in caught.value.message
    assert caught.value.scope is not None and caught.value.scope.region == offer.region
    # The Create was answered (an operation), and the refusal came from polling it.
    (refused,) = operations(server)
    assert refused["refusal"] is not None and refused["finished_at"] is not None
    assert await provider.find_all("full-1") == []  # nothing holds the name for the next offer
    server.admin.reset()
    # Placed once there is room, a new attempt, and returned while pending: on an instance held
    # booting (the module's 0.2 s boot can be over when the create returns on a busy box).
    server.admin.configure(hold_boots=True)
    try:
        ref = await provider.create(offer, spec("full-1"))
        assert server.engine.machines[ref.instance_id].status == "pending"
        await provider.terminate(ref)
    finally:
        server.admin.configure(hold_boots=False)


async def test_quota_is_still_refused_by_the_create_call(
    server: FakeCloudServer, provider: NebiusProvider
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    server.admin.add_fault("nebius", "create", "quota")
    with pytest.raises(QuotaError):
        await provider.create(offer, spec("quota-1"))
    assert operations(server) == []  # refused by the call: no operation began

"""The Modal adapter on the official client against the simulated Modal (fakeclouds/modal_api.py):
refusals, SSH with exactly the keys sent, the sandbox timeout, no global config, and the RPCs used."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator

import asyncssh
import pytest

from fakeclouds import modal_api
from fakeclouds.server import FakeCloudServer
from messages.allocation import AllocateRequest
from providers.base import (
    AuthError,
    CloudProvider,
    InstanceState,
    LaunchSpec,
    OfferQuery,
    Ownership,
    Unsupported,
)
from providers.modal_ import TIMEOUT_DETAIL, ModalProvider
from tests import simclouds
from tests.eventually import eventually

USER_KEY = asyncssh.generate_private_key("ssh-ed25519")
OTHER_KEY = asyncssh.generate_private_key("ssh-ed25519")

# Every RPC the adapter's whole life (verify, offers, create, get, list, terminate) makes. Modal's
# gRPC API is internal and changes each release: an upgrade of `modal` that calls anything else (or
# stops calling one of these) fails here, and the simulation must follow before the pin moves.
EXPECTED_RPCS = {
    "ClientHello",
    "AppGetOrCreate",
    "EnvironmentGetOrCreate",
    "ImageGetOrCreate",
    "SandboxCreate",
    "SandboxGetTaskId",
    "SandboxGetTunnels",
    "SandboxWait",
    "SandboxTerminate",
    "AuthTokenGet",
    "SandboxListV2",
    "SandboxTagsGet",
}


def public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


@pytest.fixture(scope="module")
def sim() -> Iterator[FakeCloudServer]:
    # The modal library caches each environment it looked up for the whole process, by name only:
    # another module's Modal calls in this test process (the acceptance tier's) would leave this
    # simulation never asked, and the pinned RPC set below one short.
    from modal import _environments

    _environments.ENVIRONMENT_CACHE.clear()
    with FakeCloudServer(boot_delay=0.2, terminate_delay=0.05, facades=[modal_api.FACADE]) as server:
        yield server


def provider(
    sim: FakeCloudServer, token: str | None = None, installation: str | None = None
) -> ModalProvider:
    p = simclouds.provider(sim, "modal", installation_id=installation or uuid.uuid4().hex[:8], token=token)
    assert isinstance(p, ModalProvider)
    return p


def spec(p: CloudProvider, *keys: asyncssh.SSHKey, lifetime_s: int | None = None) -> LaunchSpec:
    key = f"t-{uuid.uuid4().hex[:10]}"
    return LaunchSpec(
        key=key,
        owner=Ownership(installation_id=p.installation_id, allocation_id=key),
        ssh_public_keys=[public(k) for k in keys],
        lifetime_s=lifetime_s,
    )


def allocation_lifetime_s(max_hours: float) -> int | None:
    """The lifetime an allocation asking for `max_hours` hands the create (the workflow's CreateInput)."""
    return AllocateRequest(
        allocation_id="al-1", connection_id="c-1", cloud="modal", ssh_public_keys=["k"], max_hours=max_hours
    ).lifetime_s()


async def running(p: CloudProvider, ref):  # type: ignore[no-untyped-def]
    return await eventually(
        lambda: p.get(ref),
        until=lambda s: s is not None and s.state == "running",
        within=10,
        what="sandbox running",
    )


async def test_a_wrong_token_secret_is_refused_with_modals_reason(sim: FakeCloudServer) -> None:
    async with provider(sim, token="not-the-secret") as bad:
        with pytest.raises(AuthError, match="Token ID or secret is invalid"):
            await bad.verify()
    # The id is right, only the secret is wrong: still refused.
    good = simclouds.credentials(sim, "modal")
    creds = ModalProvider.parse_credentials({**good, "token_secret": "as-wrong"})
    async with ModalProvider(creds, options=simclouds.options(sim, "modal"), installation_id="abcd1234") as p:
        with pytest.raises(AuthError):
            await p.offers(OfferQuery())


async def test_sshd_accepts_exactly_the_keys_sent(sim: FakeCloudServer) -> None:
    async with provider(sim) as p:
        offer = (await p.offers(OfferQuery(gpu="h100", gpu_count=2)))[0]
        assert offer.instance_type == "H100:2"
        ref = await p.create(offer, spec(p, USER_KEY))
        try:
            st = await running(p, ref)
            assert st is not None and st.ssh_user == "root"
            async with asyncssh.connect(
                st.host, st.ssh_port, username="root", client_keys=[USER_KEY], known_hosts=None
            ) as conn:
                out = await conn.run("nvidia-smi --query-gpu=name --format=csv,noheader", check=True)
                assert str(out.stdout).count("H100") == 2
            with pytest.raises(asyncssh.PermissionDenied):
                await asyncssh.connect(
                    st.host, st.ssh_port, username="root", client_keys=[OTHER_KEY], known_hosts=None
                )
        finally:
            await p.terminate(ref)
        await eventually(
            lambda: p.get(ref),
            until=lambda s: s is None or s.state == "terminated",
            within=10,
            what="sandbox gone",
        )
        assert await p.list_owned() == []


async def test_a_sandbox_for_an_allocation_with_max_hours_times_out_then(sim: FakeCloudServer) -> None:
    async with provider(sim) as p:
        offer = (await p.offers(OfferQuery(gpu="t4")))[0]
        ref = await p.create(offer, spec(p, USER_KEY, lifetime_s=allocation_lifetime_s(2)))
        try:
            assert sim.engine.machines[ref.instance_id].extra["timeout_secs"] == 7200
        finally:
            await p.terminate(ref)


async def test_more_than_24_hours_is_refused_before_modal_is_asked(sim: FakeCloudServer) -> None:
    async with provider(sim) as p:
        offer = (await p.offers(OfferQuery(gpu="t4")))[0]
        before = set(sim.engine.machines)
        with pytest.raises(Unsupported, match="Modal caps a sandbox's lifetime .* at 24 h"):
            await p.create(offer, spec(p, USER_KEY, lifetime_s=allocation_lifetime_s(25)))
        assert set(sim.engine.machines) == before


async def test_an_expired_sandbox_is_reported_gone_with_the_reason(sim: FakeCloudServer) -> None:
    # A short lifetime (a minute): the simulation's clock is moved, nothing waits for it.
    async with provider(sim) as p:
        ref = await p.create((await p.offers(OfferQuery(gpu="t4")))[0], spec(p, USER_KEY, lifetime_s=60))
        await running(p, ref)
        machine = sim.engine.machines[ref.instance_id]
        assert machine.extra["timeout_secs"] == 60
        sim.call(_expire_at(sim, machine.created_at + 59))
        st = await p.get(ref)
        assert st is not None and st.state == InstanceState.RUNNING  # not yet
        sim.call(_expire_at(sim, machine.created_at + 60))
        st = await p.get(ref)
        assert st is not None and st.state == InstanceState.TERMINATED and st.detail == TIMEOUT_DETAIL
        assert await p.find_all(ref.key) == []
        await p.terminate(ref)  # already gone: success


async def _expire_at(sim: FakeCloudServer, when: float) -> None:
    """The simulation's clock reaches `when` (on the server's loop, where the engine lives)."""
    modal_api.expire(sim.engine, when)


async def test_the_adapter_sets_the_24h_cap_and_makes_only_the_pinned_rpcs(sim: FakeCloudServer) -> None:
    # The simulation records every RPC the module's tests made (the client caches some answers per
    # process, e.g. the environment): this test runs last of them, after the whole life.
    async with provider(sim) as p:
        await p.verify()
        ref = await p.create((await p.offers(OfferQuery()))[0], spec(p, USER_KEY))
        assert sim.engine.machines[ref.instance_id].extra["timeout_secs"] == 24 * 3600
        await running(p, ref)
        assert [r.instance_id for r in await p.list_owned()] == [ref.instance_id]
        await p.terminate(ref)
        await eventually(
            lambda: p.get(ref),
            until=lambda s: s is None or s.state == "terminated",
            within=10,
            what="sandbox gone",
        )
    assert set(sim.engine.facade_state["modal"]["rpcs"]) == EXPECTED_RPCS


def test_no_modal_config_is_read_for_the_connection_nor_written(sim: FakeCloudServer, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A poisoned ~/.modal.toml and MODAL_* environment change nothing: the server URL and tokens are
    the connection's; the home file is left as it was and no other appears."""
    home = tmp_path / "home"
    home.mkdir()
    toml = home / ".modal.toml"
    poisoned = '[default]\nserver_url = "http://127.0.0.1:9"\ntoken_id = "ak-x"\ntoken_secret = "as-x"\n'
    toml.write_text(poisoned)
    creds = simclouds.credentials(sim, "modal")
    code = textwrap.dedent(f"""
        import asyncio
        from providers.modal_ import ModalProvider
        from providers.base import ConnectionOptions
        async def main():
            creds = ModalProvider.parse_credentials({creds!r})
            options = ConnectionOptions(endpoint={simclouds.endpoint(sim, "modal")!r})
            async with ModalProvider(creds, options=options, installation_id="abcd1234") as p:
                print(await p.verify())
        asyncio.run(main())
    """)
    env = {
        **os.environ,
        "HOME": str(home),
        "MODAL_SERVER_URL": "http://127.0.0.1:9",
        "MODAL_TOKEN_ID": "ak-env",
        "MODAL_TOKEN_SECRET": "as-env",
    }
    started = time.time()
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=os.getcwd()
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Modal token" in out.stdout
    assert toml.read_text() == poisoned and sorted(p.name for p in home.iterdir()) == [".modal.toml"]
    assert toml.stat().st_mtime <= started

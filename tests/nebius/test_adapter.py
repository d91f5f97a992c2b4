"""The Nebius adapter against its simulation: a create retried after a lost answer is one instance,
spot launches preemptible, the SSH key reaches the VM only through cloud-init, and the remote calls
the adapter makes are pinned (an SDK upgrade that changes them fails here, loudly), none of them one
the SDK says is deprecated."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncssh
import pytest

import providers
from fakeclouds import connect, nebius_api
from fakeclouds.server import FakeCloudServer
from providers.base import LaunchSpec, OfferQuery, Ownership
from providers.nebius import NebiusProvider

# Every remote call a full lifecycle makes (verify, offers, create, get, list, terminate). Changing
# this list is a decision: the adapter (or the SDK under it) now calls Nebius differently.
PINNED_CALLS = {
    "nebius.iam.v1.TokenExchangeService/Exchange",
    "nebius.iam.v1.ProfileService/Get",
    "nebius.iam.v2.ProjectService/Get",
    "nebius.iam.v2.ProjectService/List",
    "nebius.compute.v1.PlatformService/List",
    "nebius.billing.v1alpha1.CalculatorService/Estimate",
    "nebius.vpc.v1.SubnetService/List",
    "nebius.compute.v1.ImageService/GetLatestByFamily",
    "nebius.compute.v1.InstanceService/GetByName",
    "nebius.compute.v1.InstanceService/Create",
    "nebius.compute.v1.InstanceService/Get",
    "nebius.compute.v1.InstanceService/List",
    "nebius.compute.v1.InstanceService/Delete",
    "nebius.common.v1.OperationService/Get",  # Create's and Delete's operations, polled until done
}
KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


def new_provider(server: FakeCloudServer, installation_id: str = "abcd1234") -> NebiusProvider:
    """An adapter on the simulation's service account: it reads the tenant's projects on first use."""
    creds = NebiusProvider.parse_credentials(nebius_api.FACADE.credentials(server.tokens["nebius"]))
    return NebiusProvider(creds, installation_id=installation_id, options=connect.options(server, "nebius"))


@pytest.fixture
async def provider(server: FakeCloudServer) -> AsyncIterator[NebiusProvider]:
    server.admin.reset()
    p = new_provider(server)
    async with p:
        yield p


def spec(key: str, **extra: object) -> LaunchSpec:
    return LaunchSpec(
        key=key,
        owner=Ownership(installation_id="abcd1234", allocation_id=key),
        ssh_public_keys=[KEY],
        **extra,
    )  # type: ignore[arg-type]


async def running(p: NebiusProvider, ref: object) -> object:
    for _ in range(100):
        st = await p.get(ref)  # type: ignore[arg-type]
        if st is not None and st.state == "running":
            return st
        await asyncio.sleep(0.05)
    raise AssertionError("never running")


@pytest.fixture
def sdk_deprecations(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], list[str]]:
    """What the SDK has said is deprecated since the test began, as it says it: a warning on its
    "deprecation" logger naming the service, method or field and the date support ends, attributed
    to the first caller outside the SDK ("path:line: message"). The SDK says each once per process:
    its record of what it has said starts empty here, whatever ran before in this process."""
    from nebius.base.protos import direct

    monkeypatch.setattr(direct, "_DEPRECATION_SEEN", set())
    caplog.set_level(logging.WARNING, logger="deprecation")

    def said() -> list[str]:
        records = [r for r in caplog.records if r.name == "deprecation"]
        return [f"{r.pathname}:{r.lineno}: {r.getMessage()}" for r in records]

    return said


async def test_lifecycle_pins_the_remote_calls_and_uses_nothing_the_sdk_deprecates(
    server: FakeCloudServer, provider: NebiusProvider, sdk_deprecations: Callable[[], list[str]]
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    ref = await provider.create(offer, spec("pin-1", k3s=True))
    await running(provider, ref)
    assert [r.instance_id for r in await provider.list_owned()] == [ref.instance_id]
    await provider.terminate(ref)
    assert nebius_api.calls_seen(server.engine) == PINNED_CALLS
    # The SDK ships each service's, method's and field's deprecation (with the last supported day)
    # as the protos declare it: an upgrade that deprecates something the adapter uses fails here.
    adapter = str(Path(providers.__file__).parent)
    assert [line for line in sdk_deprecations() if line.startswith(adapter)] == []


async def test_lost_create_answer_is_one_instance(server: FakeCloudServer, provider: NebiusProvider) -> None:
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=False)))[0]
    server.admin.add_fault("nebius", "create", "lose_response")
    with pytest.raises(Exception):  # noqa: B017 — a Transient, in doubt
        await provider.create(offer, spec("lost-1"))
    ref = await provider.create(offer, spec("lost-1"))
    assert [r.instance_id for r in await provider.find_all("lost-1")] == [ref.instance_id]


async def test_spot_is_preemptible_and_the_key_goes_by_cloud_init(
    server: FakeCloudServer, provider: NebiusProvider
) -> None:
    offer = (await provider.offers(OfferQuery(gpu="H100", spot=True)))[0]
    on_demand = (await provider.offers(OfferQuery(gpu="H100", spot=False, region=offer.region)))[0]
    assert offer.price_per_hour < on_demand.price_per_hour  # the calculator's preemptible price
    ref = await provider.create(offer, spec("spot-1"))
    machine = server.engine.machines[ref.instance_id]
    assert machine.spot
    assert machine.user_data and KEY in machine.user_data and machine.user_data.count("#cloud-config")
    st = await running(provider, ref)
    assert st.host and "/" not in st.host and st.ssh_user == "ubuntu"  # type: ignore[attr-defined]

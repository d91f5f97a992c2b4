"""The Azure adapter against its simulation, and the simulation through Azure's own SDKs
(azure-identity + azure-mgmt-*), pointed at the simulation's TLS listener."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from fakeclouds import clouds
from fakeclouds.azure_arm import CLIENT_ID, SUBSCRIPTION, TENANT
from fakeclouds.server import FakeCloudServer
from providers.azure import AzureProvider
from providers.azure_vm import group_name, vm_name
from providers.base import LaunchSpec, Offer, OfferQuery, Ownership
from tests import simclouds

CLOUD = AzureProvider.id
USER_KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


@pytest.fixture(scope="module")
def sim() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(boot_delay=0.3, terminate_delay=0.05) as server:
        yield server


@pytest.fixture(autouse=True)
def clean(sim: FakeCloudServer) -> Iterator[None]:
    sim.admin.clear_faults()
    yield
    sim.admin.reset()


@dataclass
class Sdk:
    """Azure's own SDK clients on the simulated subscription."""

    compute: Any
    network: Any
    resource: Any
    credential: Any

    def close(self) -> None:
        for c in (self.compute, self.network, self.resource, self.credential):
            c.close()


def sdk_for(sim: FakeCloudServer, ca_file: Path, secret: str | None = None, **kwargs: Any) -> Sdk:
    from azure.identity import ClientSecretCredential
    from azure.mgmt.compute import ComputeManagementClient
    from azure.mgmt.network import NetworkManagementClient
    from azure.mgmt.resource.resources import ResourceManagementClient

    base = simclouds.endpoint(sim, CLOUD)
    credential = ClientSecretCredential(
        TENANT,
        CLIENT_ID,
        secret or sim.tokens[CLOUD],
        authority=f"{base}/login",
        disable_instance_discovery=True,
        connection_verify=str(ca_file),
        retry_total=0,
    )
    common = {
        "base_url": f"{base}/arm",
        "connection_verify": str(ca_file),
        "retry_total": 0,
        "polling_interval": 0.05,
        **kwargs,
    }
    return Sdk(
        ComputeManagementClient(credential, SUBSCRIPTION, **common),
        NetworkManagementClient(credential, SUBSCRIPTION, **common),
        ResourceManagementClient(credential, SUBSCRIPTION, **common),
        credential,
    )


@pytest.fixture(scope="module")
def ca_file(sim: FakeCloudServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("azure-ca") / "ca.pem"
    path.write_text(sim.ca_pem or "")
    return path


@pytest.fixture(scope="module")
def sdk(sim: FakeCloudServer, ca_file: Path) -> Iterator[Sdk]:
    clients = sdk_for(sim, ca_file)
    yield clients
    clients.close()


@pytest.fixture
def installation() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
async def provider(sim: FakeCloudServer, installation: str) -> AsyncIterator[AzureProvider]:
    p = simclouds.provider(sim, CLOUD, installation_id=installation)
    assert isinstance(p, AzureProvider)
    async with p:
        yield p


def spec(installation: str, key: str | None = None, **extra: Any) -> LaunchSpec:
    key = key or f"az-{uuid.uuid4().hex[:10]}"
    return LaunchSpec(
        key=key,
        owner=Ownership(installation_id=installation, allocation_id=key),
        ssh_public_keys=[USER_KEY],
        **extra,
    )


async def cheapest(p: AzureProvider, **query: Any) -> Offer:
    offers = await p.offers(OfferQuery(spot=False, **query))
    assert offers
    return offers[0]


def names(installation: str, key: str, region: str) -> tuple[str, str]:
    """(resource group, VM name) of a key."""
    return group_name(installation, region), vm_name(installation, key)


def ours(items: Any, installation: str) -> list[dict[str, Any]]:
    """Resources of an SDK listing that carry our installation's tag."""
    return [i.as_dict() for i in items if (i.tags or {}).get("gpuprov-installation") == installation]


def facade_name() -> str:
    return clouds.facade(CLOUD).name

"""The simulated AWS for tests/aws: one server per session (AWS only), the adapter pointed at it,
and boto3 clients that look at the simulated account as a user would."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncssh
import pytest

from fakeclouds import aws_api
from fakeclouds.server import FakeCloudServer
from providers.aws import AwsProvider
from providers.base import ConnectionOptions, LaunchSpec, Offer, OfferQuery, Ownership
from tests import simclouds

REGION = "us-east-1"
USER_KEY = asyncssh.generate_private_key("ssh-ed25519")


@pytest.fixture(scope="session")
def aws_sim() -> Iterator[FakeCloudServer]:
    with FakeCloudServer(boot_delay=0.3, terminate_delay=0.05, facades=[aws_api.FACADE]) as server:
        for region in ("us-east-1", "us-east-2", "us-west-2"):  # moto's first call per region is slow
            boto(server, region=region).describe_instance_types(InstanceTypes=["g4dn.xlarge"])
        yield server


@pytest.fixture
def sim(aws_sim: FakeCloudServer) -> Iterator[FakeCloudServer]:
    """The session's simulated AWS, with no faults and default timing, stock and consistency."""
    aws_sim.admin.reset()
    state = aws_api.sim_of(aws_sim.engine)
    yield aws_sim
    aws_sim.admin.reset()
    state.listing_delay, state.terminated_visible_s = 0.0, 3600.0


def adapter(server: FakeCloudServer, cls: type[AwsProvider] = AwsProvider,
            installation_id: str | None = None) -> AwsProvider:
    creds = cls.parse_credentials(simclouds.credentials(server, "aws"))
    return cls(creds, options=ConnectionOptions(endpoint=simclouds.endpoint(server, "aws")),
               installation_id=installation_id or uuid.uuid4().hex[:8])


@pytest.fixture
async def aws(sim: FakeCloudServer) -> AsyncIterator[AwsProvider]:
    async with adapter(sim) as p:
        yield p


def boto(server: FakeCloudServer, service: str = "ec2", region: str = REGION, **config: Any) -> Any:
    """A plain boto3 client on the simulated account (default retries unless `config` says)."""
    import boto3
    from botocore.config import Config

    creds = simclouds.credentials(server, "aws")
    return boto3.client(service, region_name=region, endpoint_url=simclouds.endpoint(server, "aws"),
                        aws_access_key_id=creds["access_key_id"],
                        aws_secret_access_key=creds["secret_access_key"], config=Config(**config))


@pytest.fixture
def ec2(sim: FakeCloudServer) -> Any:
    return boto(sim)


def spec(p: AwsProvider, key: str | None = None, **extra: Any) -> LaunchSpec:
    key = key or f"t-{uuid.uuid4().hex[:10]}"
    return LaunchSpec(key=key, owner=Ownership(installation_id=p.installation_id, allocation_id=key),
                      ssh_public_keys=[USER_KEY.export_public_key().decode().strip()], **extra)


async def offer(p: AwsProvider, instance_type: str = "g4dn.xlarge", zone: str = "us-east-1a",
                spot: bool = False) -> Offer:
    found = [o for o in await p.offers(OfferQuery(region=zone[:-1], spot=spot))
             if o.instance_type == instance_type and o.zone == zone]
    assert len(found) == 1, found
    return found[0]

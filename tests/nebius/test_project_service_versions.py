"""Nebius's iam.v1.ProjectService is deprecated, supported until 2026-12-16 (the service option in the
protos the SDK ships). The adapter finds its projects through iam.v2; the simulation serves v1 through
that day and not after, so the adapter is checked against the API as it will be then."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date

import grpc
import pytest

from fakeclouds import nebius_api, nebius_catalog
from fakeclouds.server import FakeCloudServer
from providers.base import OfferQuery
from tests.nebius.test_adapter import new_provider


def test_v1_project_service_is_served_through_its_last_supported_day_only() -> None:
    assert nebius_api.v1_projects_served(date(2026, 12, 16))
    assert not nebius_api.v1_projects_served(date(2026, 12, 17))


@pytest.fixture(scope="module")
def server_after_v1_removal() -> Iterator[FakeCloudServer]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nebius_api, "v1_projects_served", lambda today=None: False)
        with FakeCloudServer(facades=[nebius_api.FACADE], boot_delay=0.2, terminate_delay=0.02,
                             time_scale=0) as srv:
            yield srv


async def test_once_v1_is_gone_its_calls_are_unimplemented(server_after_v1_removal: FakeCloudServer) -> None:
    from nebius.api.nebius.iam import v1 as iam

    srv = server_after_v1_removal
    creds = grpc.ssl_channel_credentials(root_certificates=str(srv.ca_pem).encode())
    async with grpc.aio.secure_channel(str(srv.grpc_tls_target), creds) as channel:
        call = channel.unary_unary("/nebius.iam.v1.ProjectService/List",
                                   request_serializer=lambda m: m.SerializeToString(),
                                   response_deserializer=iam.ListProjectsResponse.FromString)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(iam.ListProjectsRequest(parent_id="tenant"), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_the_adapter_finds_its_projects_without_v1(server_after_v1_removal: FakeCloudServer) -> None:
    srv = server_after_v1_removal
    async with new_provider(srv) as p:
        offers = await p.offers(OfferQuery(gpu="H100", spot=False))
    # Offers are priced per region in the tenant's projects there: found through iam.v2 alone.
    assert offers and {o.region for o in offers} <= {proj.region for proj in nebius_catalog.PROJECTS}

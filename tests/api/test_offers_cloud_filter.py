"""`GET /api/compute/offers?cloud=` (issue 17, 9b): the merged offers of one cloud's connections. The
parameter used to be ignored: every connected cloud answered."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from providers import registry
from providers.base import Capabilities
from tests.api.conftest import FakeCloud
from tests.api.test_planning import connect

ALL = "/api/compute/offers"


class OtherCloud(FakeCloud):
    id = "othercloud"
    capabilities = Capabilities(display_name="Other Cloud", regions=["r1", "r2"])


class IdleCloud(FakeCloud):
    id = "idlecloud"  # registered, never connected
    capabilities = Capabilities(display_name="Idle Cloud")


@pytest.fixture(autouse=True)
def more_clouds() -> Iterator[None]:
    for cls in (OtherCloud, IdleCloud):
        registry.register_for_tests(cls)
    yield
    for cls in (OtherCloud, IdleCloud):
        registry.unregister_for_tests(cls.id)


async def test_cloud_limits_the_offers_to_that_clouds_connections(client: httpx.AsyncClient) -> None:
    fake, other = await connect(client, "fakecloud"), await connect(client, "othercloud")
    both = (await client.get(ALL)).json()
    assert {c["connection_id"] for c in both["clouds"]} == {fake, other}
    r = await client.get(ALL, params={"cloud": "othercloud"})
    assert r.status_code == 200, r.text
    assert [c["connection_id"] for c in r.json()["clouds"]] == [other]
    assert r.json()["items"] and {o["connection_id"] for o in r.json()["items"]} == {other}
    only_fake = (await client.get(ALL, params={"cloud": "fakecloud"})).json()["items"]
    assert {o["connection_id"] for o in only_fake} == {fake}


async def test_an_unknown_or_unconnected_cloud_is_refused_with_the_reason(client: httpx.AsyncClient) -> None:
    await connect(client, "fakecloud")
    r = await client.get(ALL, params={"cloud": "nimbus"})
    assert r.status_code == 422 and "unknown cloud" in r.text and "fakecloud" in r.text
    r = await client.get(ALL, params={"cloud": "idlecloud"})
    assert r.status_code == 409 and "no idlecloud connection" in r.json()["detail"]

"""Where an allocation may be planned: `connection_id`, `cloud`, `clouds` or every connected cloud,
resolved by the API into targets before any workflow starts; clouds that cannot serve the request
are skipped with their reason as a note, or refuse the request when they were the only one named."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from providers import registry
from providers.base import Capabilities, InvalidRequest, LaunchRequirements
from store import connections
from tests.api.conftest import GOOD_KEY, FakeCloud, FakeWorkflows

URL = "/api/compute/instances"


class SpotCloud(FakeCloud):
    id = "spotcloud"
    capabilities = Capabilities(display_name="Spot Cloud", spot=True)


class RegionCloud(FakeCloud):
    id = "regioncloud"
    capabilities = Capabilities(display_name="Region Cloud", spot=True, region_required=True)


class ImageCloud(FakeCloud):
    """Names its images one way (Capabilities.image_pattern)."""

    id = "imagecloud"
    capabilities = Capabilities(display_name="Image Cloud", custom_image=True,
                                image_pattern=r"img-[0-9a-f]{4}",
                                image_form="imagecloud: --image must be an image id (img-…)")


class AnyImageCloud(FakeCloud):
    id = "anyimagecloud"
    capabilities = Capabilities(display_name="Any Image Cloud", custom_image=True)


MORE_CLOUDS = (SpotCloud, RegionCloud, ImageCloud, AnyImageCloud)


@pytest.fixture(autouse=True)
def more_clouds() -> Iterator[None]:
    for cls in MORE_CLOUDS:
        registry.register_for_tests(cls)
    yield
    for cls in MORE_CLOUDS:
        registry.unregister_for_tests(cls.id)


async def connect(client: httpx.AsyncClient, cloud: str, name: str | None = None) -> str:
    r = await client.post("/api/compute/connections",
                          json={"provider": cloud, "credentials": {"api_key": GOOD_KEY},
                                **({"name": name} if name else {})})
    assert r.status_code == 201, r.text
    conn_id: str = r.json()["id"]
    return conn_id


async def allocate(client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str,
                   **extra: Any) -> tuple[httpx.Response, Any]:
    before = len(workflows.starts)
    r = await client.post(URL, json={"ssh_public_keys": [ssh_key], **extra})
    started = workflows.starts[before:]
    assert len(started) == (1 if r.status_code == 202 else 0), r.text
    return r, started[0].arg.request if started else None  # type: ignore[attr-defined]


def targets(request: Any) -> list[tuple[str, str]]:
    return [(t.cloud, t.connection_id) for t in request.targets]


async def test_no_selector_plans_across_every_connected_cloud(client: httpx.AsyncClient,
                                                              workflows: FakeWorkflows, ssh_key: str) -> None:
    fake, spot, region = [await connect(client, c) for c in ("fakecloud", "spotcloud", "regioncloud")]
    r, req = await allocate(client, workflows, ssh_key)
    assert r.status_code == 202, r.text
    # Region Cloud needs a region: skipped, with a note saying so.
    assert sorted(targets(req)) == [("fakecloud", fake), ("spotcloud", spot)]
    assert req.notes == ["skipped regioncloud: Region Cloud needs a region"]
    assert (req.connection_id, req.cloud) == (req.targets[0].connection_id, req.targets[0].cloud)
    got = (await client.get(f"{URL}/{r.json()['id']}")).json()
    assert got["note"] == "skipped regioncloud: Region Cloud needs a region"  # shown from the start
    assert (got["cloud"], got["connection_id"]) == (req.cloud, req.connection_id)

    # With a region all three may serve (Fake Cloud knows r1); spot leaves only the clouds that have it.
    r, req = await allocate(client, workflows, ssh_key, region="r1")
    assert sorted(targets(req)) == [("fakecloud", fake), ("regioncloud", region), ("spotcloud", spot)]
    assert req.notes == []
    r, req = await allocate(client, workflows, ssh_key, spot=True, region="r1")
    assert sorted(targets(req)) == [("regioncloud", region), ("spotcloud", spot)]
    assert req.notes == ["skipped fakecloud: --spot needs spot/preemptible instances; Fake Cloud has none"]


async def test_cloud_means_every_connection_of_that_cloud(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                          ssh_key: str, engine: sa.Engine) -> None:
    first, second = await connect(client, "fakecloud", "team a"), await connect(client, "fakecloud", "team b")
    await connect(client, "spotcloud")
    r, req = await allocate(client, workflows, ssh_key, cloud="fakecloud")
    assert r.status_code == 202
    assert sorted(targets(req)) == sorted([("fakecloud", first), ("fakecloud", second)]) and req.notes == []
    with Session(engine) as s:  # a connection being removed takes no new allocation
        connections.mark_connection(s, first, status="removing")
    r, req = await allocate(client, workflows, ssh_key, cloud="fakecloud")
    assert targets(req) == [("fakecloud", second)]


async def test_clouds_skips_those_that_refuse_with_a_note(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                          ssh_key: str) -> None:
    fake, spot = await connect(client, "fakecloud"), await connect(client, "spotcloud")
    await connect(client, "regioncloud")
    r, req = await allocate(client, workflows, ssh_key, clouds=["fakecloud", "spotcloud"], spot=True)
    assert r.status_code == 202 and targets(req) == [("spotcloud", spot)]
    assert req.notes == ["skipped fakecloud: --spot needs spot/preemptible instances; Fake Cloud has none"]
    r, req = await allocate(client, workflows, ssh_key, clouds=["fakecloud", "spotcloud", "spotcloud"])
    assert sorted(targets(req)) == [("fakecloud", fake), ("spotcloud", spot)]
    # Every named cloud refuses: a 422 giving each one's reason, and nothing starts.
    r, _ = await allocate(client, workflows, ssh_key, clouds=["fakecloud", "regioncloud"], ports=[80])
    assert r.status_code == 422
    assert r.json()["detail"] == (
        "no cloud can serve this request: fakecloud: --port needs a firewall API; Fake Cloud has none; "
        "regioncloud: --port needs a firewall API; Region Cloud has none")


async def test_a_named_cloud_that_is_not_connected_is_skipped_with_a_note(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str) -> None:
    spot = await connect(client, "spotcloud")
    r, req = await allocate(client, workflows, ssh_key, clouds=["fakecloud", "spotcloud"])
    assert r.status_code == 202 and targets(req) == [("spotcloud", spot)]
    assert req.notes == ["skipped fakecloud: not connected"]
    r, _ = await allocate(client, workflows, ssh_key, clouds=["fakecloud", "regioncloud"])
    assert r.status_code == 409
    assert r.json()["detail"].startswith("none of fakecloud, regioncloud is connected")


async def test_the_only_named_cloud_refusing_is_a_422_with_its_reason(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str) -> None:
    region = await connect(client, "regioncloud")
    await connect(client, "fakecloud")
    for selector in ({"cloud": "regioncloud"}, {"clouds": ["regioncloud"]}, {"connection_id": region}):
        r, _ = await allocate(client, workflows, ssh_key, **selector)
        assert r.status_code == 422 and r.json()["detail"] == "Region Cloud needs a region", selector
    r, _ = await allocate(client, workflows, ssh_key, cloud="fakecloud", spot=True)
    assert r.status_code == 422 and r.json()["detail"] == (
        "--spot needs spot/preemptible instances; Fake Cloud has none")
    # Refused before it is known whether the cloud is connected, as before.
    r, _ = await allocate(client, workflows, ssh_key, cloud="spotcloud", ports=[22])
    assert r.status_code == 422 and "firewall API; Spot Cloud has none" in r.json()["detail"]


async def test_connection_id_uses_that_connection_only(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                       ssh_key: str, engine: sa.Engine) -> None:
    first, second = await connect(client, "fakecloud"), await connect(client, "fakecloud")
    await connect(client, "spotcloud")
    r, req = await allocate(client, workflows, ssh_key, connection_id=first)
    assert r.status_code == 202 and targets(req) == [("fakecloud", first)]
    assert (req.connection_id, req.cloud) == (first, "fakecloud")
    r, _ = await allocate(client, workflows, ssh_key, connection_id="nosuch")
    assert r.status_code == 404 and "nosuch" in r.json()["detail"]
    with Session(engine) as s:
        connections.mark_connection(s, second, status="removing")
    r, _ = await allocate(client, workflows, ssh_key, connection_id=second)
    assert r.status_code == 422 and "is removing" in r.json()["detail"]


async def test_nothing_connected_is_a_409(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                          ssh_key: str) -> None:
    r, _ = await allocate(client, workflows, ssh_key)
    assert r.status_code == 409 and r.json()["detail"].startswith("no cloud connected")
    r, _ = await allocate(client, workflows, ssh_key, cloud="spotcloud")
    assert r.status_code == 409 and "connect spotcloud first" in r.json()["detail"]


async def test_every_connected_cloud_refusing_is_a_422_listing_each(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str) -> None:
    await connect(client, "fakecloud")
    await connect(client, "regioncloud")
    r, _ = await allocate(client, workflows, ssh_key, image="my-image")
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert detail.startswith("no cloud can serve this request: ")
    assert "fakecloud: --image needs custom images; Fake Cloud boots its own image only" in detail
    assert "regioncloud: --image needs custom images; Region Cloud boots its own image only" in detail


async def test_an_image_not_in_the_clouds_form_is_refused_with_the_request(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str) -> None:
    """Refused by the API (a 422 naming the form), not by the cloud after a workflow started."""
    image_cloud = await connect(client, "imagecloud")
    r, _ = await allocate(client, workflows, ssh_key, cloud="imagecloud", image="ubuntu-24.04")
    assert r.status_code == 422 and r.json()["detail"] == "imagecloud: --image must be an image id (img-…)"
    r, req = await allocate(client, workflows, ssh_key, cloud="imagecloud", image="img-0a1b")
    assert r.status_code == 202 and targets(req) == [("imagecloud", image_cloud)]
    # Planning across clouds: the one whose form it is not is skipped, with why.
    any_image = await connect(client, "anyimagecloud")
    r, req = await allocate(client, workflows, ssh_key, image="ubuntu-24.04")
    assert r.status_code == 202 and targets(req) == [("anyimagecloud", any_image)]
    assert req.notes == ["skipped imagecloud: imagecloud: --image must be an image id (img-…)"]


@pytest.mark.parametrize(("cloud", "good", "bad", "said"), [
    ("aws", "ami-0123456789abcdef0", "ubuntu-24.04", "AMI id"),
    ("azure", "Canonical:ubuntu-24_04-lts:server:latest", "Canonical:ubuntu-24_04-lts", "image URN"),
    ("oci", "ocid1.image.oc1.iad.aaaa", "Canonical-Ubuntu-24.04", "image OCID"),
    ("runpod", "runpod/pytorch:2.4.0", "my image", "container image reference"),
    ("gcp", "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64", "ubuntu-2404-lts",
     "image path"),
])
def test_each_clouds_image_form(cloud: str, good: str, bad: str, said: str) -> None:
    caps = registry.capabilities(cloud)
    caps.check(LaunchRequirements(image=good))
    with pytest.raises(InvalidRequest, match=said):
        caps.check(LaunchRequirements(image=bad))

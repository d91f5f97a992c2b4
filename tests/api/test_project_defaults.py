"""A project's default cloud and region (issue 17, item 8): `PUT/GET/DELETE /api/compute/defaults`. A
request naming no cloud plans on the default (its region too when it gives none); one naming a cloud
keeps its own; without defaults every connected cloud, as before (which used to be the only way)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from providers import registry
from providers.base import Capabilities
from tests.api.conftest import FakeCloud, FakeWorkflows, make_project
from tests.api.test_planning import allocate, connect, targets

URL = "/api/compute/defaults"
JOB = {"name": "j", "command": "true", "requested_by": "tests", "type": "sft"}


class OtherCloud(FakeCloud):
    id = "othercloud"
    capabilities = Capabilities(display_name="Other Cloud", regions=["FI", "FIN-01", "r1"])


@pytest.fixture(autouse=True)
def other_cloud() -> Iterator[None]:
    registry.register_for_tests(OtherCloud)
    yield
    registry.unregister_for_tests(OtherCloud.id)


async def test_a_request_naming_no_cloud_plans_on_the_projects_default(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str) -> None:
    fake, other = await connect(client, "fakecloud"), await connect(client, "othercloud")
    r, req = await allocate(client, workflows, ssh_key)
    assert sorted(targets(req)) == sorted([("fakecloud", fake), ("othercloud", other)])  # no default yet
    assert (await client.get(URL)).status_code == 404

    r = await client.put(URL, json={"cloud": "othercloud", "region": "FI"})
    assert r.status_code == 200, r.text
    assert (r.json()["project"], r.json()["cloud"], r.json()["region"]) == ("default", "othercloud", "FI")
    assert r.json()["updated_at"].endswith(("+00:00", "Z"))
    assert (await client.get(URL)).json()["cloud"] == "othercloud"

    r, req = await allocate(client, workflows, ssh_key)
    assert r.status_code == 202, r.text
    assert targets(req) == [("othercloud", other)] and req.region == "FI"
    assert req.notes[0].startswith("the project's default cloud: othercloud in FI")
    r, req = await allocate(client, workflows, ssh_key, region="r1")  # its own region wins
    assert targets(req) == [("othercloud", other)] and req.region == "r1"
    r, req = await allocate(client, workflows, ssh_key, cloud="fakecloud")  # a named cloud wins
    assert targets(req) == [("fakecloud", fake)] and req.region is None
    r, req = await allocate(client, workflows, ssh_key, clouds=["fakecloud", "othercloud"])
    assert sorted(targets(req)) == sorted([("fakecloud", fake), ("othercloud", other)])

    assert (await client.delete(URL)).status_code == 204
    assert (await client.delete(URL)).status_code == 404
    r, req = await allocate(client, workflows, ssh_key)
    assert sorted(targets(req)) == sorted([("fakecloud", fake), ("othercloud", other)])


async def test_a_job_naming_no_cloud_plans_on_the_default(client: httpx.AsyncClient,
                                                          workflows: FakeWorkflows) -> None:
    await connect(client, "fakecloud")
    other = await connect(client, "othercloud")
    assert (await client.put(URL, json={"cloud": "othercloud", "region": "FIN-01"})).status_code == 200
    r = await client.post("/api/compute/jobs", json=JOB)
    assert r.status_code == 202, r.text
    allocation: Any = workflows.starts[-1].arg.allocation  # type: ignore[attr-defined]
    assert [(t.cloud, t.connection_id) for t in allocation.targets] == [("othercloud", other)]
    assert allocation.region == "FIN-01"
    assert (await client.get(f"/api/compute/jobs/{r.json()['id']}")).json()["cloud"] == "othercloud"


async def test_an_unknown_or_unconnected_cloud_or_a_region_it_lacks_is_refused(
        client: httpx.AsyncClient) -> None:
    await connect(client, "fakecloud")
    for body, words in [({"cloud": "nimbus"}, "unknown cloud"),
                        ({"cloud": "othercloud"}, "othercloud is not connected"),
                        ({"cloud": "fakecloud", "region": "mars-1"}, "fakecloud has no region 'mars-1'"),
                        ({"cloud": "fakecloud", "zone": "a"}, "zone"),
                        ({"region": "r1"}, "cloud")]:
        r = await client.put(URL, json=body)
        assert r.status_code == 422 and words in r.text, (body, r.text)
    assert (await client.get(URL)).status_code == 404  # nothing stored by a refusal
    assert (await client.put(URL, json={"cloud": "fakecloud", "region": "r2"})).status_code == 200
    assert (await client.put(URL, json={"cloud": "othercloud"})).status_code == 422
    assert (await client.get(URL)).json()["region"] == "r2"  # the refused change lost nothing


async def test_defaults_are_per_project(client: httpx.AsyncClient) -> None:
    await connect(client, "fakecloud")
    assert (await client.put(URL, json={"cloud": "fakecloud"})).status_code == 200
    token = await make_project(client, "team-b")
    b = {"Authorization": f"Bearer {token}"}
    assert (await client.get(URL, headers=b)).status_code == 404
    r = await client.put(URL, json={"cloud": "fakecloud"}, headers=b)
    assert r.status_code == 422 and "not connected in project team-b" in r.text

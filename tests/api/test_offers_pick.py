"""The backend offers page (the seed's "Backend offers — browsing instance types & prices"): its title,
the table's columns, and the picked offer, which becomes the backend's default for the project."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from api.deps import AppDeps
from api.market import Market
from api.routers.offers import title_of
from messages import workflows as wf
from messages.allocation import AllocationInput
from providers.base import GpuSpec, Offer, OfferQuery, ProviderError, rank_offers
from store import instances
from store.secrets import SecretBox
from tests.api.conftest import TOKEN, FakeCloud, FakeWorkflows, app_serving, connect_fake, make_project

OFFERS = "/api/compute/backends/fakecloud/offers"
PICK = "/api/compute/backends/fakecloud/pick"
INSTANCES = "/api/compute/instances"

TABLE = [
    Offer(provider="fakecloud", instance_type="gpu.2x.h100", gpu=GpuSpec(name="H100", count=2, memory_gib=80),
          vcpus=52, memory_gib=450, region="r2", price_per_hour=6.5),
    Offer(provider="fakecloud", instance_type="gpu.a10", gpu=GpuSpec(name="A10", count=1), vcpus=4,
          memory_gib=32, region="r1", price_per_hour=0.75),
    Offer(provider="fakecloud", instance_type="cpu.large", gpu=None, vcpus=16, memory_gib=64.5, region="r1",
          price_per_hour=0.4),
    Offer(provider="fakecloud", instance_type="gpu.a10", gpu=GpuSpec(name="A10", count=1), vcpus=4,
          memory_gib=32, region="r2", price_per_hour=0.3, spot=True),
]


@pytest.fixture(autouse=True)
def table(fake_cloud: type[FakeCloud], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(FakeCloud, "OFFERS", TABLE)
    # the table holds a spot offer: this fake sells spot (a cloud that sells none refuses spot=true)
    monkeypatch.setattr(FakeCloud, "capabilities", FakeCloud.capabilities.model_copy(update={"spot": True}))
    yield


async def test_the_page_has_the_title_and_the_seeds_columns(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    r = await client.get(OFFERS)
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["title"] == "Fake Cloud — Available Instances" and page["picked"] is None
    rows = {(o["instance"], o["region"], o["spot"]): o for o in page["items"]}
    assert [o["instance"] for o in page["items"]] == ["gpu.a10", "cpu.large", "gpu.a10", "gpu.2x.h100"]
    h100 = rows["gpu.2x.h100", "r2", False]
    assert (h100["gpu_label"], h100["vcpus"], h100["ram"], h100["price_per_hour"]) == (
        "2× H100 (80GB)", 52, "450 GB", 6.5)
    assert rows["gpu.a10", "r1", False]["gpu_label"] == "1× A10"  # memory unknown: not made up
    cpu = rows["cpu.large", "r1", False]
    assert cpu["gpu_label"] is None and cpu["ram"] == "64.5 GB"
    assert rows["gpu.a10", "r2", True]["spot"] is True
    # the fields clients read before stay as they were
    assert h100["instance_type"] == "gpu.2x.h100" and h100["gpu"] == {"name": "H100", "count": 2,
                                                                        "memory_gib": 80.0}
    assert h100["memory_gib"] == 450 and h100["provider"] == "fakecloud" and h100["available"] is True
    # the Spot instances checkbox
    spot = (await client.get(OFFERS, params={"spot": "true"})).json()["items"]
    assert [(o["instance"], o["spot"]) for o in spot] == [("gpu.a10", True)]


def test_the_title_names_the_provider_as_the_connect_grid_does() -> None:
    assert title_of("aws") == "AWS — Available Instances"
    assert title_of("vastai") == "Vast.ai — Available Instances"
    assert title_of("lambda") == "Lambda Cloud — Available Instances"


async def test_a_pick_is_stored_and_shown(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    r = await client.post(PICK, json={"instance_type": "gpu.2x.h100", "region": "r2", "spot": False,
                                      "gpu": "2× H100 (80GB)"})
    assert r.status_code == 200, r.text
    picked = r.json()
    assert {k: picked[k] for k in ("provider", "instance_type", "region", "spot", "gpu_label",
                                   "price_per_hour")} == {
        "provider": "fakecloud", "instance_type": "gpu.2x.h100", "region": "r2", "spot": False,
        "gpu_label": "2× H100 (80GB)", "price_per_hour": 6.5}
    assert (await client.get(OFFERS)).json()["picked"] == picked
    # picking again replaces it; the GPU and price come from the cloud's offer, not the request
    r = await client.post(PICK, json={"instance_type": "gpu.a10", "region": "r2", "spot": True,
                                      "gpu": "made up"})
    assert r.status_code == 200, r.text
    shown = (await client.get(OFFERS)).json()["picked"]
    assert (shown["instance_type"], shown["region"], shown["spot"], shown["gpu_label"],
            shown["price_per_hour"]) == ("gpu.a10", "r2", True, "1× A10", 0.3)


async def test_the_pick_reads_without_asking_the_cloud(client: httpx.AsyncClient) -> None:
    """GET …/pick: what the offers page echoes on load, before any offer is fetched."""
    assert (await client.get(PICK)).status_code == 404  # nothing picked yet (needs no connection)
    await connect_fake(client)
    picked = (await client.post(PICK, json={"instance_type": "gpu.2x.h100", "region": "r2"})).json()
    FakeCloud.FAIL = ProviderError("offers down")  # not asked: its failing changes nothing here
    r = await client.get(PICK)  # (the conftest's autouse fixture clears FAIL after the test)
    assert r.status_code == 200 and r.json() == picked, r.text
    assert (await client.delete(PICK)).status_code == 204
    assert (await client.get(PICK)).status_code == 404
    assert (await client.get("/api/compute/backends/nosuchcloud/pick")).status_code == 422


async def test_a_pick_is_looked_up_in_the_answer_the_page_just_showed(
        client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A click on a row of the table costs no second call to the cloud: on a busy 2-core box the
    pick's own query (its region and spot, cold each time) went past GPUPROV_OFFERS_TIMEOUT_S. An
    offer outside the default regions (a table fetched with ?region=) is asked for in its region."""
    asked: list[OfferQuery] = []
    listed = FakeCloud.offers

    async def counted(self: FakeCloud, query: OfferQuery) -> list[Offer]:
        asked.append(query)
        return await listed(self, query)

    monkeypatch.setattr(FakeCloud, "offers", counted)
    monkeypatch.setattr(FakeCloud, "capabilities",
                        FakeCloud.capabilities.model_copy(update={"default_regions": ["r2"]}))
    await connect_fake(client)
    assert (await client.get(OFFERS)).status_code == 200
    for pick in ({"instance_type": "gpu.a10", "region": "r2", "spot": True},
                 {"instance_type": "gpu.2x.h100", "region": "r2"}):
        r = await client.post(PICK, json=pick)
        assert r.status_code == 200, r.text
    assert asked == [OfferQuery()], "each pick found in the page's answer"

    r = await client.post(PICK, json={"instance_type": "gpu.a10", "region": "r1"})
    assert r.status_code == 200 and r.json()["price_per_hour"] == 0.75, r.text
    assert asked == [OfferQuery(), OfferQuery(region="r1")]
    r = await client.post(PICK, json={"instance_type": "gpu.a10", "region": "r2", "spot": False})
    assert r.status_code == 422 and "offers no 'gpu.a10'" in r.json()["detail"], "only a spot one there"


@pytest.mark.parametrize("pick", [
    {"instance_type": "gpu.9x.b200", "region": "r2"},  # no such type
    {"instance_type": "gpu.2x.h100", "region": "r1"},  # not in that region
    {"instance_type": "gpu.2x.h100", "region": "r2", "spot": True},  # no spot offer of it
    {"instance_type": "gpu.a10", "region": "r2", "spot": False},  # only a spot one there
])
async def test_a_pick_not_among_the_current_offers_is_422_and_nothing_is_stored(
        client: httpx.AsyncClient, pick: dict[str, Any]) -> None:
    await connect_fake(client)
    r = await client.post(PICK, json=pick)
    assert r.status_code == 422, r.text
    assert "offers no" in r.json()["detail"]
    assert (await client.get(OFFERS)).json()["picked"] is None


async def test_a_pick_needs_a_connection_and_a_valid_body(client: httpx.AsyncClient) -> None:
    r = await client.post(PICK, json={"instance_type": "gpu.a10", "region": "r1"})
    assert r.status_code == 409 and "connect fakecloud first" in r.json()["detail"]
    await connect_fake(client)
    r = await client.post(PICK, json={"instance_type": "gpu.a10"})
    assert r.status_code == 422 and "region" in r.json()["detail"]
    r = await client.post(PICK, json={"instance_type": "gpu.a10", "region": "r1", "price": 0})
    assert r.status_code == 422 and "Extra inputs" in r.text
    # Modal's pick is its GPU picker's (tests/api/test_modal_picker.py): the table's body is refused
    r = await client.post("/api/compute/backends/modal/pick", json={"instance_type": "a", "region": "b"})
    assert r.status_code == 422 and "instance_type" in r.json()["detail"]


def _requests(workflows: FakeWorkflows) -> list[Any]:
    return [s.arg.request for s in workflows.starts_of(wf.ALLOCATION.name)
            if isinstance(s.arg, AllocationInput)]


async def test_an_allocation_naming_the_backend_without_a_gpu_gets_the_default(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, engine: Any) -> None:
    conn = await connect_fake(client)
    r = await client.post(PICK, json={"instance_type": "gpu.2x.h100", "region": "r2"})
    assert r.status_code == 200, r.text
    for selector in ({"cloud": "fakecloud"}, {"clouds": ["fakecloud"]}, {"connection_id": conn["id"]}):
        r = await client.post(INSTANCES, json={**selector, "ssh_public_keys": [ssh_key]})
        assert r.status_code == 202, r.text
        asked = _requests(workflows)[-1]
        assert (asked.instance_type, asked.region, asked.gpu) == ("gpu.2x.h100", "r2", None), selector
        assert "fakecloud default offer: gpu.2x.h100 in r2" in asked.notes[0]
        with Session(engine) as s:
            row = instances.get_instance(s, r.json()["id"])
        assert row is not None and row.region == "r2" and "default offer" in (row.note or "")

    # Anything that says otherwise is the request's own: a GPU, another region, spot, other clouds.
    for other in ({"cloud": "fakecloud", "gpu": "A10"}, {"cloud": "fakecloud", "gpu_count": 1},
                  {"cloud": "fakecloud", "region": "r1"}, {}):
        r = await client.post(INSTANCES, json={**other, "ssh_public_keys": [ssh_key]})
        assert r.status_code == 202, (other, r.text)
        asked = _requests(workflows)[-1]
        assert asked.instance_type is None and not any("default offer" in n for n in asked.notes), other


async def test_the_pick_is_per_project(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                       ssh_key: str) -> None:
    await connect_fake(client)
    await make_project(client, "vision")
    await connect_fake(client, "vision")
    vision = {"X-Project": "vision"}
    r = await client.post(PICK, json={"instance_type": "gpu.a10", "region": "r1"}, headers=vision)
    assert r.status_code == 200, r.text
    assert (await client.get(OFFERS, headers=vision)).json()["picked"]["instance_type"] == "gpu.a10"
    assert (await client.get(OFFERS)).json()["picked"] is None  # default project: none
    r = await client.post(INSTANCES, json={"cloud": "fakecloud", "ssh_public_keys": [ssh_key]})
    assert r.status_code == 202 and _requests(workflows)[-1].instance_type is None
    r = await client.post(INSTANCES, json={"cloud": "fakecloud", "ssh_public_keys": [ssh_key]},
                          headers=vision)
    assert r.status_code == 202
    assert (_requests(workflows)[-1].instance_type, _requests(workflows)[-1].region) == ("gpu.a10", "r1")


def test_planning_considers_only_the_picked_type() -> None:
    query = OfferQuery(instance_type="gpu.a10", region="r1", spot=False)
    assert [(o.instance_type, o.region) for o in rank_offers(TABLE, query)] == [("gpu.a10", "r1")]
    assert len(rank_offers(TABLE, OfferQuery())) == len(TABLE)


async def test_clearing_the_pick_plans_across_every_offer_again(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str) -> None:
    await connect_fake(client)
    assert (await client.delete(PICK)).status_code == 404  # nothing picked yet
    r = await client.post(PICK, json={"instance_type": "gpu.2x.h100", "region": "r2"})
    assert r.status_code == 200, r.text
    await make_project(client, "vision")
    await connect_fake(client, "vision")
    assert (await client.delete(PICK, headers={"X-Project": "vision"})).status_code == 404  # not theirs
    assert (await client.delete(PICK)).status_code == 204
    assert (await client.get(OFFERS)).json()["picked"] is None
    assert (await client.delete(PICK)).status_code == 404
    r = await client.post(INSTANCES, json={"cloud": "fakecloud", "ssh_public_keys": [ssh_key]})
    assert r.status_code == 202 and _requests(workflows)[-1].instance_type is None
    r = await client.delete("/api/compute/backends/nosuchcloud/pick")
    assert r.status_code == 422 and "unknown cloud" in r.json()["detail"]


def resolved(expression: Any, answer: httpx.Response) -> Any:
    """An OpenAPI runtime expression of the pick links (`$response.body#/…`, `$request.path.provider`)
    evaluated as a client following the link does."""
    if isinstance(expression, dict):
        return {k: resolved(v, answer) for k, v in expression.items()}
    if expression == "$request.path.provider":
        return answer.request.url.path.split("/")[-2]
    value: Any = answer.json()
    for step in expression.removeprefix("$response.body#/").split("/"):
        value = value[int(step)] if isinstance(value, list) else value[step]
    return value


@pytest.mark.parametrize("page", [OFFERS, "/api/compute/offers"])
async def test_an_offers_page_links_to_a_pick_of_its_first_offer(client: httpx.AsyncClient,
                                                                  page: str) -> None:
    """The link clients and the stateful fuzz follow: the pick it makes is accepted and stored."""
    await connect_fake(client)
    spec = (await client.get("/openapi.json")).json()
    path = page if page != OFFERS else "/api/compute/backends/{provider}/offers"
    links = spec["paths"][path]["get"]["responses"]["200"]["links"]
    link = next(v for k, v in links.items() if k.startswith("pick_offer"))
    answer = await client.get(page)
    assert answer.status_code == 200, answer.text
    provider = resolved(link["parameters"]["provider"], answer)
    body = resolved(link["requestBody"], answer)
    picked = await client.post(f"/api/compute/backends/{provider}/pick", json=body)
    assert picked.status_code == 200, picked.text
    first = answer.json()["items"][0]
    assert {k: picked.json()[k] for k in ("instance_type", "region", "spot")} == {
        k: first[k] for k in ("instance_type", "region", "spot")} == {
        "instance_type": "gpu.a10", "region": "r2", "spot": True}


async def test_a_cloud_slower_than_the_page_is_a_504_and_its_answer_the_next_requests(
        engine: sa.Engine, box: SecretBox, workflows: FakeWorkflows, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search paced under a cloud's rate limit (Vast.ai's) outlasted `make fuzz`'s 10 s client on
    this page, which asked live and unbounded: now the page waits GPUPROV_OFFERS_TIMEOUT_S, and the
    call it stopped waiting for goes on, its answer served to the next request."""
    release, calls = asyncio.Event(), []

    async def slow_offers(self: FakeCloud, query: OfferQuery) -> list[Offer]:
        calls.append(query)
        await release.wait()
        return rank_offers(TABLE, query)

    monkeypatch.setattr(FakeCloud, "offers", slow_offers)
    deps = AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001", workflows=workflows,
                   market=Market(timeout_s=0.2))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app_serving(deps)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        await connect_fake(client)
        r = await asyncio.wait_for(client.get(OFFERS), 30)  # before: waited on the cloud for good
        assert r.status_code == 504 and "still asked" in r.json()["detail"], r.text
        release.set()  # the cloud answers after the page gave up
        await asyncio.gather(*deps.market.cache.pending())
        r = await client.get(OFFERS)
        assert r.status_code == 200, r.text
        shown = [o["instance"] for o in r.json()["items"]]
        assert shown == ["gpu.a10", "cpu.large", "gpu.a10", "gpu.2x.h100"]
    assert len(calls) == 1, "the answer the first request waited for is the one served"

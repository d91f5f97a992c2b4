"""The Modal GPU picker (the seed's "Backend offers": "Modal is the exception: instead of the generic
offer table it shows a Modal GPU picker where you choose a GPU spec and save it as the backend's
default"): the table's GPU types, limits and prices with their source and date, and a saved spec as
what the next Modal allocation asks the workflow for."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput
from providers import registry
from providers.base import OfferQuery, rank_offers
from providers.modal_ import ModalProvider
from providers.modal_gpus import GPUS, PRICED_ON, PRICES_SOURCE
from store import instances, picks
from tests.api.conftest import FakeWorkflows, make_project

OFFERS = "/api/compute/backends/modal/offers"
PICK = "/api/compute/backends/modal/pick"
INSTANCES = "/api/compute/instances"
# The issue's list, in Modal's docs' order: the table must carry exactly these.
DOCUMENTED = ["T4", "L4", "A10", "L40S", "A100-40GB", "A100-80GB", "RTX-PRO-6000", "H100", "H200", "B200"]


class NoModal(Exception):
    pass


@pytest.fixture(autouse=True)
def modal_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The picker and the pick never call Modal: any client the adapter would open fails the test.
    Connecting is verified by a stand-in (the real verify is tests/modal_'s, against the simulation)."""
    async def no_client(self: ModalProvider) -> Any:
        raise NoModal("the picker must not call Modal")

    async def verify(self: ModalProvider) -> str:
        return "Modal token 0123456789ab (environment main)"

    monkeypatch.setattr(ModalProvider, "_modal", no_client)
    monkeypatch.setattr(ModalProvider, "verify", verify)


async def connect_modal(client: httpx.AsyncClient, project: str | None = None) -> dict[str, Any]:
    headers = {"X-Project": project} if project else {}
    r = await client.post("/api/compute/connections", headers=headers, json={
        "provider": "modal", "credentials": {"token_id": "ak-test", "token_secret": "as-test"}})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def stored_pick(engine: sa.Engine, project: str = "default") -> tuple[str, str] | None:
    with Session(engine) as s:
        row = picks.get_pick(s, project, "modal")
    return None if row is None else (row.instance_type, row.region)


def last_request(workflows: FakeWorkflows) -> AllocateRequest:
    start = workflows.starts_of(wf.ALLOCATION.name)[-1]
    assert isinstance(start.arg, AllocationInput)
    return start.arg.request


async def test_the_picker_lists_the_tables_gpu_types_limits_and_prices(client: httpx.AsyncClient) -> None:
    await connect_modal(client)
    r = await client.get(OFFERS)
    assert r.status_code == 200, r.text
    page = r.json()
    assert page["title"] == "Modal — Available Instances" and page["view"] == "modal_gpu_picker"
    assert "items" not in page  # not the generic offer table
    assert [g["gpu"] for g in page["gpus"]] == [g.name for g in GPUS] == DOCUMENTED
    for shown, gpu in zip(page["gpus"], GPUS, strict=True):
        assert shown["max_count"] == gpu.max_count and shown["counts"] == list(range(1, gpu.max_count + 1))
        assert shown["memory_gib"] == gpu.memory_gib
        assert shown["price_per_hour"] == gpu.price_per_hour == round(gpu.usd_per_second * 3600, 4) > 0
        assert shown["price_per_second"] == gpu.usd_per_second
    limits = {g["gpu"]: g["max_count"] for g in page["gpus"]}
    assert limits["A10"] == 4 and limits["H100"] == 8  # Modal's docs: A10 up to 4, the rest up to 8
    assert (page["prices_source"], page["priced_on"]) == (PRICES_SOURCE, PRICED_ON)
    assert page["prices_source"].startswith("https://modal.com/")
    assert page["region"] == "global" and page["billing"] == "per second" and page["picked"] is None


async def test_the_picker_and_the_pick_need_a_modal_connection(client: httpx.AsyncClient,
                                                               engine: sa.Engine) -> None:
    r = await client.get(OFFERS)
    assert r.status_code == 409 and "connect modal first" in r.json()["detail"]
    r = await client.post(PICK, json={"gpu": "H100", "gpu_count": 2})
    assert r.status_code == 409 and "connect modal first" in r.json()["detail"]
    assert stored_pick(engine) is None
    # another project's connection is not this project's
    await make_project(client, "vision")
    await connect_modal(client, "vision")
    assert (await client.get(OFFERS)).status_code == 409
    assert (await client.get(OFFERS, headers={"X-Project": "vision"})).status_code == 200


async def test_a_saved_spec_is_shown_and_replaced(client: httpx.AsyncClient) -> None:
    await connect_modal(client)
    r = await client.post(PICK, json={"gpu": "H100", "gpu_count": 2})
    assert r.status_code == 200, r.text
    picked = r.json()
    h100 = next(g for g in GPUS if g.name == "H100")
    assert {k: picked[k] for k in ("provider", "instance_type", "region", "spot", "gpu", "gpu_count",
                                   "gpu_label", "price_per_hour")} == {
        "provider": "modal", "instance_type": "H100:2", "region": "global", "spot": False, "gpu": "H100",
        "gpu_count": 2, "gpu_label": "2× H100 (80GB)", "price_per_hour": round(2 * h100.price_per_hour, 4)}
    assert (await client.get(OFFERS)).json()["picked"] == picked
    # one GPU: the spec is the bare type, as Modal's gpu= takes it; the default count is 1
    r = await client.post(PICK, json={"gpu": "A100-80GB"})
    assert r.status_code == 200, r.text
    shown = (await client.get(OFFERS)).json()["picked"]
    assert (shown["instance_type"], shown["gpu"], shown["gpu_count"], shown["gpu_label"]) == (
        "A100-80GB", "A100-80GB", 1, "1× A100 (80GB)")
    assert (await client.get(PICK)).json() == shown  # read alone, as every backend's pick
    assert (await client.delete(PICK)).status_code == 204
    assert (await client.get(PICK)).status_code == 404


@pytest.mark.parametrize(("body", "why"), [
    ({"gpu": "A10", "gpu_count": 5}, "A10 takes 1 to 4 GPUs per sandbox, not 5"),
    ({"gpu": "H100", "gpu_count": 9}, "less than or equal to 8"),
    ({"gpu": "H100", "gpu_count": 0}, "greater than or equal to 1"),
    ({"gpu": "H800"}, "unknown Modal GPU type 'H800'; known: T4, L4, A10"),
    ({"gpu": "h100"}, "unknown Modal GPU type"),
    ({"gpu_count": 2}, "body.gpu: Field required"),
    ({"instance_type": "H100:2", "region": "global"}, "Extra inputs"),
    ({"gpu": "H100", "gpu_count": 2, "price_per_hour": 0}, "Extra inputs"),
])
async def test_a_refused_spec_is_422_with_its_reason_and_stores_nothing(
        client: httpx.AsyncClient, engine: sa.Engine, body: dict[str, Any], why: str) -> None:
    await connect_modal(client)
    r = await client.post(PICK, json=body)
    assert r.status_code == 422, r.text
    assert why in r.json()["detail"], r.json()
    assert stored_pick(engine) is None and (await client.get(OFFERS)).json()["picked"] is None
    # and an earlier pick stays as it was
    assert (await client.post(PICK, json={"gpu": "L4", "gpu_count": 3})).status_code == 200
    assert (await client.post(PICK, json=body)).status_code == 422
    assert stored_pick(engine) == ("L4:3", "global")


async def test_the_saved_spec_is_what_the_next_modal_allocation_asks_for(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str, engine: sa.Engine) -> None:
    conn = await connect_modal(client)
    r = await client.post(PICK, json={"gpu": "H200", "gpu_count": 4})
    assert r.status_code == 200, r.text
    for selector in ({"cloud": "modal"}, {"clouds": ["modal"]}, {"connection_id": conn["id"]}):
        r = await client.post(INSTANCES, json={**selector, "ssh_public_keys": [ssh_key]})
        assert r.status_code == 202, r.text
        asked = last_request(workflows)
        assert (asked.cloud, asked.connection_id, asked.instance_type, asked.region, asked.gpu,
                asked.gpu_count, asked.spot) == (
            "modal", conn["id"], "H200:4", "global", None, None, None), selector
        assert [(t.cloud, t.connection_id) for t in asked.targets] == [("modal", conn["id"])]
        assert asked.notes[0] == "modal default offer: H200:4 in global"
        with Session(engine) as s:
            row = instances.get_instance(s, r.json()["id"])
        assert row is not None and "modal default offer: H200:4" in (row.note or "")

    # A new pick is what the next allocation asks for.
    assert (await client.post(PICK, json={"gpu": "T4"})).status_code == 200
    r = await client.post(INSTANCES, json={"cloud": "modal", "ssh_public_keys": [ssh_key]})
    assert r.status_code == 202, r.text
    assert last_request(workflows).instance_type == "T4"

    # A request with its own GPU is its own; cleared, Modal plans across its offers again.
    r = await client.post(INSTANCES, json={"cloud": "modal", "gpu": "H100", "gpu_count": 1,
                                           "ssh_public_keys": [ssh_key]})
    assert r.status_code == 202 and last_request(workflows).instance_type is None
    assert (await client.delete(PICK)).status_code == 204
    assert (await client.get(OFFERS)).json()["picked"] is None and stored_pick(engine) is None
    assert (await client.delete(PICK)).status_code == 404
    r = await client.post(INSTANCES, json={"cloud": "modal", "ssh_public_keys": [ssh_key]})
    assert r.status_code == 202 and last_request(workflows).instance_type is None


@pytest.mark.parametrize("gpu", GPUS, ids=lambda g: g.name)
async def test_every_spec_the_picker_saves_is_one_the_adapter_plans_on(
        gpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the workflow's planning does with the saved instance type: exactly one of Modal's offers,
    at the price the picker showed (the adapter's offers, its hello to Modal stubbed)."""
    class Hello:
        async def aio(self) -> None:
            return None

    class Client:
        hello = Hello()

    async def client(self: ModalProvider) -> Any:
        return Client()

    monkeypatch.setattr(ModalProvider, "_modal", client)
    adapter = registry.build("modal", {"token_id": "ak-test", "token_secret": "as-test"},
                             installation_id="inst0001")
    offers = await adapter.offers(OfferQuery())
    for count in (1, gpu.max_count):
        planned = rank_offers(offers, OfferQuery(instance_type=gpu.spec(count), region="global", spot=False))
        assert [(o.instance_type, o.price_per_hour) for o in planned] == [
            (gpu.spec(count), round(gpu.price_per_hour * count, 4))]


async def test_openapi_documents_the_picker_and_leaves_modal_out_of_the_table(
        client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    paths = spec["paths"]
    picker = paths["/api/compute/backends/modal/offers"]["get"]["responses"]
    assert picker["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ModalGpuPicker"}
    assert {"200", "401", "409", "422"} <= set(picker)
    pick = paths["/api/compute/backends/modal/pick"]["post"]
    assert {"200", "409", "422"} <= set(pick["responses"])
    body = spec["components"]["schemas"]["ModalPickCreate"]["properties"]
    assert body["gpu"]["enum"] == DOCUMENTED and body["gpu_count"]["maximum"] == 8
    assert {"204", "404"} <= set(paths["/api/compute/backends/modal/pick"]["delete"]["responses"])
    for path, method in (("offers", "get"), ("pick", "post"), ("pick", "delete")):
        op = paths["/api/compute/backends/{provider}/" + path][method]
        provider = next(p for p in op["parameters"] if p["name"] == "provider")
        assert "modal" not in provider["schema"]["enum"] and "aws" in provider["schema"]["enum"]

"""Cloud ids come from the registry: /clouds lists them, request fields are checked against them
per request, and OpenAPI shows them as an enum."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlmodel import Session

from api.fields import OWN_PICKER
from messages.acceptance import (
    STEPS,
    AcceptanceResult,
    AcceptanceState,
    AcceptanceStep,
    RecordAcceptanceInput,
)
from providers import registry, support
from store import acceptance_runs
from store.models import AcceptanceRun
from tests.api.conftest import FakeCloud, all_items, make_unloadable

CLOUDS = "/api/compute/clouds"


class LaterCloud(FakeCloud):
    id = "latercloud"


@pytest.fixture
def later_cloud() -> Iterator[None]:
    registry.register_for_tests(LaterCloud)
    yield
    registry.unregister_for_tests(LaterCloud.id)


async def test_clouds_list_every_registered_cloud_with_capabilities_and_form(
        client: httpx.AsyncClient) -> None:
    clouds = {c["id"]: c for c in await all_items(client, CLOUDS)}
    assert sorted(clouds) == registry.known()
    fake = clouds["fakecloud"]
    assert fake["display_name"] == "Fake Cloud" and fake["available"] is True
    caps = fake["capabilities"]
    assert set(caps) >= {"k3s", "k8s_api", "ports", "spot", "custom_image", "login_user", "side_resources",
                         "regions"}
    assert caps["regions"] == ["r1", "r2"] and caps["ports"] is False and caps["k3s"] == "none"
    assert "default_regions" not in caps and "planning" not in caps
    assert fake["credentials"] == [{"name": "api_key", "label": "API Key", "kind": "secret", "required": True,
                                    "default": None, "help": None}]
    for cloud in registry.known():  # the real adapters describe themselves the same way
        assert clouds[cloud]["capabilities"]["login_user"]
        assert [f["name"] for f in clouds[cloud]["credentials"]] == list(
            registry.adapter_class(cloud).credentials_model.model_fields)


async def test_a_cloud_whose_adapter_cannot_load_is_listed_as_unavailable(
        client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    make_unloadable(monkeypatch, "lambda", "lambda_sdk")
    lam = next(c for c in await all_items(client, CLOUDS) if c["id"] == "lambda")
    assert lam["available"] is False and "lambda_sdk" in lam["reason"] and lam["capabilities"] is None


async def test_openapi_shows_cloud_fields_as_an_enum_of_the_registry(client: httpx.AsyncClient,
                                                                     later_cloud: None) -> None:
    spec = (await client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    known = registry.known()
    assert "latercloud" in known and "fakecloud" in known
    assert schemas["ConnectionCreate"]["properties"]["provider"]["enum"] == known
    instance = schemas["InstanceCreate"]["properties"]
    [cloud] = [s for s in instance["cloud"]["anyOf"] if s.get("type") == "string"]  # or null
    [clouds] = [s for s in instance["clouds"]["anyOf"] if s.get("type") == "array"]
    # An allocation may also name a fleet kind (`ssh`: the project's SSH fleets, not connections).
    placeable = registry.placeable()
    assert set(placeable) - set(known) == set(registry.fleets())
    assert cloud["enum"] == placeable and clouds["items"]["enum"] == placeable
    [provider] = [p for p in spec["paths"]["/api/compute/backends/{provider}/offers"]["get"]["parameters"]
                  if p["name"] == "provider"]
    # a fleet kind's offers: its fleets' free hosts; a backend with a picker of its own is not the table's
    assert provider["schema"]["enum"] == [c for c in placeable if c not in OWN_PICKER]
    assert all(f"/api/compute/backends/{c}/offers" in spec["paths"] for c in OWN_PICKER)
    page = spec["paths"]["/api/compute/instances"]["get"]["parameters"]
    assert {p["name"] for p in page} >= {"limit", "cursor", "status", "X-Project"}
    offers = spec["paths"]["/api/compute/backends/{provider}/offers"]["get"]["responses"]["200"]
    assert "BackendOffersPage" in str(offers) and "Offer\"" not in str(offers)
    assert "BackendOfferOut" in str(schemas["BackendOffersPage"]) and "/Offer'" not in str(schemas)


async def test_cloud_ids_are_checked_per_request(client: httpx.AsyncClient) -> None:
    body = {"provider": "latercloud", "credentials": {"api_key": "k"}}
    r = await client.post("/api/compute/connections", json=body)
    assert r.status_code == 422 and "unknown cloud 'latercloud'" in r.text
    registry.register_for_tests(LaterCloud)  # registered after the app was built
    try:
        r = await client.post("/api/compute/connections", json=body)
        assert r.status_code == 400 and "refused the API key" in r.json()["detail"]  # got past validation
    finally:
        registry.unregister_for_tests(LaterCloud.id)
    for bad in ("", "x" * 101, "Fakecloud", "nimbus"):
        r = await client.post("/api/compute/instances", json={"cloud": bad, "ssh_public_keys": ["k"]})
        assert r.status_code == 422 and "cloud" in r.text, bad


async def test_each_cloud_shows_its_support_status_never_available_as_a_claim(
        client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    clouds = {c["id"]: c for c in await all_items(client, CLOUDS)}
    for cloud in registry.known():
        assert clouds[cloud]["support"] == {
            "status": "untested", "detail": "no acceptance run on this adapter version yet",
            "adapter_version": support.adapter_version(cloud), "last_run_at": None}, cloud
    # the latest run on the current version decides; a failure names its step
    version = support.adapter_version("fakecloud")
    steps = [support.AcceptanceStep(name="connect", outcome="passed", seconds=1),
             support.AcceptanceStep(name="allocate", outcome="failed", seconds=2, detail="quota")]
    runs = [support.AcceptanceResult(cloud="fakecloud", adapter_version=version, account="real",
                                     started_at=datetime(2030, 1, 1, tzinfo=UTC), steps=steps)]
    monkeypatch.setattr(support, "load", lambda *a: runs)
    fake = {c["id"]: c for c in await all_items(client, CLOUDS)}["fakecloud"]["support"]
    assert fake["status"] == "failing" and "allocate" in fake["detail"] and fake["adapter_version"] == version
    assert fake["last_run_at"].startswith("2030-01-01T00:00:00")


async def test_an_unavailable_cloud_still_shows_its_support_status(
        client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    make_unloadable(monkeypatch, "lambda", "lambda_sdk")
    lam = next(c for c in await all_items(client, CLOUDS) if c["id"] == "lambda")
    assert lam["available"] is False and lam["support"]["status"] == "untested"


async def test_a_recorded_simulated_run_makes_the_cloud_read_simulated_never_supported(
        client: httpx.AsyncClient, engine: Any) -> None:
    """The deployment's own acceptance runs count with the committed file's: a passing run against a
    simulation reads `simulated`; only a real account's passing run could read `supported`."""
    version = support.adapter_version("fakecloud")
    steps = [AcceptanceStep(name=name, outcome="passed", seconds=1) for name in STEPS]
    result = AcceptanceResult(cloud="fakecloud", adapter_version=version, account="simulated",
                              started_at=datetime(2030, 1, 1, tzinfo=UTC), steps=steps)
    state = AcceptanceState(run_id="acc-0123456789ab", cloud="fakecloud", done=True, steps=steps,
                            result=result)
    with Session(engine) as s:
        acceptance_runs.save(s, RecordAcceptanceInput(run_id=state.run_id, project="default",
                                                      connection_id="c1", result=result, state=state))
    fake = {c["id"]: c for c in await all_items(client, CLOUDS)}["fakecloud"]["support"]
    assert fake["status"] == "simulated" and fake["adapter_version"] == version
    # an older adapter's run does not count
    with Session(engine) as s:
        row = s.get(AcceptanceRun, state.run_id)
        assert row is not None
        row.result = result.model_copy(update={"adapter_version": "0ld"}).model_dump_json()
        s.add(row)
        s.commit()
    fake = {c["id"]: c for c in await all_items(client, CLOUDS)}["fakecloud"]["support"]
    assert fake["status"] == "untested"

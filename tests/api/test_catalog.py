"""The connect grid (GET /api/compute/providers/catalog) against the seed's tables ("Connecting a
cloud provider", "Credentials per provider"), written out here by hand: the seed is the specification."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from api.app import API_PREFIX, create_app
from api.deps import AppDeps
from providers import registry, support
from providers.gcp import GcpCredentials
from tests.api.conftest import GOOD_KEY, TOKEN, FakeWorkflows, all_items, connect_fake, make_unloadable

CATALOG = "/api/compute/providers/catalog"
BILLED = "Connecting lets the platform spin up GPU billed to your account at this provider."

# The seed's "Nine backends are offered" table, in its order.
SEED_CARDS = [
    ("aws", "AWS", "Broadest GPU instance selection"),
    ("azure", "Azure", "Enterprise-grade GPU VMs"),
    ("gcp", "GCP", "TPUs & fast networking"),
    ("runpod", "RunPod", "Per-second billing GPU pods"),
    ("modal", "Modal", "Serverless GPUs, scale to zero"),
    ("nebius", "Nebius", "EU-based NVIDIA GPU cloud"),
    ("oci", "Oracle Cloud (OCI)", "Bare-metal RDMA GPU clusters"),
    ("vastai", "Vast.ai", "Cheapest GPU marketplace"),
    ("ssh", "SSH / On-prem", "Bring your own GPU servers"),
]

# The seed's "Credentials per provider" table: (label, kind, required, default) per field, in order.
SEED_FIELDS: dict[str, list[tuple[str, str, bool, Any]]] = {
    "aws": [("Access Key ID", "text", True, None), ("Secret Access Key", "secret", True, None)],
    "azure": [("Tenant ID", "text", True, None), ("Subscription ID", "text", True, None),
              ("Client ID (Application ID)", "text", True, None), ("Client Secret", "secret", True, None)],
    # the project id may be left empty: it is filled from the key
    "gcp": [("GCP Project ID", "text", False, ""), ("Service Account Key", "file", True, None)],
    "runpod": [("API Key", "secret", True, None), ("Include Community Cloud", "toggle", False, False)],
    "modal": [("Token ID", "text", True, None), ("Token Secret", "secret", True, None),
              ("Environment", "text", False, "main")],
    "nebius": [("Service Account ID", "text", True, None), ("Public Key ID", "text", True, None),
               ("Private key", "file", True, None)],
    "oci": [("User OCID", "text", True, None), ("Tenancy OCID", "text", True, None),
            ("Fingerprint", "text", True, None), ("Home Region", "text", True, None),
            ("Private Key", "file", True, None)],
    "vastai": [("API Key", "secret", True, None)],
    "ssh": [("SSH user", "text", False, "ubuntu"), ("SSH port", "text", False, 22),
            ("Private key", "secret", True, None), ("Hosts", "text", True, None),
            ("Bastion host", "text", False, None), ("Bastion port", "text", False, 22),
            ("Bastion user", "text", False, None), ("Bastion private key", "secret", False, None)],
}
# the seed's providers with an adapter here
AVAILABLE = {"aws", "azure", "gcp", "runpod", "vastai", "modal", "nebius", "oci"}
SECRET_VALUED = {("aws", "secret_access_key"), ("azure", "client_secret"), ("gcp", "service_account_key"),
                 ("runpod", "api_key"), ("modal", "token_secret"), ("nebius", "private_key"),
                 ("oci", "private_key"), ("vastai", "api_key"), ("ssh", "private_key"),
                 ("ssh", "bastion_private_key")}


async def _catalog(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    return await all_items(client, CATALOG)


async def test_the_seeds_nine_come_first_in_its_order_then_every_registered_cloud(
        client: httpx.AsyncClient) -> None:
    cards = await _catalog(client)
    assert [(c["key"], c["name"], c["tagline"]) for c in cards[:9]] == SEED_CARDS
    rest = [c["key"] for c in cards[9:]]
    seeded = {k for k, _, _ in SEED_CARDS}
    assert rest == [c for c in registry.known() if c not in seeded]  # every other cloud, the test's too
    assert {"lambda", "hyperstack", "digitalocean", "local", "fakecloud"} <= set(rest)
    by_key = {c["key"]: c for c in cards}
    assert by_key["lambda"]["name"] == "Lambda Cloud" and by_key["lambda"]["tagline"]  # Capabilities.tagline
    fake = by_key["fakecloud"]
    assert fake["available"] is True and fake["credentials"][0]["name"] == "api_key"
    for card in cards:
        assert card["how_to_connect"], card["key"]


async def test_every_seed_providers_form_matches_the_seeds_credential_table(
        client: httpx.AsyncClient) -> None:
    by_key = {c["key"]: c for c in await _catalog(client)}
    for key, fields in SEED_FIELDS.items():
        form = by_key[key]["credentials"]
        assert [(f["label"], f["kind"], f["required"], f["default"]) for f in form] == fields, key
        for f in form:
            assert f["secret"] is ((key, f["name"]) in SECRET_VALUED), (key, f["name"])
    # Generated from each adapter's typed credentials: field names are the models' (stored ones validate).
    for key in AVAILABLE:
        assert [f["name"] for f in by_key[key]["credentials"]] == list(
            registry.adapter_class(key).credentials_model.model_fields)


async def test_availability_billing_note_and_how_to_connect(client: httpx.AsyncClient) -> None:
    by_key = {c["key"]: c for c in await _catalog(client)}
    for key, _, _ in SEED_CARDS:
        card = by_key[key]
        assert card["available"] is (key in AVAILABLE), key
        assert (card["reason"] is None) is (key in AVAILABLE), key
        if key == "ssh":
            assert card["billed_note"] is False and card["billed_note_text"] is None
        else:
            assert card["billed_note"] is True and card["billed_note_text"] == BILLED
    assert "fleets" in by_key["ssh"]["reason"]
    # provider-specific: each says where its key is made
    assert "IAM" in by_key["aws"]["how_to_connect"] and "Create access key" in by_key["aws"]["how_to_connect"]
    assert "App registrations" in by_key["azure"]["how_to_connect"]
    assert "Service Accounts" in by_key["gcp"]["how_to_connect"]
    assert "API Keys" in by_key["runpod"]["how_to_connect"]
    assert "Community Cloud" in by_key["runpod"]["how_to_connect"]
    assert "AllowTcpForwarding" in by_key["ssh"]["how_to_connect"]


@pytest.mark.parametrize(("provider", "name"), [("ssh", "SSH / On-prem")])
async def test_connecting_a_listed_future_provider_is_422_not_supported_yet(
        client: httpx.AsyncClient, workflows: FakeWorkflows, provider: str, name: str) -> None:
    creds = {"private_key": "as-topsecret-2"}
    r = await client.post("/api/compute/connections", json={"provider": provider, "credentials": creds})
    assert r.status_code == 422, r.text
    assert f"{name} is not supported yet" in r.json()["detail"]
    assert "topsecret" not in r.text
    assert workflows.executes == []  # nothing verified, nothing stored
    assert (await client.get("/api/compute/connections")).json()["items"] == []
    # an unknown cloud is still an unknown cloud
    r = await client.post("/api/compute/connections", json={"provider": "nimbus", "credentials": {}})
    assert r.status_code == 422 and "unknown cloud" in r.json()["detail"]


async def test_secrets_are_never_echoed(client: httpx.AsyncClient) -> None:
    await connect_fake(client)  # a stored secret exists now
    r = await client.get(CATALOG, params={"limit": 200})
    assert r.status_code == 200 and GOOD_KEY not in r.text
    for card in r.json()["items"]:
        for f in card["credentials"]:
            if f["secret"]:
                assert f["default"] is None, (card["key"], f["name"])
    by_key = {c["key"]: c for c in r.json()["items"]}
    assert [f["kind"] for f in by_key["aws"]["credentials"]] == ["text", "secret"]


def test_gcp_project_id_is_filled_from_the_key_when_left_empty() -> None:
    key = json.dumps({"type": "service_account", "project_id": "my-proj-123", "client_email": "a@b.c",
                      "private_key": "-----BEGIN PRIVATE KEY-----\nx\n-----END PRIVATE KEY-----\n",
                      "private_key_id": "k1"})
    assert GcpCredentials.model_validate({"service_account_key": key}).project_id == "my-proj-123"
    empty = GcpCredentials.model_validate({"project_id": "", "service_account_key": key})
    assert empty.project_id == "my-proj-123"
    given = GcpCredentials.model_validate({"project_id": "other-proj", "service_account_key": key})
    assert given.project_id == "other-proj"


async def test_the_catalog_is_matched_before_any_providers_id_route(engine: Any, box: Any,
                                                                   workflows: FakeWorkflows) -> None:
    app = create_app(AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001",
                             workflows=workflows))
    # OpenAPI lists paths in the order the app matches them (included routers in inclusion order).
    paths = list(app.openapi()["paths"])
    catalog = paths.index(f"{API_PREFIX}/providers/catalog")
    shadowing = [i for i, p in enumerate(paths) if p.startswith(f"{API_PREFIX}/providers/{{")]
    assert all(catalog < i for i in shadowing), paths
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        r = await c.get(CATALOG)
    assert r.status_code == 200 and r.json()["items"][0]["key"] == "aws"


async def test_a_cloud_whose_adapter_cannot_load_is_listed_unavailable(
        client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    make_unloadable(monkeypatch, "aws", "boto3")
    cards = await _catalog(client)
    [aws] = [c for c in cards if c["key"] == "aws"]
    assert aws["available"] is False and "boto3" in aws["reason"] and aws["credentials"] == []
    assert [c["key"] for c in cards[:8]] == ["azure", "gcp", "runpod", "modal", "nebius", "oci", "vastai",
                                             "ssh"]


async def test_every_card_shows_its_support_status_from_the_acceptance_results(
        client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch) -> None:
    by_key = {c["key"]: c for c in await _catalog(client)}
    for key in registry.known():  # nothing has run: every cloud with an adapter is untested
        assert by_key[key]["support"] == {
            "status": "untested", "detail": support.status(key, []).detail,
            "adapter_version": support.adapter_version(key), "last_run_at": None}, key
    ssh = by_key["ssh"]["support"]  # listed, no adapter here
    assert ssh["status"] == "untested" and ssh["adapter_version"] is None
    # a recorded run shows: a simulated pass is `simulated`, never more
    run = support.AcceptanceResult(
        cloud="lambda", adapter_version=support.adapter_version("lambda"), account="simulated",
        started_at=datetime(2030, 1, 1, tzinfo=UTC),
        steps=[support.AcceptanceStep(name="connect", outcome="passed", seconds=1)])
    monkeypatch.setattr(support, "load", lambda *a: [run])
    lam = {c["key"]: c for c in await _catalog(client)}["lambda"]["support"]
    assert lam["status"] == "simulated" and lam["last_run_at"].startswith("2030-01-01T00:00:00")

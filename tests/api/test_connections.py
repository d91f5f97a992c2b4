from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sqlmodel import Session, select

from api.temporal import WorkflowFailed, WorkflowUnavailable
from messages import workflows as wf
from store import connections, instances
from store.models import Connection, Instance
from store.secrets import SecretBox
from tests.api.conftest import GOOD_KEY, FakeWorkflows, connect_fake

URL = "/api/compute/connections"


async def test_connect_verifies_and_never_returns_secrets(client: httpx.AsyncClient,
                                                          workflows: FakeWorkflows) -> None:
    created = await connect_fake(client)
    assert created["status"] == "connected" and created["account"] == "fake-account-7"
    assert created["name"] == "Fake Cloud" and created["provider"] == "fakecloud"
    [(name, arg, wf_id)] = workflows.executes
    assert name == wf.CONNECT.name and wf_id == f"connect-{created['id']}"
    # The credentials travel sealed: nothing in the workflow input is the key in clear.
    assert arg.connection_id == created["id"] and GOOD_KEY not in arg.model_dump_json()
    listed = await client.get(URL)
    assert listed.status_code == 200 and [c["id"] for c in listed.json()["items"]] == [created["id"]]
    for text in (str(created), listed.text):
        assert GOOD_KEY not in text and "credentials" not in text and "secret" not in text


async def test_bad_credentials_are_a_400_with_the_reason_and_nothing_is_saved(
        client: httpx.AsyncClient) -> None:
    r = await client.post(URL, json={"provider": "fakecloud", "credentials": {"api_key": "nope"}})
    assert r.status_code == 400
    assert "Fake Cloud refused the API key" in r.json()["detail"]
    assert (await client.get(URL)).json()["items"] == []


async def test_unknown_provider_and_missing_fields_fail_before_any_workflow(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    r = await client.post(URL, json={"provider": "nimbus", "credentials": {"api_key": "k"}})
    assert r.status_code == 422 and "unknown cloud 'nimbus'" in r.text and "fakecloud" in r.text
    r = await client.post(URL, json={"provider": "fakecloud", "credentials": {}})
    assert r.status_code == 422 and "api_key" in r.json()["detail"]
    r = await client.post(URL, json={"provider": "fakecloud", "credentials": {"api_key": "k"},
                                     "endpoint": "not a url"})
    assert r.status_code == 422
    assert workflows.executes == [] and (await client.get(URL)).json()["items"] == []


async def test_temporal_down_or_workflow_failure_leaves_nothing(client: httpx.AsyncClient,
                                                                workflows: FakeWorkflows) -> None:
    body = {"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY}}
    workflows.fail_with = WorkflowUnavailable("Temporal at x is not reachable")
    r = await client.post(URL, json=body)
    assert r.status_code == 503 and "not reachable" in r.json()["detail"]
    workflows.fail_with = WorkflowFailed("ConnectWorkflow did not finish within 60s", timed_out=True)
    r = await client.post(URL, json=body)
    assert r.status_code == 504 and "did not finish" in r.json()["detail"]
    assert (await client.get(URL)).json()["items"] == []


async def test_delete_starts_the_disconnect_workflow(client: httpx.AsyncClient,
                                                     workflows: FakeWorkflows) -> None:
    created = await connect_fake(client)
    r = await client.delete(f"{URL}/{created['id']}")
    assert r.status_code == 202 and r.json() == {"id": created["id"], "status": "removing"}
    again = await client.delete(f"{URL}/{created['id']}")  # a repeated request joins the running one
    assert again.status_code == 202
    assert [(s.workflow, s.arg.connection_id, s.workflow_id, s.use_existing)  # type: ignore[attr-defined]
            for s in workflows.starts] == [
        (wf.DISCONNECT.name, created["id"], f"disconnect-{created['id']}", True)] * 2
    r = await client.delete(f"{URL}/nosuch")
    assert r.status_code == 404 and "nosuch" in r.json()["detail"]


async def test_delete_when_temporal_is_down_is_a_503_and_keeps_the_connection(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    created = await connect_fake(client)
    workflows.fail_with = WorkflowUnavailable("Temporal at x is not reachable")
    r = await client.delete(f"{URL}/{created['id']}")
    assert r.status_code == 503
    workflows.fail_with = None
    assert [c["status"] for c in (await client.get(URL)).json()["items"]] == ["connected"]


# --------------------------------------------------------------------------- typed credentials

SECRET = "s3cr3t-value-never-echoed"


@pytest.mark.parametrize(("credentials", "named"), [
    ({"api_key": GOOD_KEY, "region": SECRET}, "region"),  # unknown field
    ({"api_kee": SECRET}, "api_key"),  # missing (and the typo named too)
    ({}, "api_key"),
    ({"api_key": ""}, "api_key"),
    ({"api_key": 12345678901}, "api_key"),  # wrong type
    ({"api_key": {"nested": SECRET}}, "api_key"),  # refused by the body schema itself
    ({"api_key": [SECRET]}, "api_key"),
])
async def test_credentials_are_validated_by_the_clouds_model_before_anything_is_stored(
        client: httpx.AsyncClient, workflows: FakeWorkflows, engine: sa.Engine, credentials: dict[str, Any],
        named: str) -> None:
    r = await client.post(URL, json={"provider": "fakecloud", "credentials": credentials})
    assert r.status_code == 422, r.text
    assert named in r.text
    for value in (SECRET, GOOD_KEY, "12345678901"):
        assert value not in r.text
    assert workflows.executes == []
    with Session(engine) as s:
        assert s.exec(select(Connection)).all() == []


async def test_credentials_are_stored_as_the_model_normalises_them(client: httpx.AsyncClient,
                                                                   engine: sa.Engine, box: SecretBox) -> None:
    r = await client.post(URL, json={"provider": "fakecloud", "credentials": {"api_key": f"  {GOOD_KEY}\n"}})
    assert r.status_code == 201, r.text
    with Session(engine) as s:
        row = s.get(Connection, r.json()["id"])
        assert row is not None and GOOD_KEY.encode() not in row.secret
        assert connections.credentials_of(box, row) == {"api_key": GOOD_KEY}


def pem_certificate() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "private-ca.test")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + timedelta(days=1)).sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM).decode()


async def test_endpoint_and_ca_bundle_are_stored_with_the_connection(
        client: httpx.AsyncClient, workflows: FakeWorkflows, engine: sa.Engine) -> None:
    pem = pem_certificate()
    r = await client.post(URL, json={"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY},
                                     "endpoint": "https://fake.example/v1", "ca_bundle": pem})
    assert r.status_code == 201, r.text
    [(_, arg, _)] = workflows.executes
    options = arg.options  # type: ignore[attr-defined]
    assert options.endpoint == "https://fake.example/v1" and options.ca_bundle == pem
    with Session(engine) as s:
        row = s.get(Connection, r.json()["id"])
        assert row is not None and (row.endpoint, row.ca_bundle) == ("https://fake.example/v1", pem)
    assert r.json()["endpoint"] == "https://fake.example/v1" and r.json()["has_ca_bundle"]


@pytest.mark.parametrize("ca_bundle", ["", "not a certificate", "-----BEGIN CERTIFICATE-----\nAAAA\n"
                                       "-----END CERTIFICATE-----\n", "x" * 64_001])
async def test_a_bad_ca_bundle_is_a_422_naming_it(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                 ca_bundle: str) -> None:
    r = await client.post(URL, json={"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY},
                                     "ca_bundle": ca_bundle})
    assert r.status_code == 422 and "ca_bundle" in r.text, r.text
    assert workflows.executes == []


# --------------------------------------------------------------------------- reads do not write


async def test_listing_connections_writes_nothing(client: httpx.AsyncClient, workflows: FakeWorkflows,
                                                  engine: sa.Engine) -> None:
    conn = await connect_fake(client)
    with Session(engine) as s:
        s.add(Instance(id="live1", provider="fakecloud", connection_id=conn["id"], workflow_id="w",
                       status="ready"))
        s.commit()
    with Session(engine) as s:  # being removed, its instance gone: what the old GET purged
        connections.mark_connection(s, conn["id"], status="removing")
        instances.update_instance(s, "live1", status="terminated")
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement.split(None, 1)[0].upper())

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        r = await client.get(URL)
        r2 = await client.get(URL, params={"limit": 1})
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    assert r.status_code == r2.status_code == 200
    assert statements and set(statements) == {"SELECT"}, statements
    assert [c["status"] for c in r.json()["items"]] == ["removing"]

"""Connection endpoints: https on the cloud's documented hosts, or under a prefix the administrator
allows — checked by the API before anything starts, and again wherever an adapter is built from a
stored connection (a row from before the rule, or a prefix since removed)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.exceptions import ApplicationError

from activities.connections import ConnectionActivities
from activities.deps import ActivityDeps
from api.deps import AppDeps
from messages.connection import ConnectRequest
from messages.enums import ErrorKind
from providers import endpoints, registry
from providers.base import ConnectionOptions, InvalidRequest
from providers.lambda_ import LambdaProvider
from providers.local import LocalProvider
from settings import Settings
from store import connections
from store.models import Connection
from store.secrets import SecretBox
from tests.api.conftest import GOOD_KEY, TOKEN, FakeCloud, FakeWorkflows, app_serving

URL = "/api/compute/connections"
SIM = "http://127.0.0.1:8765/fake/v1"  # what `make run` would allow for a simulated fakecloud
API_PORT = "http://127.0.0.1:8000/api/compute"  # the API itself, also on loopback


@pytest.fixture
async def admin_client(engine: sa.Engine, box: SecretBox,
                       workflows: FakeWorkflows) -> AsyncIterator[httpx.AsyncClient]:
    """The app with one allowed prefix (GPUPROV_ALLOWED_ENDPOINTS=SIM), like `make run`'s."""
    deps = AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001", workflows=workflows,
                   allowed_endpoints=(SIM,))
    workflows.allowed_endpoints = deps.allowed_endpoints
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app_serving(deps)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def connect(endpoint: str, provider: str = "fakecloud") -> dict[str, object]:
    return {"provider": provider, "credentials": {"api_key": GOOD_KEY}, "endpoint": endpoint}


@pytest.mark.parametrize("endpoint", [
    "https://fake.example/v1",  # a documented host
    "https://FAKE.example./v1/",  # the same, spelled otherwise
    SIM, SIM + "/", SIM + "/sub",  # under the allowed prefix
])
async def test_documented_hosts_and_allowed_prefixes_connect(admin_client: httpx.AsyncClient,
                                                             endpoint: str) -> None:
    r = await admin_client.post(URL, json=connect(endpoint))
    assert r.status_code == 201, r.text


@pytest.mark.parametrize(("endpoint", "reason"), [
    ("https://evil.example/v1", "endpoint is not allowed for Fake Cloud"),  # a foreign host
    (API_PORT, "endpoint is not allowed"),  # loopback, but not an allowed prefix: the API's own port
    ("http://127.0.0.1:7233/", "endpoint is not allowed"),  # Temporal's
    ("http://127.0.0.1:8765/other/v1", "endpoint is not allowed"),  # the allowed port, another path
    ("http://127.0.0.1:8765/fake/v1x", "endpoint is not allowed"),  # not a whole segment
    ("http://localhost:8765/fake/v1", "endpoint is not allowed"),  # another host spelling
    ("https://127.0.0.1:8765/fake/v1", "endpoint is not allowed"),  # another scheme
    ("http://fake.example/v1", "endpoint is not allowed"),  # a documented host over http
    ("https://fake.example:8443/v1", "endpoint is not allowed"),  # ... or on another port
    ("https://fake.example.evil.example/v1", "endpoint is not allowed"),
    (SIM + "/../../admin", "may not contain '.', '..' or percent-encoded path segments"),
    (SIM + "/%2e%2e/admin", "may not contain '.', '..' or percent-encoded path segments"),
    ("https://admin:s3cretpass@fake.example/v1", "may not contain a user name or password"),
    ("https://s3cretpass@fake.example/v1", "may not contain a user name or password"),
    ("https://fake.example/v1?token=s3cretpass", "may not have a query"),
    ("https://fake.example/v1#s3cretpass", "may not have a query"),
    ("ftp://fake.example/v1", "must start with https://"),
    ("https://fake.example/v1\n", "without spaces or control characters"),
    ("not a url", "without spaces or control characters"),
    ("https://fake.example:99999/", "not a valid URL"),
])
async def test_other_endpoints_are_a_422_naming_the_field_before_any_workflow(
        admin_client: httpx.AsyncClient, workflows: FakeWorkflows, endpoint: str, reason: str) -> None:
    r = await admin_client.post(URL, json=connect(endpoint))
    assert r.status_code == 422, r.text
    [error] = r.json()["errors"]
    assert error["loc"] == ["body", "endpoint"] and reason in error["msg"], error
    assert "s3cretpass" not in r.text and "admin:" not in r.text and "/admin" not in r.text
    assert workflows.executes == [] and (await admin_client.get(URL)).json()["items"] == []


async def test_the_refusal_lists_the_clouds_documented_hosts(admin_client: httpx.AsyncClient) -> None:
    r = await admin_client.post(URL, json=connect("https://api.evil.example/api/v1", provider="lambda"))
    assert r.status_code == 422
    msg = r.json()["errors"][0]["msg"]
    assert "https://cloud.lambda.ai, https://cloud.lambdalabs.com" in msg
    assert "GPUPROV_ALLOWED_ENDPOINTS (1 prefix(es) the administrator allows)" in msg
    assert "evil" not in msg
    r = await admin_client.post(URL, json=connect(API_PORT, provider="local"))
    assert r.status_code == 422 and "none (it has no public API)" in r.text


def test_the_rules_directly() -> None:
    endpoints.check(LambdaProvider, "https://cloud.lambda.ai/api/v1", ())
    endpoints.check(LambdaProvider, "https://cloud.lambdalabs.com/api/v1", ())
    endpoints.check(LambdaProvider, None, ())  # the adapter's own default
    for bad in ("http://cloud.lambda.ai/api/v1", "https://cloud.lambda.ai.evil.example/api/v1",
                "https://169.254.169.254/latest/meta-data"):
        with pytest.raises(InvalidRequest, match="endpoint is not allowed for Lambda Cloud"):
            endpoints.check(LambdaProvider, bad, ())
    endpoints.check(LocalProvider, "http://[::1]:8765/local/v1/x", ("http://[::1]:8765/local/v1",))
    with pytest.raises(InvalidRequest):
        endpoints.check(LocalProvider, "http://[::1]:8000/local/v1", ("http://[::1]:8765/local/v1",))


def test_the_setting_is_parsed_and_normalised_and_a_bad_entry_stops_the_process() -> None:
    s = Settings(allowed_endpoints=" http://127.0.0.1:8765/lambda/api/v1/ , HTTPS://Proxy.internal:443/x ,")
    assert s.allowed_endpoint_prefixes() == ("http://127.0.0.1:8765/lambda/api/v1", "https://proxy.internal/x")
    assert Settings().allowed_endpoint_prefixes() == ()
    for bad in ("http://u:p@127.0.0.1:8765/x", "http://127.0.0.1:8765/x?a=1", "127.0.0.1:8765"):
        with pytest.raises(ValueError, match="GPUPROV_ALLOWED_ENDPOINTS: an entry") as e:
            Settings(allowed_endpoints=bad).allowed_endpoint_prefixes()
        assert "u:p" not in str(e.value)


# --------------------------------------------------------------------------- defence in depth


def stored(engine: sa.Engine, box: SecretBox, endpoint: str) -> Connection:
    """A connection saved before the rule existed (or under a prefix since removed)."""
    with Session(engine, expire_on_commit=False) as s:
        return connections.add_connection(s, box, provider="fakecloud", name="old",
                                          credentials={"api_key": GOOD_KEY}, endpoint=endpoint)


def test_the_worker_refuses_to_build_an_adapter_for_a_stored_foreign_endpoint(
        engine: sa.Engine, box: SecretBox) -> None:
    deps = ActivityDeps(engine=engine, box=box, installation_id="inst0001")
    with pytest.raises(ApplicationError) as e:
        deps._build(stored(engine, box, API_PORT))
    assert e.value.type == ErrorKind.INVALID_REQUEST and e.value.non_retryable
    assert "endpoint is not allowed for Fake Cloud" in e.value.message
    # Allowed while the setting names it; refused once the administrator removes it.
    row = stored(engine, box, SIM)
    assert isinstance(ActivityDeps(engine=engine, box=box, installation_id="i", allowed_endpoints=[SIM])
                      ._build(row), FakeCloud)
    with pytest.raises(ApplicationError, match="endpoint is not allowed"):
        deps._build(row)


async def test_the_verify_activity_refuses_a_foreign_endpoint_without_calling_it(
        engine: sa.Engine, box: SecretBox) -> None:
    acts = ConnectionActivities(ActivityDeps(engine=engine, box=box, installation_id="inst0001"))
    req = ConnectRequest(connection_id="c1", provider="fakecloud", name="n",
                         sealed_credentials=box.seal({"api_key": GOOD_KEY}).decode(),
                         options=ConnectionOptions(endpoint=API_PORT))
    result = await acts.verify_credentials(req)
    assert not result.ok and result.reason is not None and "endpoint is not allowed" in result.reason


async def test_the_offers_route_refuses_a_stored_foreign_endpoint(
        client: httpx.AsyncClient, engine: sa.Engine, box: SecretBox) -> None:
    stored(engine, box, "https://evil.example/v1")
    r = await client.get("/api/compute/backends/fakecloud/offers")
    assert r.status_code == 422 and "endpoint is not allowed for Fake Cloud" in r.text, r.text


def test_every_adapter_declares_its_api_hosts_as_bare_lower_case_names() -> None:
    for cloud in registry.known():
        hosts = registry.adapter_class(cloud).api_hosts
        assert isinstance(hosts, tuple)
        for host in hosts:
            assert host == host.lower().strip(".") and "/" not in host and ":" not in host, (cloud, host)
            assert endpoints.parse(f"https://{host}/").host == host

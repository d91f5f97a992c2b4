"""Contract v2's shared plumbing, each piece on its own: typed credentials, header-key and OAuth2
auth, GraphQL errors inside a 200, the SDK base's thread pool and error table, `prepare`, CA bundles.
The adapters in these tests are fakes defined here (FakeRest*/FakeSdk*), labelled as such."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, ClassVar

import httpx
import pytest
from pydantic import SecretStr

from providers import registry, rest
from providers.auth import HeaderKeyAuth, OAuth2ClientCredentials
from providers.base import (
    AuthError,
    Capabilities,
    CapacityError,
    ConnectionOptions,
    InstanceRef,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    QuotaError,
    RateLimited,
    Transient,
)
from providers.credentials import ApiKeyCredentials, Credentials, field
from providers.sdk import SdkCloudProvider, SdkError


class _Unimplemented:
    """The primitives these fakes do not exercise."""

    async def offers(self, query: OfferQuery) -> list[Offer]:
        raise NotImplementedError

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        raise NotImplementedError

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        raise NotImplementedError

    async def terminate(self, ref: InstanceRef) -> None:
        raise NotImplementedError

    async def list_owned(self) -> list[InstanceRef]:
        raise NotImplementedError


class OAuthCredentials(Credentials):
    client_id: str = field("Client ID", min_length=1)
    client_secret: SecretStr = field("Client secret", "secret", min_length=1)
    community: bool = field("Include community cloud", "toggle", default=False)


class FakeRestOAuthProvider(_Unimplemented, rest.RestCloudProvider):
    id: ClassVar[str] = "fake-oauth"
    default_endpoint: ClassVar[str] = "https://api.fake-oauth.test/v1"
    credentials_model: ClassVar[type[Credentials]] = OAuthCredentials
    capabilities: ClassVar[Capabilities] = Capabilities(display_name="Fake OAuth cloud")
    error_codes: ClassVar[dict[str, rest.ErrorKind]] = {"NO_CAPACITY": "capacity"}

    def auth(self) -> httpx.Auth:
        creds = self.credentials.reveal()
        return OAuth2ClientCredentials(f"{self.endpoint}/oauth2/token", lambda: creds["client_id"],
                                       lambda: creds["client_secret"])

    async def verify(self) -> str:
        body = self._json(await self._call("GET", "/me"))
        return str(body["account"])

    async def gpu_types(self) -> Any:
        return await self._graphql("/graphql", "query { gpuTypes { id } }", scope="fake-oauth/r1")


class FakeTokenServer:
    """Issues tokens that expire after `ttl` seconds; /me answers 401 to an unknown token."""

    def __init__(self, ttl: float = 3600) -> None:
        self.ttl, self.issued, self.valid = ttl, 0, set[str]()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/oauth2/token"):
            form = dict(x.split("=") for x in request.content.decode().split("&"))
            if form.get("client_secret") != "s3cret":
                return httpx.Response(401, json={"error": "invalid_client",
                                                 "error_description": "bad secret"})
            self.issued += 1
            token = f"t{self.issued}"
            self.valid.add(token)
            return httpx.Response(200, json={"access_token": token, "expires_in": self.ttl})
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if token not in self.valid:
            return httpx.Response(401, json={"error": {"code": "unauthorized", "message": "token"}})
        if request.url.path.endswith("/graphql"):
            return httpx.Response(200, json={"data": None, "errors": [
                {"message": "no capacity in r1", "extensions": {"code": "NO_CAPACITY"}}]})
        return httpx.Response(200, json={"account": "acme"})


def oauth_provider(server: FakeTokenServer, secret: str = "s3cret") -> FakeRestOAuthProvider:
    creds = FakeRestOAuthProvider.parse_credentials({"client_id": "c", "client_secret": secret})
    p = FakeRestOAuthProvider(creds, installation_id="inst0001")
    p._transport = httpx.MockTransport(server)
    return p


async def test_oauth2_fetches_once_reuses_and_refreshes_on_401() -> None:
    server = FakeTokenServer()
    p = oauth_provider(server)
    assert await asyncio.gather(*(p.verify() for _ in range(5))) == ["acme"] * 5
    assert server.issued == 1  # concurrent requests shared one token fetch
    server.valid.clear()  # the cloud revoked it early
    assert await p.verify() == "acme" and server.issued == 2
    await p.aclose()


async def test_oauth2_refreshes_an_expired_token_before_sending() -> None:
    server = FakeTokenServer(ttl=31)  # expires 1 s after issue, given the 30 s margin
    p = oauth_provider(server)
    await p.verify()
    auth = p._http().auth
    assert isinstance(auth, OAuth2ClientCredentials)
    auth._expires_at = time.monotonic() - 1  # as if the clock had moved on
    await p.verify()
    assert server.issued == 2
    await p.aclose()


async def test_oauth2_refused_client_is_an_auth_error_without_the_secret() -> None:
    p = oauth_provider(FakeTokenServer(), secret="wrong-secret-value")
    with pytest.raises(AuthError, match="bad secret") as exc:
        await p.verify()
    assert "wrong-secret-value" not in str(exc.value)
    await p.aclose()


async def test_graphql_errors_inside_a_200_map_to_the_taxonomy() -> None:
    p = oauth_provider(FakeTokenServer())
    with pytest.raises(CapacityError) as exc:
        await p.gpu_types()
    assert str(exc.value.scope) == "fake-oauth/r1" and "no capacity in r1" in exc.value.message
    await p.aclose()


async def test_header_key_auth_sends_the_key_in_the_clouds_header() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    async with rest.make_client("https://x.test", auth=HeaderKeyAuth("api_key", lambda: "k1"),
                                transport=httpx.MockTransport(handler)) as c:
        await c.get("/a")
    assert seen[0].headers["api_key"] == "k1" and "Authorization" not in seen[0].headers


def test_typed_credentials_refuse_unknown_and_missing_fields_naming_only_the_field() -> None:
    with pytest.raises(InvalidRequest) as exc:
        FakeRestOAuthProvider.parse_credentials({"client_id": "c", "client_secret": "topsecret",
                                                 "regoin": "x"})
    assert "regoin" in exc.value.message and "topsecret" not in exc.value.message
    with pytest.raises(InvalidRequest, match="client_secret"):
        FakeRestOAuthProvider.parse_credentials({"client_id": "c"})
    creds = FakeRestOAuthProvider.parse_credentials({"client_id": "c", "client_secret": "topsecret"})
    assert "topsecret" not in repr(creds) and creds.reveal()["client_secret"] == "topsecret"


def test_the_credential_form_comes_from_the_model() -> None:
    form = {f["name"]: f for f in OAuthCredentials.form()}
    assert form["client_secret"]["kind"] == "secret" and form["client_secret"]["required"]
    assert form["community"] == {"name": "community", "label": "Include community cloud", "kind": "toggle",
                                 "required": False, "default": False, "help": None}
    assert [f["name"] for f in ApiKeyCredentials.form()] == ["api_key"]


def test_every_registered_adapter_declares_typed_credentials() -> None:
    for cloud in registry.known():
        cls = registry.adapter_class(cloud)
        assert issubclass(cls.credentials_model, Credentials), cloud
        assert cls.credentials_model.model_config.get("extra") == "forbid", cloud


# --------------------------------------------------------------------------- the SDK base


class FakeSdkFault(Exception):
    def __init__(self, code: str, status: int, message: str = "sdk says no") -> None:
        super().__init__(message)
        self.code, self.status = code, status


class FakeSdkProvider(_Unimplemented, SdkCloudProvider):
    """Stands for boto3/google/azure adapters: a blocking client, errors read off its exceptions."""

    id: ClassVar[str] = "fake-sdk"
    credentials_model: ClassVar[type[Credentials]] = ApiKeyCredentials
    capabilities: ClassVar[Capabilities] = Capabilities(display_name="Fake SDK cloud")
    error_codes: ClassVar[dict[str, rest.ErrorKind]] = {
        "InsufficientInstanceCapacity": "capacity", "VcpuLimitExceeded": "quota",
        "RequestLimitExceeded": "rate_limit"}
    prepared: ClassVar[list[str]] = []

    def sdk_error(self, exc: Exception) -> SdkError | None:
        if isinstance(exc, FakeSdkFault):
            return SdkError(exc.code, str(exc), exc.status, retry_after="4")
        return None

    def blocking_call(self, seconds: float, fault: FakeSdkFault | None = None) -> str:
        time.sleep(seconds)  # a blocking SDK: must not run on the event loop
        if fault is not None:
            raise fault
        return threading.current_thread().name

    async def verify(self) -> str:
        return await self._sdk(self.blocking_call, 0.0)

    async def prepare(self, region: str) -> None:
        if region not in self.prepared:  # idempotent: once per region however often called
            self.prepared.append(region)


def sdk_provider() -> FakeSdkProvider:
    return FakeSdkProvider(ApiKeyCredentials(api_key=SecretStr("k")), installation_id="inst0001")


async def test_sdk_calls_run_off_the_event_loop() -> None:
    p = sdk_provider()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    thread = await p._sdk(p.blocking_call, 0.3)
    task.cancel()
    assert thread.startswith("gpuprov-sdk") and ticks > 3  # the loop kept running meanwhile


@pytest.mark.parametrize(("fault", "kind"), [
    (FakeSdkFault("InsufficientInstanceCapacity", 500), CapacityError),  # the code wins over 500
    (FakeSdkFault("VcpuLimitExceeded", 400), QuotaError),
    (FakeSdkFault("RequestLimitExceeded", 503), RateLimited),
    (FakeSdkFault("AuthFailure", 401), AuthError),
    (FakeSdkFault("InvalidParameterValue", 400), InvalidRequest),
    (FakeSdkFault("InternalError", 500), Transient),
])
async def test_sdk_errors_map_by_table(fault: FakeSdkFault, kind: type[Exception]) -> None:
    p = sdk_provider()
    with pytest.raises(kind) as exc:
        await p._sdk(p.blocking_call, 0.0, fault, scope="fake-sdk/r1/z1")
    if isinstance(exc.value, CapacityError | QuotaError):
        assert str(exc.value.scope) == "fake-sdk/r1/z1"
    if isinstance(exc.value, RateLimited):
        assert exc.value.retry_after == 4


async def test_an_exception_that_is_not_the_clouds_answer_is_transient() -> None:
    p = sdk_provider()

    def boom() -> None:
        raise ConnectionResetError("peer reset")

    with pytest.raises(Transient, match="ConnectionResetError"):
        await p._sdk(boom)


async def test_prepare_is_idempotent_per_region() -> None:
    p = sdk_provider()
    FakeSdkProvider.prepared.clear()
    for _ in range(3):
        await p.prepare("r1")
    await p.prepare("r2")
    assert FakeSdkProvider.prepared == ["r1", "r2"]


# --------------------------------------------------------------------------- connection options


def test_tls_contexts_are_shared_and_a_ca_bundle_is_validated() -> None:
    assert rest.ssl_context() is rest.ssl_context()
    with pytest.raises(InvalidRequest, match="CA bundle"):
        rest.ssl_context("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")


def test_the_endpoint_override_wins_over_the_default() -> None:
    creds = FakeRestOAuthProvider.parse_credentials({"client_id": "c", "client_secret": "s"})
    assert FakeRestOAuthProvider(creds, installation_id="i").endpoint == "https://api.fake-oauth.test/v1"
    p = FakeRestOAuthProvider(creds, options=ConnectionOptions(endpoint="http://127.0.0.1:9/x/"),
                              installation_id="i")
    assert p.endpoint == "http://127.0.0.1:9/x"
    assert json.loads(ConnectionOptions(endpoint="http://e").model_dump_json())["ca_bundle"] is None

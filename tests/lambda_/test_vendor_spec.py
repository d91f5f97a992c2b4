"""Lambda's official OpenAPI 1.10 (tests/specs/lambda) as the oracle: every request the adapter sends
and every answer the simulation gives, through a lifecycle and every mapped refusal, is what the spec
documents; and the oracle is shown to catch a request or an answer that departs from it."""

from __future__ import annotations

import json

import pytest

from fakeclouds.server import FakeCloudServer
from providers.base import CloudProvider, ConnectionOptions, Offer
from providers.lambda_ import LambdaProvider
from tests import simclouds
from tests.lambda_.conftest import adapter, offer, spec
from tests.specs import drive
from tests.specs.oracle import SpecOracle

# The spec documents rate limits and the error envelope for every call in info.description ("Error
# responses": {"error": {code, message, suggestion?}}; a "provider/" code for an upstream's outage),
# not per operation; its ApiErrorInternal is the envelope of an internal error.
ENVELOPE = {"type": "object", "required": ["error"], "additionalProperties": False, "properties": {
    "error": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"}, "suggestion": {"type": "string"}}}}}
INTERNAL = {"type": "object", "required": ["error"], "additionalProperties": False,
            "properties": {"error": {"$ref": "#/components/schemas/ApiErrorInternal"}}}
ORACLE = SpecOracle("lambda", prefix="/api/v1",  # the adapter's endpoint ends in /api/v1
                    general={429: ENVELOPE, 500: INTERNAL, 502: ENVELOPE, 503: ENVELOPE})


@pytest.fixture
def cloud(sim: FakeCloudServer) -> drive.Cloud:
    sim.admin.configure(time_scale=0)  # no rate limits: the refusals under test are injected ones

    def make(token: str | None) -> CloudProvider:
        if token is None:
            return adapter(sim)
        creds = LambdaProvider.parse_credentials(simclouds.credentials(sim, "lambda", token))
        return LambdaProvider(creds, options=ConnectionOptions(endpoint=simclouds.endpoint(sim, "lambda")),
                              installation_id="badtoken")

    async def an_offer(p: CloudProvider) -> Offer:
        assert isinstance(p, LambdaProvider)
        return await offer(p)

    return drive.Cloud("lambda", sim, make, an_offer, spec)


async def test_lifecycle_conforms(cloud: drive.Cloud) -> None:
    rec = await drive.lifecycle(cloud)
    assert {"POST /instance-operations/launch", "POST /firewall-rulesets", "GET /instances/{id}"} <= \
        ORACLE.templates(rec), "the sequence covers the launch, its ruleset and a get"
    assert ORACLE.check(rec) == []


async def test_refusals_conform(cloud: drive.Cloud) -> None:
    rec = await drive.refusals(cloud)
    assert {e.status for e in rec.seen} >= {400, 401, 429, 500, 503}
    assert ORACLE.check(rec) == []



# ------------------------------------------------------------------ the oracle catches deviations



async def test_a_launch_without_its_region_is_caught(cloud: drive.Cloud) -> None:
    launch = (await drive.one_create(cloud)).find("POST", "/instance-operations/launch", 200)
    assert ORACLE.problems(launch) == []
    body = launch.json()
    del body["region_name"]  # required by LaunchInstanceRequest
    launch.body = json.dumps(body).encode()
    assert any("'region_name' is a required property" in p for p in ORACLE.request_problems(launch))


async def test_an_error_body_of_the_wrong_shape_is_caught(cloud: drive.Cloud) -> None:
    refused = (await drive.one_create(cloud, "capacity")).find("POST", "/instance-operations/launch", 400)
    assert ORACLE.problems(refused) == []
    refused.answer = json.dumps({"detail": "insufficient capacity"}).encode()  # FastAPI's, not Lambda's
    assert any("'error' is a required property" in p for p in ORACLE.answer_problems(refused))

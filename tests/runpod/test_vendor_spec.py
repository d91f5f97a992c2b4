"""RunPod's official REST v2 OpenAPI (tests/specs/runpod) as the oracle: every request the adapter sends
and every answer the simulation gives, through a lifecycle and every mapped refusal, is what the spec
documents; and the oracle is shown to catch a request or an answer that departs from it."""

from __future__ import annotations

import json

from fakeclouds.server import FakeCloudServer
from providers.base import CloudProvider, Offer, OfferQuery
from tests.runpod.conftest import adapter, spec
from tests.specs import drive
from tests.specs.oracle import SpecOracle

ORACLE = SpecOracle("runpod", prefix="/v2")  # the adapter's endpoint ends in /v2
A4000 = "1x NVIDIA RTX A4000"
CAPACITY_STATUS = 400  # the simulation refuses a launch without stock as 400 problem+json


def cloud_of(sim: FakeCloudServer) -> drive.Cloud:
    async def an_offer(p: CloudProvider) -> Offer:
        return next(o for o in await p.offers(OfferQuery()) if o.instance_type == A4000)

    # RunPod maps a pod's ports to random public ones: the adapter opens none (capabilities.ports False)
    return drive.Cloud("runpod", sim, lambda token: adapter(sim, token=token), an_offer, spec, ports=())


async def test_lifecycle_conforms(sim: FakeCloudServer) -> None:
    rec = await drive.lifecycle(cloud_of(sim))
    assert {"POST /pods", "GET /pods/{id}", "DELETE /pods/{id}"} <= ORACLE.templates(rec)
    assert ORACLE.check(rec) == []


async def test_refusals_conform(sim: FakeCloudServer) -> None:
    rec = await drive.refusals(cloud_of(sim))
    assert {e.status for e in rec.seen} >= {401, 429, 500, 503}
    assert ORACLE.check(rec) == []




async def test_a_pod_without_its_name_is_caught(sim: FakeCloudServer) -> None:
    create = (await drive.one_create(cloud_of(sim))).find("POST", "/pods", 201)
    assert ORACLE.problems(create) == []
    body = create.json()
    del body["name"]  # CreatePodRequest requires it
    create.body = json.dumps(body).encode()
    assert any("'name' is a required property" in p for p in ORACLE.request_problems(create))


async def test_an_error_body_of_the_wrong_shape_is_caught(sim: FakeCloudServer) -> None:
    refused = (await drive.one_create(cloud_of(sim), "capacity")).find("POST", "/pods", CAPACITY_STATUS)
    assert ORACLE.problems(refused) == []
    problem = refused.answer_json()
    del problem["title"]
    refused.answer = json.dumps({"detail": [problem]}).encode()  # FastAPI's shape, not RFC 9457's
    assert [p for p in ORACLE.answer_problems(refused) if "answer body" in p]

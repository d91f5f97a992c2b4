"""Prime Intellect's FastAPI-generated compute and platform specs (tests/specs/primeintellect, mirrored
by api-evangelist from the vendor's own OpenAPI) as the oracle: every request the adapter sends and
every answer the simulation gives, through a lifecycle and every mapped refusal, is what the spec
documents; and the oracle is shown to catch a request or an answer that departs from it."""

from __future__ import annotations

import json

import httpx

from fakeclouds.server import FakeCloudServer
from providers.base import CloudProvider, Offer
from providers.primeintellect import detail_of
from tests.primeintellect.conftest import adapter, offer_of, spec
from tests.specs import drive
from tests.specs.oracle import Exchange, SpecOracle

# The FastAPI-generated spec documents 200/401/422 only. The refusals a client meets besides are FastAPI's
# HTTPException body {"detail": "..."} [sdk: the official CLI reads `detail`; SkyPilot classifies capacity
# by its words]: 400 (out of stock), 402 (payment), 429, 5xx.
DETAIL = {"type": "object", "required": ["detail"], "properties": {"detail": {"type": "string"}}}
ORACLE = SpecOracle("primeintellect", prefix="/api/v1",  # the adapter's endpoint ends in /api/v1
                    general={s: DETAIL for s in (400, 402, 404, 429, 500, 502, 503, 504)})


def cloud_of(sim: FakeCloudServer) -> drive.Cloud:
    async def an_offer(p: CloudProvider) -> Offer:
        return await offer_of(p)

    # Prime Intellect pods have no firewall the API opens: the adapter opens no ports
    return drive.Cloud("primeintellect", sim, lambda token: adapter(sim, token=token), an_offer, spec,
                       ports=())


async def test_lifecycle_conforms(sim: FakeCloudServer) -> None:
    rec = await drive.lifecycle(cloud_of(sim))
    assert {"POST /pods/", "GET /pods/status", "DELETE /pods/{pod_id}", "POST /ssh_keys/"} <= \
        ORACLE.templates(rec)
    assert ORACLE.check(rec) == []


async def test_refusals_conform(sim: FakeCloudServer) -> None:
    rec = await drive.refusals(cloud_of(sim))
    assert {e.status for e in rec.seen} >= {401, 429, 500, 503}
    assert ORACLE.check(rec) == []


async def test_a_pod_of_a_gpu_type_outside_the_enum_is_caught(sim: FakeCloudServer) -> None:
    create = (await drive.one_create(cloud_of(sim))).find("POST", "/pods/", 200)
    assert ORACLE.problems(create) == []
    body = create.json()
    assert body["pod"]["gpuType"] == "A6000_48GB"
    body["pod"]["gpuType"] = "RTXA6000_48GB"  # the simulation's spelling before: not in GPUType
    create.body = json.dumps(body).encode()
    assert any("/pod/gpuType: 'RTXA6000_48GB' is not one of" in p for p in ORACLE.request_problems(create))


async def test_a_delete_answering_ok_is_caught(sim: FakeCloudServer) -> None:
    delete = next(e for e in (await drive.one_create(cloud_of(sim))).seen if e.method == "DELETE")
    assert delete.status == 200 and ORACLE.problems(delete) == []
    delete.answer = json.dumps({"status": "ok", "podId": "x"}).encode()  # what the simulation answered before
    assert any("/status: 'ok' is not one of" in p for p in ORACLE.answer_problems(delete))


async def test_a_422_is_the_specs_error_response_and_fastapis_is_caught(api: httpx.AsyncClient) -> None:
    r = await api.post("/pods/", json={"pod": {"name": "x", "gpuType": "A100_80GB"},
                                       "provider": {"type": "tensordock"}})
    refused = Exchange.of(r, base=api.base_url.path)
    assert r.status_code == 422 and ORACLE.answer_problems(refused) == []
    assert detail_of(r) == ("body.pod.cloudId: Field required", True), "the adapter quotes the spec's shape"
    refused.answer = json.dumps({"detail": [{"loc": ["body", "pod", "cloudId"], "msg": "Field required",
                                             "type": "missing"}]}).encode()  # FastAPI's default
    assert any("'errors' is a required property" in p for p in ORACLE.answer_problems(refused))


async def test_ssh_key_items_without_user_fields_are_caught(sim: FakeCloudServer) -> None:
    await drive.one_create(cloud_of(sim))  # registers the installation's key
    keys = (await drive.one_create(cloud_of(sim))).find("GET", "/ssh_keys/", 200)  # and lists it
    body = keys.answer_json()
    assert body["data"] and ORACLE.answer_problems(keys) == []
    for k in body["data"]:
        del k["userId"], k["isUserKey"]  # what the simulation answered before
    keys.answer = json.dumps(body).encode()
    problems = ORACLE.answer_problems(keys)
    assert any("'userId' is a required property" in p for p in problems)
    assert any("'isUserKey' is a required property" in p for p in problems)

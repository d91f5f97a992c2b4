"""Verda's API as an UNOFFICIAL reconstruction describes it (tests/specs/verda: api-evangelist's; Verda,
formerly DataCrunch, publishes no OpenAPI description), cross-checked against Verda's official Python SDK
(verda-cloud/sdk-python @ 164e09ac, 2026-04-17; "sdk:" below, paths and lines at that commit) and
amended where the SDK shows the API differs, as the oracle: every request the adapter sends and every
answer the simulation gives, through a lifecycle, a token refresh, a leftover volume's release and
every mapped refusal, is what the amended spec documents; and the oracle is shown to catch a request
or an answer that departs from it."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

from fakeclouds import verda_api
from fakeclouds.server import FakeCloudServer
from providers.base import AuthError, CloudProvider, InstanceState, InstanceStatus, Offer, OfferQuery
from providers.verda import VerdaProvider
from tests.eventually import eventually
from tests.fakeclouds.helpers import WITHIN
from tests.specs import drive
from tests.specs.oracle import DROP, Exchange, Exchanges, SpecOracle
from tests.verda.conftest import adapter, base_url, offer, spec

STRING = {"type": "string"}
TEXT_ID = {"text/plain": {"schema": STRING}}  # a created resource's id, the body as it is

# ------------------------------------------------------------------ the reconstruction, amended

# Error statuses beyond the few the reconstruction documents per operation, each with Verda's error body.
# sdk: verda/http_client/_http_client.py:23-33 (handle_error) reads every answer >= 400 as JSON
# {code, message}; verda/constants.py:114-123 (ErrorCodes) names insufficient_funds, forbidden_action,
# not_found, server_error and service_unavailable besides the 400/401 codes; its unit tests answer
# 400 invalid_request on nearly every operation (e.g. tests/unit_tests/instances/test_instances.py:185-193
# for GET /instances/{id}). The status of each code (402, 403, 404, 500, 503) is the API documentation's
# errors table as copied into public client code. Verda's official Go SDK (DataCrunch-io/datacrunch-sdk-go)
# retries 500 and backs off on 429, 502, 503 and 504 (datacrunch/request/retryer.go, Request.IsErrorRetryable
# and IsErrorThrottle); its docs/ERROR_HANDLING.md lists 429 and 500/502/503/504 too.
ORACLE = SpecOracle("verda", general={s: {"$ref": "#/components/schemas/Error"}
                                      for s in (400, 402, 403, 404, 429, 500, 502, 503, 504)})
_S = "/components/schemas"

ORACLE.amend(f"{_S}/Error/required", ["code", "message"],
             "sdk: APIException(code, message) from every error answer (_http_client.py:23-33); every "
             "error the SDK's unit tests answer carries both")

# POST /oauth2/token: the refresh-token grant (the reconstruction knows client credentials only).
# sdk: verda/authentication/_authentication.py:88 posts {grant_type: refresh_token, refresh_token}.
ORACLE.amend(f"{_S}/TokenRequest", {"oneOf": [
    copy.deepcopy(ORACLE.spec["components"]["schemas"]["TokenRequest"]),
    {"type": "object", "required": ["grant_type", "refresh_token"], "properties": {
        "grant_type": {"type": "string", "enum": ["refresh_token"]}, "refresh_token": STRING}}]},
    "sdk: _authentication.py:88, the refresh-token grant the SDK uses once the access token expires")

# GET /instance-types?currency=usd: prices per currency. sdk: verda/instance_types/_instance_types.py:88-91
# sends it; verda/constants.py:17 Currency = Literal['usd', 'eur'].
ORACLE.amend("/paths/~1instance-types/get/parameters", [
    {"name": "currency", "in": "query", "required": False,
     "schema": {"type": "string", "enum": ["usd", "eur"]}}],
    "sdk: _instance_types.py:88-91 sends currency; constants.py:17 its values")
# Its prices are decimal strings, not numbers. sdk: _instance_types.py:96-97 float(price_per_hour) and
# float(spot_price); tests/unit_tests/instance_types/test_instance_types.py:81-82 answer '5.00', '2.50'.
ORACLE.amend(f"{_S}/InstanceType/properties/price_per_hour", STRING,
             "sdk: _instance_types.py:96 float()s it; its unit test answers '5.00' "
             "(test_instance_types.py:81)")
ORACLE.amend(f"{_S}/InstanceType/properties/spot_price", STRING,
             "sdk: _instance_types.py:97 reads spot_price; its unit test answers '2.50' (:82)")

# GET /instance-availability?isSpot=true|false (the reconstruction's is_spot is not the API's name).
# sdk: verda/instances/_instances.py:314-316 sends {'isSpot': 'true'|'false', 'location_code': ...}.
assert ORACLE.amend("/paths/~1instance-availability/get/parameters/0",
                    {"name": "isSpot", "in": "query", "required": False, "schema": {"type": "boolean"}},
                    "sdk: _instances.py:314-316 names it isSpot (str(bool).lower())")["name"] == "is_spot"

# POST /instances answers 200 with the new id as plain text, not 202 JSON. sdk: _instances.py:221 takes
# the id as response .text (a JSON string would keep its quotes); tests/unit_tests/instances/
# test_instances.py:207 answers body=INSTANCE_ID, status=200 (text/plain).
assert ORACLE.amend("/paths/~1instances/post/responses/202", DROP,
                    "sdk: test_instances.py:207 answers 200, not 202") is not None
ORACLE.amend("/paths/~1instances/post/responses/200", {"description": "The new instance's id.",
                                                        "content": TEXT_ID},
             "sdk: _instances.py:221 .text; test_instances.py:207 body=INSTANCE_ID, status=200")
# Its body: the contract and the OS volume's spot policy the adapter sends. sdk: _instances.py:27-29
# (Contract, OnSpotDiscontinue), :203-220 (the payload).
ORACLE.amend(f"{_S}/DeployInstanceRequest/properties/contract",
             {"type": "string", "enum": ["LONG_TERM", "PAY_AS_YOU_GO", "SPOT"]},
             "sdk: _instances.py:27 Contract, sent at :217-218")
ORACLE.amend(f"{_S}/DeployInstanceRequest/properties/os_volume/properties/on_spot_discontinue",
             {"type": "string", "enum": ["keep_detached", "move_to_trash", "delete_permanently"]},
             "sdk: _instances.py:29 OnSpotDiscontinue, OSVolume.on_spot_discontinue (:49)")
# PUT /instances: delete_permanently (with volume_ids: the OS volume goes for good).
# sdk: _instances.py:275-276.
ORACLE.amend(f"{_S}/InstanceActionRequest/properties/delete_permanently", {"type": "boolean"},
             "sdk: _instances.py:275-276")

# An instance: no ip nor OS volume until provisioned; its location is `location`. sdk: _instances.py:94-101.
ORACLE.amend(f"{_S}/Instance/properties/ip", {"type": "string", "nullable": True},
             "sdk: _instances.py:94-95 'Can be None if instance is still not provisioned'")
ORACLE.amend(f"{_S}/Instance/properties/os_volume_id", {"type": "string", "nullable": True},
             "sdk: _instances.py:96-97, None until provisioned")
ORACLE.amend(f"{_S}/Instance/properties/location", STRING, "sdk: _instances.py:98")
ORACLE.amend(f"{_S}/Instance/properties/is_spot", {"type": "boolean"}, "sdk: _instances.py:101")

# POST /sshkeys and POST /scripts answer 201 with the id as plain text. sdk: verda/ssh_keys/_ssh_keys.py:122
# and verda/startup_scripts/_startup_scripts.py:123 take .text; their unit tests answer body=<id>,
# status=201 (tests/unit_tests/ssh_keys/test_ssh_keys.py:94, startup_scripts/test_startup_scripts.py:94).
for _path in ("~1sshkeys", "~1scripts"):
    ORACLE.amend(f"/paths/{_path}/post/responses/201/content", TEXT_ID,
                 "sdk: _ssh_keys.py:122 / _startup_scripts.py:123 .text; unit tests answer body=<id>, 201")

# DELETE /scripts/{script_id}: one script by id (the reconstruction has only a bulk DELETE /scripts, and
# with a body the SDK does not send: {scripts: [...]}, _startup_scripts.py:99). sdk: _startup_scripts.py:
# 103-110 (delete_by_id, no body); tests/unit_tests/startup_scripts/test_startup_scripts.py:151-154 (200).
ORACLE.amend("/paths/~1scripts~1{script_id}", {"delete": {
    "parameters": [{"name": "script_id", "in": "path", "required": True, "schema": STRING}],
    "responses": {"200": {"description": "Script deleted."}}}},
    "sdk: _startup_scripts.py:103-110 delete_by_id; test_startup_scripts.py:151-154 answers 200")

# DELETE /volumes/{volume_id}: is_permanent is a JSON body, not a query parameter. sdk:
# verda/volumes/_volumes.py:259-260 sends json={'is_permanent': ...}.
assert ORACLE.amend("/paths/~1volumes~1{volume_id}/delete/parameters/1", DROP,
                    "sdk: _volumes.py:259-260 sends is_permanent in the body")["name"] == "is_permanent"
ORACLE.amend("/paths/~1volumes~1{volume_id}/delete/requestBody", {"content": {"application/json": {
    "schema": {"type": "object", "properties": {"is_permanent": {"type": "boolean"}}}}}},
    "sdk: _volumes.py:259-260")
# A volume: no instance when detached; its location is `location`. sdk: _volumes.py:39, 62-63.
ORACLE.amend(f"{_S}/Volume/properties/instance_id", {"type": "string", "nullable": True},
             "sdk: _volumes.py:39 'None if detached', :63")
ORACLE.amend(f"{_S}/Volume/properties/location", STRING, "sdk: _volumes.py:62")


# ------------------------------------------------------------------ the adapter's calls conform


def cloud_of(sim: FakeCloudServer) -> drive.Cloud:
    def make(secret: str | None) -> CloudProvider:
        return adapter(sim) if secret is None else adapter(sim, client_secret=secret)

    async def an_offer(p: CloudProvider) -> Offer:
        assert isinstance(p, VerdaProvider)
        return await offer(p)

    # Verda has no firewall API: the adapter opens no ports
    return drive.Cloud("verda", sim, make, an_offer, spec, ports=())


def _running(st: InstanceStatus | None) -> bool:
    return st is not None and st.state == InstanceState.RUNNING


def _gone(st: InstanceStatus | None) -> bool:
    return st is None or st.state == InstanceState.TERMINATED


async def test_lifecycle_conforms(sim: FakeCloudServer) -> None:
    rec = await drive.lifecycle(cloud_of(sim))
    assert {"POST /oauth2/token", "GET /instance-availability", "POST /sshkeys", "POST /scripts",
            "POST /instances", "GET /instances/{instance_id}", "PUT /instances",
            "DELETE /scripts/{script_id}"} <= ORACLE.templates(rec)
    assert ORACLE.check(rec) == []


async def test_refusals_conform(sim: FakeCloudServer) -> None:
    rec = await drive.refusals(cloud_of(sim))
    assert {e.status for e in rec.seen} >= {400, 401, 402, 429, 500, 503}
    assert ORACLE.check(rec) == []


async def test_a_token_refresh_conforms(sim: FakeCloudServer) -> None:
    p = adapter(sim)
    async with p:
        rec = Exchanges.attach(p)
        await p.verify()
        verda_api.expire_tokens(sim.engine)  # the cached token is refused: 401, then the refresh grant
        await p.verify()
    assert [e.json()["grant_type"] for e in rec.seen if e.path == "/oauth2/token"] == \
        ["client_credentials", "refresh_token"]
    assert [e.status for e in rec.seen if e.path == "/balance"] == [200, 401, 200]
    assert ORACLE.check(rec) == []


async def test_a_booting_instance_without_its_address_conforms(sim: FakeCloudServer) -> None:
    sim.admin.configure(boot_delay=60.0)  # it stays provisioning (the sim fixture's next reset ends it)
    p = adapter(sim)
    async with p:
        ref = await p.create(await offer(p), spec(p))
        rec = Exchanges.attach(p)
        st = await p.get(ref)
    assert st is not None and st.state == InstanceState.PENDING and st.host is None
    [seen] = rec.seen
    assert seen.answer_json()["ip"] is None and seen.answer_json()["os_volume_id"] is None
    assert ORACLE.check(rec) == []


async def test_a_non_ascii_secret_is_refused_as_the_spec_says(sim: FakeCloudServer) -> None:
    # (the simulation's own 401 for it, secret, refresh token and bearer: tests/verda/test_simulation.py)
    p = adapter(sim, client_secret="sécret-FAKE")
    async with p:
        rec = Exchanges.attach(p)
        with pytest.raises(AuthError):
            await p.verify()
    assert [(e.path, e.status) for e in rec.seen] == [("/oauth2/token", 401)]
    assert ORACLE.check(rec) == []


async def test_a_leftover_volume_release_conforms(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    p = adapter(sim)
    async with p:
        s = spec(p)
        ref = await p.create(await offer(p), s)
        await eventually(lambda: p.get(ref), until=_running, within=WITHIN, what="running")
        # deleted by hand without naming its OS volume: the volume stays, detached
        r = await api.put("/instances", json={"action": "delete", "id": [ref.instance_id]})
        assert r.status_code == 202, r.text
        await eventually(lambda: p.get(ref), until=_gone, within=WITHIN, what="gone")
        rec = Exchanges.attach(p)
        await p.release(s.key)
    assert {"GET /volumes", "DELETE /volumes/{volume_id}", "DELETE /scripts/{script_id}"} <= \
        ORACLE.templates(rec)
    assert ORACLE.check(rec) == []
    delete = next(e for e in rec.seen if e.method == "DELETE" and e.path.startswith("/volumes/"))
    assert delete.json() == {"is_permanent": True}
    delete.body, delete.query = b"", [("is_permanent", "true")]  # where the reconstruction had it
    assert any("query parameter is_permanent is not documented" in msg
               for msg in ORACLE.request_problems(delete))


# ------------------------------------------------------------------ the oracle catches deviations


async def test_a_create_without_its_ssh_keys_is_caught(sim: FakeCloudServer) -> None:
    rec = await drive.one_create(cloud_of(sim))
    create = rec.find("POST", "/instances", 200)
    assert ORACLE.problems(create) == []
    body = create.json()
    del body["ssh_key_ids"]  # DeployInstanceRequest requires it
    create.body = json.dumps(body).encode()
    assert any("'ssh_key_ids' is a required property" in p for p in ORACLE.request_problems(create))
    # and the create's answer as the reconstruction had it (202, the id as a JSON string)
    create.status, create.answer_type = 202, "application/json"
    create.answer = json.dumps(create.answer.decode()).encode()
    assert any("status 202 is not documented" in p for p in ORACLE.answer_problems(create))


async def test_the_reconstructions_is_spot_and_a_numeric_price_are_caught(sim: FakeCloudServer) -> None:
    p = adapter(sim)
    async with p:
        rec = Exchanges.attach(p)
        await p.offers(OfferQuery(spot=True))
    availability = rec.find("GET", "/instance-availability", 200)
    assert ("isSpot", "true") in availability.query and ORACLE.problems(availability) == []
    availability.query = [("is_spot", "true")]  # the reconstruction's name
    assert any("query parameter is_spot is not documented" in msg
               for msg in ORACLE.request_problems(availability))
    types = rec.find("GET", "/instance-types", 200)
    listed: list[dict[str, Any]] = types.answer_json()
    listed[0]["price_per_hour"] = float(listed[0]["price_per_hour"])  # a number, as the reconstruction says
    types.answer = json.dumps(listed).encode()
    assert any("/0/price_per_hour" in msg and "is not of type 'string'" in msg
               for msg in ORACLE.answer_problems(types))


async def test_a_fractional_expires_in_is_caught(sim: FakeCloudServer) -> None:
    async with httpx.AsyncClient(base_url=base_url(sim)) as c:
        r = await c.post("/oauth2/token", json={"grant_type": "client_credentials",
                                                "client_id": verda_api.client_id(sim.tokens["verda"]),
                                                "client_secret": sim.tokens["verda"]})
    issued = Exchange.of(r, base=c.base_url.path)
    assert r.json()["expires_in"] == 3600 and ORACLE.problems(issued) == []
    issued.answer = json.dumps({**r.json(), "expires_in": 3600.0}).encode()  # the simulation's before
    assert any("/expires_in: 3600.0 is not of type 'integer'" in p for p in ORACLE.answer_problems(issued))


async def test_an_error_body_of_the_wrong_shape_is_caught(sim: FakeCloudServer) -> None:
    refused = (await drive.one_create(cloud_of(sim), "capacity")).find("POST", "/instances", 400)
    assert ORACLE.problems(refused) == []
    refused.answer = json.dumps({"detail": "Not enough capacity"}).encode()  # FastAPI's, not Verda's
    assert any("'code' is a required property" in p for p in ORACLE.answer_problems(refused))


def test_every_amendment_cites_the_sdk() -> None:
    assert ORACLE.amended and all("sdk:" in why for _, _, why in ORACLE.amended)

"""Vast.ai's official OpenAPI (tests/specs/vastai: vast-ai/docs api-reference/openapi.yaml) as the oracle:
every request the adapter sends and every answer the simulation gives, through a lifecycle and every
mapped refusal, is what the spec documents; and the oracle is shown to catch a request or an answer
that departs from it.

Where the published file departs from Vast's own sources, it is amended in memory (`SpecOracle.amend`),
each amendment citing them: `docs:` the per-endpoint files it is built from (vast-ai/docs
api-reference/openapi/yaml/*.yaml) and the docs' pages, `cli:` Vast's official CLI/SDK (vast-ai/vast-cli
vastai/...), both at the commits tests/specs/README.md names.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx

from fakeclouds.server import FakeCloudServer
from providers.base import CloudProvider, Offer
from providers.vastai import VastAIProvider
from tests.specs import drive
from tests.specs.oracle import DROP, Exchange, Exchanges, SpecOracle
from tests.vastai.conftest import CHEAP, adapter, configure, offer, spec

# Statuses the docs give for every endpoint, outside the operations' own `responses`:
# rate-limits-and-errors.mdx ("Error Responses"): `{success, error, msg}`, some without `success`,
# some with only `msg` or `message`.
ERROR_BODY: dict[str, Any] = {"type": "object", "properties": {
    "success": {"type": "boolean"}, "error": {"type": "string"}, "msg": {"type": "string"},
    "message": {"type": "string"}}}
ORACLE = SpecOracle("vastai")

# ------------------------------------------------------------------ amendments, each citing its source

# The published file strips every path's trailing slash (build.py:43-46 canonicalize_path, "to avoid
# duplicate trailing-slash API docs routes"); the files it is built from, and the CLI, have it.
_SLASHED = {
    "/api/v0/users/current": "docs: yaml/show_user.yaml:10 '/api/v0/users/current/'",
    "/api/v0/bundles": "docs: yaml/search_offers.yaml:10; cli: vastai/api/offers.py:47 post('/bundles/')",
    "/api/v0/asks/{id}": "docs: yaml/create_instance.yaml:10; "
                         "cli: vastai/api/instances.py:128 put('/asks/{id}/')",
    "/api/v1/instances": "docs: yaml/show_instances.yaml:10; "
                         "cli: vastai/api/instances.py:69 '/api/v1/instances/'",
    "/api/v0/instances/{id}": "docs: yaml/show_instance.yaml:10, destroy_instance.yaml:10; cli: "
                              "vastai/api/instances.py:82 get, :139 delete('/instances/{id}/')",
    "/api/v0/instances/{id}/ssh": "docs: yaml/attach_ssh.yaml:10, show_instance_ssh_keys.yaml:10; cli: "
                                  "vastai/api/keys.py:80 post('/instances/{instance_id}/ssh/')",
}
for _path, _why in _SLASHED.items():
    _esc = _path.replace("/", "~1")
    ORACLE.amend(f"/paths/{_esc}~1", copy.deepcopy(ORACLE.spec["paths"][_path]), _why)
    ORACLE.amend(f"/paths/{_esc}", DROP, _why)

# GET /api/v0/instances/{id}/?owner=me: the CLI asks so (vastai/api/instances.py:82 query_args={"owner":
# "me"}; the same at vastai/cli/commands/storage.py:272); the spec has only the path parameter.
ORACLE.amend("/paths/~1api~1v0~1instances~1{id}~1/get/parameters/1",
             {"name": "owner", "in": "query", "required": False, "schema": {"type": "string"}},
             "cli: vastai/api/instances.py:82 query_args={'owner': 'me'}")

# POST /bundles/ `order`: a list of [column, direction] pairs, as the schema's own description says
# (yaml/search_offers.yaml:250-254 "Each entry should contain two elements"); its minItems/maxItems 2 are
# on the list instead of on each pair (:259-260), so the CLI's own default [["score", "desc"]]
# (cli: vastai/api/offers.py:34) would be refused. They belong to the pair.
_ORDER = "/paths/~1api~1v0~1bundles~1/post/requestBody/content/application~1json/schema/properties/order"
ORACLE.amend(_ORDER, {"type": "array", "items": {"type": "array", "items": {"type": "string"},
                                                 "minItems": 2, "maxItems": 2}},
             "docs: yaml/search_offers.yaml:250-254 each entry two elements; cli: vastai/api/offers.py:34 "
             "sends [['score', 'desc']]")

# GET /instances/{id}/ answers {"instances": null} for an instance that is not (or no longer) there:
# cli: vastai/api/instances.py:84-86 reads r.json()["instances"] and returns None when it is None.
_SHOW = "/paths/~1api~1v0~1instances~1{id}~1/get/responses/200/content/application~1json/schema"
ORACLE.amend(f"{_SHOW}/properties/instances",
             {"anyOf": [{"$ref": "#/components/schemas/Instance"}, {"type": "null"}]},
             "cli: vastai/api/instances.py:84-86 `if row is None: return None`")
# An instance's `ports` are Docker's mappings {"22/tcp": [{HostIp, HostPort (a string)}]}, not a list of
# integers: the spec's own v1 list documents them so (yaml/show_instances.yaml, instances[].ports, "Only
# present on running instances", nullable), and the CLI reads them so (cli: vastai/cli/commands/misc.py:
# 209-215 ports.get("22/tcp") ... int(port_22d[0]["HostPort"]); machines.py:1524-1526).
_V1_ITEM = ("/paths/~1api~1v1~1instances~1/get/responses/200/content/application~1json/schema/properties/"
            "instances/items/properties")
ORACLE.amend("/components/schemas/Instance/properties/ports",
             copy.deepcopy(ORACLE.spec["paths"]["/api/v1/instances/"]["get"]["responses"]["200"]["content"]
                           ["application/json"]["schema"]["properties"]["instances"]["items"]["properties"]
                           ["ports"]),
             "docs: yaml/show_instances.yaml instances[].ports; cli: vastai/cli/commands/misc.py:209-215")
# The v1 list's `onstart` is null when none was given, as the same instance's `onstart` in the spec's
# Instance schema (yaml/show_instance.yaml: onstart nullable) says.
ORACLE.amend(f"{_V1_ITEM}/onstart", {"type": ["string", "null"]},
             "docs: yaml/show_instance.yaml Instance.onstart is nullable (the same field of the same object)")

# 5xx: the docs' error shape (rate-limits-and-errors.mdx "Error Responses": some bodies carry only `msg`)
# or a gateway's page: cli: vastai/api/client.py:26-28 retries 502/503/504 as "gateway/upstream errors".
for _path in ORACLE.spec["paths"]:
    for _method in ORACLE.spec["paths"][_path]:
        ORACLE.amend(f"/paths/{_path.replace('/', '~1')}/{_method}/responses/5XX",
                     {"description": "A server or gateway error.",
                      "content": {"application/json": {"schema": ERROR_BODY}, "text/html": {}}},
                     "docs: rate-limits-and-errors.mdx error shape; cli: vastai/api/client.py:26-28 "
                     "gateway/upstream errors")

# ------------------------------------------------------------------ the adapter's calls conform


def cloud_of(sim: FakeCloudServer) -> drive.Cloud:
    async def an_offer(p: CloudProvider) -> Offer:
        assert isinstance(p, VastAIProvider)
        return await offer(p)

    # Vast maps container ports to host ports the host picks: the adapter opens none (capabilities.ports)
    return drive.Cloud("vastai", sim, lambda token: adapter(sim, token=token), an_offer, spec, ports=())


# Open: the simulation refuses a create for lack of credit 400 `insufficient_credit` (an [unconfirmed]
# code, which the adapter maps to QuotaError), but the spec documents only invalid_args, invalid_price and
# no_ssh_key_for_vm for that 400 (yaml/create_instance.yaml), and Vast documents no lack-of-credit answer
# for a create at all (the nearest, yaml/prepay_instance.yaml:75-87, is a 411 {success, msg: "Insufficient
# credit"} on prepay). Which the real one is stays unknown: reported here, not amended away.
OPEN = ["[PUT /api/v0/asks/21040117/ -> 400] PUT /api/v0/asks/{id}/ -> 400: answer body: /error: "
        "'insufficient_credit' is not one of ['invalid_args', 'invalid_price', 'no_ssh_key_for_vm']"]


async def test_lifecycle_conforms(sim: FakeCloudServer) -> None:
    rec = await drive.lifecycle(cloud_of(sim))
    assert {"GET /api/v0/users/current/", "POST /api/v0/bundles/", "GET /api/v1/instances/",
            "PUT /api/v0/asks/{id}/", "POST /api/v0/instances/{id}/ssh/", "GET /api/v0/instances/{id}/",
            "DELETE /api/v0/instances/{id}/"} <= ORACLE.templates(rec)
    assert ORACLE.check(rec) == []
    # A booting instance: no ports yet, and no ssh_port (an integer when there is one, never null). Read
    # on one held booting (the 0.1 s boot above can be over before the lifecycle's first
    # read on a busy box), destroyed after.
    configure(sim, hold_boots=True)
    p = adapter(sim)
    async with p:
        ref = await p.create(await offer(p), spec(p))
        rec = Exchanges.attach(p)
        assert await p.get(ref) is not None
        await p.terminate(ref)
    configure(sim, hold_boots=False)
    booting = next(e.answer_json()["instances"] for e in rec.seen if e.method == "GET" and e.status == 200
                   and e.path.startswith("/api/v0/instances/") and e.answer_json()["instances"])
    assert booting["actual_status"] != "running" and booting["ports"] == {} and "ssh_port" not in booting
    assert ORACLE.check(rec) == []


async def test_refusals_conform(sim: FakeCloudServer) -> None:
    rec = await drive.refusals(cloud_of(sim))
    assert {e.status for e in rec.seen} >= {400, 401, 404, 429, 500, 503}
    assert ORACLE.check(rec) == OPEN


async def test_every_throttled_answer_conforms(sim: FakeCloudServer, api: httpx.AsyncClient) -> None:
    # Each limited endpoint called twice inside its interval: the second is refused with the body its
    # own 429 documents ({"detail"} for create, show and list; {success, error, msg} for destroy).
    configure(sim, time_scale=20.0)
    rent = {"client_id": "me", "image": "ubuntu:22.04", "runtype": "ssh", "disk": 16}
    created = await api.put(f"/api/v0/asks/{CHEAP.id}/", json=rent)
    iid = created.json()["new_contract"]
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("PUT", f"/api/v0/asks/{CHEAP.id}/", {"json": rent}),
        ("GET", "/api/v1/instances/", {}), ("GET", "/api/v1/instances/", {}),
        ("GET", f"/api/v0/instances/{iid}/", {"params": {"owner": "me"}}),
        ("GET", f"/api/v0/instances/{iid}/", {"params": {"owner": "me"}}),
        ("DELETE", f"/api/v0/instances/{iid}/", {}), ("DELETE", f"/api/v0/instances/{iid}/", {})]
    rec = Exchanges(seen=[Exchange.of(created, api.base_url.path)])
    for method, path, kw in calls:
        rec.seen.append(Exchange.of(await api.request(method, path, **kw), api.base_url.path))
    assert [e.status for e in rec.seen] == [200, 429, 200, 429, 200, 429, 200, 429]
    assert ORACLE.check(rec) == []


async def test_a_retried_create_reading_the_instance_keys_conforms(sim: FakeCloudServer) -> None:
    p = adapter(sim)
    async with p:
        s, o = spec(p), await offer(p)
        await p.create(o, s)
        rec = Exchanges.attach(p)
        ref = await p.create(o, s)  # found by its label: the keys attached are read, none added
        await p.terminate(ref)
    assert "GET /api/v0/instances/{id}/ssh/" in ORACLE.templates(rec)
    assert ORACLE.check(rec) == []


# ------------------------------------------------------------------ the oracle catches deviations


async def test_a_create_without_its_image_is_caught(sim: FakeCloudServer) -> None:
    create = (await drive.one_create(cloud_of(sim))).find("PUT", f"/api/v0/asks/{CHEAP.id}/", 200)
    assert ORACLE.problems(create) == []
    body = create.json()
    del body["image"]  # required by the create's schema
    create.body = json.dumps(body).encode()
    assert any("'image' is a required property" in p for p in ORACLE.request_problems(create))
    create.path = create.path.rstrip("/")  # as the published file (not the API) spells it
    assert any("trailing slash" in p for p in ORACLE.request_problems(create))


async def test_a_create_answer_naming_its_instance_as_a_string_is_caught(sim: FakeCloudServer) -> None:
    create = (await drive.one_create(cloud_of(sim))).find("PUT", f"/api/v0/asks/{CHEAP.id}/", 200)
    answer = create.answer_json()
    create.answer = json.dumps({**answer, "new_contract": str(answer["new_contract"])}).encode()
    assert any("/new_contract" in p and "is not of type 'integer'" in p
               for p in ORACLE.answer_problems(create))


def test_a_null_ssh_port_is_caught() -> None:
    # what the simulation answered for a booting instance before: ssh_port null
    booting = Exchange(method="GET", path="/api/v0/instances/1/", query=[("owner", "me")], content_type="",
                       body=b"", status=200, answer_type="application/json",
                       answer=json.dumps({"instances": {"id": 1, "ports": {}, "ssh_port": None}}).encode())
    assert any("/instances/ssh_port: None is not of type 'integer'" in p for p in ORACLE.problems(booting))


def test_every_amendment_cites_the_vendor() -> None:
    assert ORACLE.amended and all(why.startswith(("docs:", "cli:")) for _, _, why in ORACLE.amended)

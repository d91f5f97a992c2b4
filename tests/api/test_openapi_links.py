"""api/openapi.py's links: what the stateful fuzz (bench/fuzz.py) and clients follow from an answer
to the operations on what it made."""

from __future__ import annotations

from typing import Any

import httpx

from api.openapi import add_links
from tests.api.conftest import GOOD_KEY, FakeCloud


def spec(paths: dict[str, dict[str, Any]]) -> dict[str, Any]:
    def op(name: str, code: str = "200", with_id: bool = False) -> dict[str, Any]:
        body = {"schema": {"type": "object", "properties": {"id": {"type": "string"}} if with_id else {}}}
        return {"operationId": name, "responses": {code: {"content": {"application/json": body}}}}

    return {"paths": {path: {m: op(name, *rest) for m, (name, *rest) in ops.items()}
                      for path, ops in paths.items()},
            "components": {"schemas": {}}}


def links(s: dict[str, Any], path: str, method: str, code: str) -> dict[str, dict[str, str]]:
    found = s["paths"][path][method]["responses"][code].get("links", {})
    return {name: link["parameters"] for name, link in found.items()}


def test_an_id_links_to_its_paths_and_to_the_same_parameter_under_another_name() -> None:
    s = spec({"/things": {"post": ("make", "201", True), "get": ("list_things",)},
              "/things/{thing_id}": {"get": ("get_thing",), "delete": ("drop_thing",)},
              "/alias/{thing_id}": {"delete": ("drop_alias",)},
              "/others/{other_id}": {"get": ("get_other",)}})
    add_links(s)
    by_id = {"thing_id": "$response.body#/id"}
    assert links(s, "/things", "post", "201") == {"get_thing": by_id, "drop_thing": by_id,
                                                  "drop_alias": by_id}
    assert links(s, "/things", "get", "200") == {}  # no id in its answer


def test_a_put_under_a_chosen_name_links_to_the_other_operations_on_that_name() -> None:
    s = spec({"/pools/{name}": {"put": ("save", "202"), "get": ("get_pool",), "delete": ("drop_pool",)},
              "/pools/{name}/members": {"get": ("members",)}})
    add_links(s)
    by_name = {"name": "$request.path.name"}
    assert links(s, "/pools/{name}", "put", "202") == {"get_pool": by_name, "drop_pool": by_name,
                                                       "members": by_name}


async def test_the_apps_links_lead_to_what_was_made(client: httpx.AsyncClient) -> None:
    """Followed on the app: the connection a POST made is deleted through /providers, its alias."""
    s = (await client.get("/openapi.json")).json()
    made = await client.post("/api/compute/connections",
                             json={"provider": FakeCloud.id, "credentials": {"api_key": GOOD_KEY}})
    assert made.status_code == 201, made.text
    found = links(s, "/api/compute/connections", "post", "201")
    target = next(name for name in found if "providers" in name and name.startswith("delete"))
    assert found[target] == {"connection_id": "$response.body#/id"}
    gone = await client.delete(f"/api/compute/providers/{made.json()['id']}")
    assert gone.status_code in (200, 202, 204), gone.text
    pools = links(s, "/api/compute/pools/{name}", "put", "202")
    assert {name.split("_")[0] for name in pools} == {"get", "delete"}
    assert set(map(str, pools.values())) == {str({"name": "$request.path.name"})}


def test_a_page_links_its_first_item_to_the_operations_on_it() -> None:
    s = spec({"/things": {"get": ("list_things",)}, "/things/{thing_id}": {"get": ("get_thing",)},
              "/things/{thing_id}/stop": {"post": ("stop_thing",)},
              "/pools": {"get": ("list_pools",)}, "/pools/{name}": {"put": ("save_pool",)},
              "/projects": {"get": ("list_projects",)}, "/projects/{project}": {"delete": ("drop_project",)}})
    item = {"type": "object", "properties": {"id": {"type": "string"}, "name": {"type": "string"}}}
    page = {"type": "object", "properties": {"items": {"type": "array", "items": item}}}
    for path in ("/things", "/pools", "/projects"):
        s["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"] = page
    add_links(s)
    assert links(s, "/things", "get", "200") == {"get_thing": {"thing_id": "$response.body#/items/0/id"},
                                                 "stop_thing": {"thing_id": "$response.body#/items/0/id"}}
    assert links(s, "/pools", "get", "200") == {"save_pool": {"name": "$response.body#/items/0/name"}}
    assert links(s, "/projects", "get", "200") == {}  # a parameter no item field names: no guess

"""OpenAPI that lists every status each route can answer, every error in the one `ErrorOut` shape.

FastAPI documents what a route declares, plus a 422 in its own list shape that our answers do not
use. The statuses that come from the app's rules rather than from a route's code are added here to
every route, so routes added later get them too:

- 401 on every path under a secured prefix (or declaring a security scheme): the token check;
- 400, 413 and 422 where there is a body (not UTF-8 JSON, which FastAPI answers with a 400; too
  large; invalid), 422 where there are parameters, and on every /api route (a query parameter the
  route does not declare: api/query_params.py);
- 404 where the path has a parameter: an unknown id, or a value that routes nowhere; and where
  the request names a project (`X-Project`): one that does not exist, or another project's.

What a route's own code raises (409, 429, 502, 503, 504, ...) is its `responses=`; here each such
answer gets the ErrorOut schema. Where an answer under P carries an `id`, the operations on
P/{param} get an OpenAPI link from it (clients and schemathesis's stateful phase follow them), as
do a list's page (its first item) and an offers page (the pick, its first offer as the body). A
discriminator's property is required in every schema it maps to, as OpenAPI asks.
tests/api/test_schemathesis.py holds the result against what the app really answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI

from api.errors import ErrorOut
from api.guard import OPEN_SESSIONS

SECURED_PREFIXES = ("/api/", "/codec/")
ERROR_SCHEMA = {"$ref": "#/components/schemas/ErrorOut"}
# FastAPI's own 422 shape, replaced by ErrorOut (dropped from the components once nothing uses it).
FASTAPI_422 = ("HTTPValidationError", "ValidationError")
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")

RULE_DESCRIPTIONS = {
    400: "the body could not be read (not UTF-8 JSON)",
    401: "missing or invalid bearer token",
    404: "no such object (or a path that routes nowhere)",
    413: "request body too large",
    422: "invalid request: `detail` says why, `errors` names each invalid field",
}
# Required: a 401 without WWW-Authenticate breaks RFC 9110, and a 429 without Retry-After leaves
# the client guessing (schemathesis's response_headers_conformance holds every answer to these).
HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "the scheme to authenticate with", "required": True,
                               "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "seconds to wait before trying again", "required": True,
                          "schema": {"type": "string"}}},
}


def rule_statuses(path: str, method: str, operation: dict[str, Any]) -> set[int]:
    """The error statuses the app's own rules give `operation`, whatever the route's code does."""
    codes: set[int] = set()
    open_ = (method.upper(), path) in OPEN_SESSIONS  # the codec's token page, signing out
    if (path.startswith(SECURED_PREFIXES) and not open_) or operation.get("security"):
        codes.add(401)
    if "requestBody" in operation:
        codes |= {400, 413, 422}
    if operation.get("parameters") or path.startswith("/api/"):  # every /api route: an unknown query
        codes.add(422)  # parameter is a 422 (api/query_params.py)
    params = operation.get("parameters", [])
    if any(p.get("in") == "path" or p.get("name") == "X-Project" for p in params):
        codes.add(404)
    return codes


def _error_response(code: int, existing: dict[str, Any] | None) -> dict[str, Any]:
    response = dict(existing or {})
    described = response.get("description")
    if not described or described == "Validation Error":  # FastAPI's default 422 text
        response["description"] = RULE_DESCRIPTIONS.get(code) or HTTPStatus(code).phrase
    response["content"] = {"application/json": {"schema": ERROR_SCHEMA}}
    if code in HEADERS:
        response["headers"] = {**HEADERS[code], **response.get("headers", {})}
    return response


def complete(spec: dict[str, Any]) -> dict[str, Any]:
    """Add the rule statuses and the ErrorOut schema to every operation of `spec` (in place;
    running it again changes nothing)."""
    components = spec.setdefault("components", {}).setdefault("schemas", {})
    error_out = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(error_out.pop("$defs", {}))  # FieldError
    components["ErrorOut"] = error_out
    for path, item in spec.get("paths", {}).items():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            responses = operation.setdefault("responses", {})
            for code in rule_statuses(path, method, operation):
                responses.setdefault(str(code), {})
            for key in list(responses):
                if key.isdigit() and int(key) >= 400:
                    responses[key] = _error_response(int(key), responses[key])
            operation["responses"] = dict(sorted(responses.items()))
    add_links(spec)
    add_pick_links(spec["paths"])
    require_discriminators(spec)
    text = str(spec.get("paths"))
    for name in FASTAPI_422:
        if f"#/components/schemas/{name}'" not in text:
            components.pop(name, None)
    return spec


def require_discriminators(spec: dict[str, Any]) -> None:
    """Each schema a discriminator maps to lists its property as required, as OpenAPI asks: a card's
    `kind` has a default (code builds a card without naming it), so pydantic leaves it optional,
    while a request must name it — without it the API cannot tell the union's members apart (422)."""
    schemas = spec.get("components", {}).get("schemas", {})
    for node in objects_in(spec):
        found = node.get("discriminator")
        if isinstance(found, dict):
            for ref in found.get("mapping", {}).values():
                required = schemas.get(ref.rsplit("/", 1)[1], {}).setdefault("required", [])
                if found["propertyName"] not in required:
                    required.insert(0, found["propertyName"])


def objects_in(node: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in `node`, itself included, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from objects_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from objects_in(value)


def _schema_of(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref", "")
    if ref.startswith("#/components/schemas/"):
        found: dict[str, Any] = spec["components"]["schemas"].get(ref.rsplit("/", 1)[1], {})
        return found
    return schema


def add_links(spec: dict[str, Any]) -> None:
    """OpenAPI links, for clients and schemathesis's stateful phase to follow:
    - a 2xx answer with an `id`, at path P, links to every operation on P/{param}...: the id it
      answered is that parameter — and to every operation on another path whose parameter has the
      same `…_id` name (one resource under two names: /connections and /providers);
    - a PUT on P/{param} (a thing saved under a name the caller chose) links to the other operations
      on P/{param}...: the name it was given is theirs;
    - a page of P's list links to the operations on P/{param}...: its first item's `id` (or `name`,
      for a thing known by its name) is that parameter."""
    paths = spec.get("paths", {})
    for path, item in paths.items():
        targets = [(child, m.group(1)) for child in paths
                   if (m := re.match(re.escape(path) + r"/\{([^}/]+)\}", child))]
        names = {param for _, param in targets if param.endswith("_id")}
        targets += [(other, m.group(1)) for other in paths if not other.startswith(path + "/")
                    and (m := re.search(r"/\{([^}/]+)\}", other)) and m.group(1) in names]
        for method in METHODS:
            if (operation := item.get(method)) is not None:
                _link_ids(spec, operation, targets)
        if "get" in item:
            _link_first_item(spec, item["get"], [t for t in targets if t[0].startswith(path + "/")])
        named = re.fullmatch(r".*/\{([^}/]+)\}", path)
        if named and "put" in item:
            same = [child for child in paths if child == path or child.startswith(path + "/")]
            _link(item["put"], [(child, named.group(1)) for child in same], f"$request.path.{named.group(1)}",
                  paths, skip=item["put"].get("operationId"))


def _link_ids(spec: dict[str, Any], operation: dict[str, Any], targets: list[tuple[str, str]]) -> None:
    for code, response in operation.get("responses", {}).items():
        schema = response.get("content", {}).get("application/json", {}).get("schema", {})
        if code.startswith("2") and "id" in _schema_of(spec, schema).get("properties", {}):
            _link(operation, targets, "$response.body#/id", spec["paths"], only=code)


def _link_first_item(spec: dict[str, Any], operation: dict[str, Any], targets: list[tuple[str, str]]) -> None:
    """Links from a list's page to each target operation, the first item's `id` (or `name`) its
    parameter; none where no item field names the parameter (a guess would send made-up ids)."""
    schema = operation.get("responses", {}).get("200", {}).get("content", {}).get("application/json", {})
    page = _schema_of(spec, schema.get("schema", {})).get("properties", {})
    fields = _schema_of(spec, page.get("items", {}).get("items", {})).get("properties", {})
    for child, param in targets:
        field = "id" if param.endswith("_id") else param if param == "name" else None
        if field in fields:
            _link(operation, [(child, param)], f"$response.body#/items/0/{field}", spec["paths"], only="200")


def _link(operation: dict[str, Any], targets: list[tuple[str, str]], value: str,
          paths: dict[str, Any], only: str | None = None, skip: str | None = None) -> None:
    """Links from `operation`'s 2xx answers (or only the one `only`) to every operation on each
    target path, its parameter given by `value`."""
    for code, response in operation.get("responses", {}).items():
        if not code.startswith("2") or (only is not None and code != only):
            continue
        links = response.setdefault("links", {})
        for target_path, param in targets:
            for method in METHODS:
                target = paths[target_path].get(method, {}).get("operationId")
                if target and target != skip:
                    links[target] = {"operationId": target, "parameters": {param: value}}


# A pick must name an offer the cloud lists now (made-up text is refused before the pick's logic):
# an offers page's first row is one, sent as the pick's body; the page's cloud is the pick's.
PICK = ("/api/compute/backends/{provider}/pick", "post")
OFFERS_PAGES = {("/api/compute/backends/{provider}/offers", "get"): "$request.path.provider",
                ("/api/compute/offers", "get"): "$response.body#/items/0/provider"}
FIRST_OFFER = {field: f"$response.body#/items/0/{field}" for field in ("instance_type", "region", "spot")}


def add_pick_links(paths: dict[str, Any]) -> None:
    """Links from the offers pages' answers to the pick, with the first offer listed as its body."""
    path, method = PICK
    target = paths.get(path, {}).get(method, {}).get("operationId")
    for (page, how), provider in OFFERS_PAGES.items():
        answer = paths.get(page, {}).get(how, {}).get("responses", {}).get("200")
        if target and answer is not None:
            answer.setdefault("links", {})[target] = {
                "operationId": target, "parameters": {"provider": provider}, "requestBody": FIRST_OFFER}


def bound_priority(spec: dict[str, Any], bound: int) -> None:
    """A job's priority as this installation takes it, ±`bound` (GPUPROV_JOB_PRIORITY_MAX), where
    the model says only its hard cap (±1000): a client reading the schema, and `make fuzz`, would
    send what the API then refuses as out of range."""
    priority = spec["components"]["schemas"]["JobCreate"]["properties"]["priority"]
    priority["minimum"], priority["maximum"] = -bound, bound


def install_openapi(app: FastAPI) -> None:
    """Make `app.openapi()` (and /openapi.json) answer the completed document, with this
    installation's settings where the schema depends on them."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = complete(generate())
            bound_priority(spec, app.state.deps.job_priority_max)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend it

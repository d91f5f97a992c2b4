"""A vendor's own OpenAPI description as the oracle for what an adapter sends and a simulation answers.

`SpecOracle(cloud, prefix)` loads tests/specs/<cloud>/openapi.json (see bundle.py and README.md).
`Exchanges.attach(adapter)` records every request the adapter's httpx client sends and every answer
it gets (an event hook on the REST base's client: OAuth token calls made by its auth flow included).
`oracle.problems(exchange)` lists how one exchange departs from the spec:

request  — the path (as the adapter's client sent it, relative to its base URL, plus `prefix`, the
           part of the vendor's server URL the adapter's endpoint already holds) names a documented
           path template, exactly: a trailing slash the spec does not have (or lacks) is a deviation;
           the method is documented there; every required query/path parameter is present, each sent
           one is documented and valid (type, enum); a JSON or form body validates against the
           operation's request schema, and one is sent when it is required;
answer   — its status is documented for the operation (exactly, or by an `NXX` range or `default`);
           a JSON body validates against that response's documented schema (error bodies too).

Schemas are checked with openapi-schema-validator (OAS 3.0's `nullable`, OAS 3.1's JSON Schema),
formats included. Nothing here knows a cloud: each test module says which spec and prefix.
"""

from __future__ import annotations

import copy
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from jsonschema.exceptions import ValidationError
from openapi_schema_validator import (
    OAS30Validator,
    OAS31Validator,
    oas30_format_checker,
    oas31_format_checker,
)
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

HERE = Path(__file__).resolve().parent
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
DROP = object()  # SpecOracle.amend(pointer, DROP, why): remove what the spec wrongly documents


@dataclass
class Exchange:
    """One request the adapter sent and the answer it got (None: no answer, e.g. a transport error)."""

    method: str
    path: str  # relative to the adapter's base URL, no query
    query: list[tuple[str, str]]
    content_type: str
    body: bytes
    status: int | None = None
    answer_type: str = ""
    answer: bytes = b""

    @classmethod
    def of(cls, response: httpx.Response, base: str = "") -> Exchange:
        """The exchange of a call made by hand (`base`: the client's base path, left off the path)."""
        req = response.request
        return cls(method=req.method, path=req.url.path.removeprefix(base.rstrip("/")),
                   query=urllib.parse.parse_qsl(req.url.query.decode(), keep_blank_values=True),
                   content_type=req.headers.get("content-type", ""), body=bytes(req.content),
                   status=response.status_code, answer_type=response.headers.get("content-type", ""),
                   answer=response.content)

    def json(self) -> Any:
        return json.loads(self.body)

    def answer_json(self) -> Any:
        return json.loads(self.answer)

    def __str__(self) -> str:
        return f"{self.method} {self.path} -> {self.status}"


@dataclass
class Exchanges:
    """Every exchange of one adapter's client, in order."""

    seen: list[Exchange] = field(default_factory=list)
    _base: str = ""
    _pending: dict[int, Exchange] = field(default_factory=dict)

    @classmethod
    def attach(cls, adapter: Any) -> Exchanges:
        client: httpx.AsyncClient = adapter._http()
        rec = cls(_base=client.base_url.path.rstrip("/"))
        client.event_hooks["request"].append(rec._request)
        client.event_hooks["response"].append(rec._response)
        return rec

    async def _request(self, request: httpx.Request) -> None:
        path = request.url.path
        if self._base and path.startswith(self._base):
            path = path[len(self._base):] or "/"
        ex = Exchange(method=request.method, path=path,
                      query=urllib.parse.parse_qsl(request.url.query.decode(), keep_blank_values=True),
                      content_type=request.headers.get("content-type", ""), body=bytes(request.content))
        self._pending[id(request)] = ex
        self.seen.append(ex)

    async def _response(self, response: httpx.Response) -> None:
        await response.aread()
        ex = self._pending.pop(id(response.request), None)
        if ex is not None:
            ex.status = response.status_code
            ex.answer_type = response.headers.get("content-type", "")
            ex.answer = response.content

    def find(self, method: str, path: str, status: int) -> Exchange:
        """A copy (to mutate) of the first exchange `method path -> status`."""
        found = [e for e in self.seen if e.method == method and e.path == path and e.status == status]
        assert found, f"no {method} {path} -> {status} in {[str(e) for e in self.seen]}"
        return copy.deepcopy(found[0])

    def calls(self) -> list[str]:
        return [f"{e.method} {e.path}" for e in self.seen]

    def clear(self) -> None:
        self.seen.clear()


class SpecOracle:
    def __init__(self, cloud: str, prefix: str = "",
                 general: dict[int, dict[str, Any]] | None = None) -> None:
        """`general`: statuses the vendor documents for every operation outside the operations'
        own `responses` (e.g. in info.description: a rate limit's 429), each with its body's schema."""
        self.cloud = cloud
        self.prefix = prefix.rstrip("/")
        self.general = general or {}
        self.spec: dict[str, Any] = json.loads((HERE / cloud / "openapi.json").read_text())
        v31 = str(self.spec.get("openapi", "")).startswith("3.1")
        self._cls = OAS31Validator if v31 else OAS30Validator
        self._formats = oas31_format_checker if v31 else oas30_format_checker
        # The whole document as the resource at "", so a subschema's "#/components/..." resolves.
        self._registry: Registry = Registry().with_resource(
            "", Resource.from_contents(self.spec, default_specification=DRAFT202012))
        self._templates = [(self._pattern(t), t) for t in self.spec["paths"]]
        self.amended: list[tuple[str, Any, str]] = []

    def amend_enum(self, pointer: str, add: list[Any], why: str) -> None:
        """Add `add` to the enum at `pointer` (a JSON pointer into the extract) where the vendor's
        spec lags its API; `why` says what shows the API has them (required: no silent amendments)."""
        assert why.strip(), "say why the vendor's enum is stale"
        node: Any = self.spec
        for part in pointer.lstrip("/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        node["enum"] = [*node["enum"], *[v for v in add if v not in node["enum"]]]
        self.amended.append((pointer, add, why))

    def amend(self, pointer: str, value: Any, why: str) -> Any:
        """Set the node at `pointer` (a JSON pointer into the extract, whose parent exists; an object
        member or a list item) to `value`, or remove it when `value` is DROP, where the vendor's spec
        is wrong about its own API (an unofficial reconstruction's especially); `why` cites what shows
        the real behaviour (required: no silent amendments). Returns the node it replaced (None when
        there was none), so the caller can check it amended what it meant to."""
        assert why.strip(), "say what shows the API differs from the spec"
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in pointer.lstrip("/").split("/")]
        node: Any = self.spec
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) else last
        old = node[key] if (key < len(node) if isinstance(node, list) else key in node) else None
        if value is DROP:
            del node[key]
        elif isinstance(node, list) and key == len(node):
            node.append(value)
        else:
            node[key] = value
        self._templates = [(self._pattern(t), t) for t in self.spec["paths"]]  # a path may be new
        self.amended.append((pointer, value, why))
        return old

    # ------------------------------------------------------------------ schemas

    def errors(self, instance: Any, schema: dict[str, Any]) -> list[str]:
        """How `instance` fails `schema` (one line per leaf error; empty when it validates)."""
        # The resolver is the document's (base URI ""), not one rooted at `schema`: a subschema's
        # "#/components/..." names the document's components.
        validator = self._cls(schema, format_checker=self._formats,
                              _resolver=self._registry.resolver())
        out = []
        for e in sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path)):
            out.extend(_leaves(e))
        return out

    def schema(self, name: str) -> dict[str, Any]:
        return {"$ref": f"#/components/schemas/{name}"}

    def _deref(self, node: Any) -> Any:
        while isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/"):
            target: Any = self.spec
            for part in node["$ref"][2:].split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    # ------------------------------------------------------------------ operations

    @staticmethod
    def _pattern(template: str) -> re.Pattern[str]:
        parts = re.split(r"(\{[^}]+\})", template)
        rx = "".join(f"(?P<{p[1:-1].replace('-', '_')}>[^/]+)" if p.startswith("{") else re.escape(p)
                     for p in parts)
        return re.compile(rx + r"\Z")

    def operation(self, method: str, path: str) -> tuple[str, dict[str, Any], dict[str, str]] | str:
        """(template, operation, path parameters), or why there is none."""
        full = self.prefix + path
        # A literal template wins over a parameterised one (/pods/status before /pods/{pod_id}).
        matches = sorted(((t, m) for rx, t in self._templates if (m := rx.match(full))),
                         key=lambda tm: tm[0].count("{"))
        if not matches:
            twin = full[:-1] if full.endswith("/") else full + "/"
            if any(rx.match(twin) for rx, _ in self._templates):
                return f"path {full} is not in the spec; {twin} is (trailing slash)"
            return f"path {full} is not in the spec"
        template, m = matches[0]
        item = self.spec["paths"][template]
        op = self._deref(item.get(method.lower()))  # a multi-file spec's operation may be a $ref
        if op is None:
            return f"{method} {template} is not documented (only {[x.upper() for x in item if x in METHODS]})"
        names = re.findall(r"\{([^}]+)\}", template)
        values = {n: urllib.parse.unquote(m.group(n.replace("-", "_"))) for n in names}
        return template, op, values

    # ------------------------------------------------------------------ checks

    def request_problems(self, ex: Exchange) -> list[str]:
        found = self.operation(ex.method, ex.path)
        if isinstance(found, str):
            return [found]
        template, op, path_values = found
        where = f"{ex.method} {template}"
        out: list[str] = []
        params = [self._deref(p) for p in op.get("parameters", [])]
        sent: dict[str, list[str]] = {}
        for k, v in ex.query:
            sent.setdefault(k, []).append(v)
        for p in params:
            name, loc, schema = p["name"], p["in"], p.get("schema", {})
            if loc == "path":
                out += [f"{where}: path parameter {name}: {e}"
                        for e in self.errors(_coerce(path_values.get(name, ""), schema, self), schema)]
            elif loc == "query":
                if name not in sent:
                    if p.get("required"):
                        out.append(f"{where}: required query parameter {name} not sent")
                    continue
                values = sent.pop(name)
                value: Any = values if self._is_array(schema) else values[-1]
                out += [f"{where}: query parameter {name}={values}: {e}"
                        for e in self.errors(_coerce(value, schema, self), schema)]
        out += [f"{where}: query parameter {k} is not documented" for k in sent]
        body_spec = self._deref(op.get("requestBody"))
        if not ex.body:
            if body_spec and body_spec.get("required"):
                out.append(f"{where}: the request body is required and none was sent")
            return out
        if not body_spec:
            if ex.method in ("GET", "DELETE") and ex.body:
                out.append(f"{where}: a body was sent ({len(ex.body)} bytes) where none is documented")
            return out
        content = body_spec.get("content", {})
        media = ex.content_type.split(";")[0].strip()
        if media not in content:
            return [*out, f"{where}: request content type {media!r} is not documented ({list(content)})"]
        schema = content[media].get("schema", {})
        if _is_json(media):
            instance: Any = json.loads(ex.body)
        elif media == "application/x-www-form-urlencoded":
            instance = dict(urllib.parse.parse_qsl(ex.body.decode()))
        else:
            return out
        out += [f"{where}: request body: {e}" for e in self.errors(instance, schema)]
        return out

    def answer_problems(self, ex: Exchange) -> list[str]:
        if ex.status is None:
            return []
        found = self.operation(ex.method, ex.path)
        if isinstance(found, str):
            return []  # reported as a request problem
        template, op, _ = found
        where = f"{ex.method} {template} -> {ex.status}"
        responses = op.get("responses", {})
        documented = responses.get(str(ex.status)) or responses.get(f"{str(ex.status)[0]}XX") \
            or responses.get("default")
        if documented is None and ex.status in self.general:
            documented = {"content": {"application/json": {"schema": self.general[ex.status]}}}
        if documented is None:
            return [f"{where}: status {ex.status} is not documented (only {sorted(responses)})"]
        documented = self._deref(documented)
        content = documented.get("content") or {}
        if not ex.answer:
            return []
        media = ex.answer_type.split(";")[0].strip()
        if not content:
            return []  # documented without a body: whatever comes is not described
        if media not in content:
            return [f"{where}: answer content type {media!r} is not documented ({list(content)})"]
        schema = content[media].get("schema")
        if schema is None or not _is_json(media):
            return []
        return [f"{where}: answer body: {e}" for e in self.errors(json.loads(ex.answer), schema)]

    def problems(self, ex: Exchange) -> list[str]:
        return self.request_problems(ex) + self.answer_problems(ex)

    def check(self, exchanges: Exchanges | list[Exchange]) -> list[str]:
        """Every problem of every exchange, each prefixed with the exchange it is from."""
        seen = exchanges.seen if isinstance(exchanges, Exchanges) else exchanges
        return [f"[{ex}] {p}" for ex in seen for p in self.problems(ex)]

    def templates(self, exchanges: Exchanges) -> set[str]:
        """`METHOD template` of each exchange (the template without this oracle's prefix)."""
        out = set()
        for e in exchanges.seen:
            found = self.operation(e.method, e.path)
            named = found[0].removeprefix(self.prefix) if isinstance(found, tuple) else e.path
            out.add(f"{e.method} {named}")
        return out

    def _is_array(self, schema: dict[str, Any]) -> bool:
        schema = self._deref(schema)
        t = schema.get("type")
        return t == "array" or (isinstance(t, list) and "array" in t) or \
            any(self._is_array(s) for s in schema.get("anyOf", []) + schema.get("oneOf", []))


def _is_json(media: str) -> bool:
    return media == "application/json" or media.endswith("+json")  # e.g. RFC 9457 problem+json


def _coerce(value: Any, schema: dict[str, Any], oracle: SpecOracle) -> Any:
    """A query/path string as the type its schema names (the wire has only strings)."""
    schema = oracle._deref(schema)
    if isinstance(value, list):
        items = schema.get("items", {})
        for alt in schema.get("anyOf", []) + schema.get("oneOf", []):
            alt = oracle._deref(alt)
            if alt.get("type") == "array":
                items = alt.get("items", {})
        return [_coerce(v, items, oracle) for v in value]
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    for alt in schema.get("anyOf", []) + schema.get("oneOf", []):
        t = oracle._deref(alt).get("type")
        types += [t] if isinstance(t, str) else list(t or [])
    for t in types:
        try:
            if t == "integer":
                return int(value)
            if t == "number":
                return float(value)
        except ValueError:
            continue
        if t == "boolean" and value in ("true", "false"):
            return value == "true"
    return value


def _leaves(error: ValidationError) -> list[str]:
    """The innermost reasons of a (possibly anyOf/oneOf) failure, with where in the document."""
    if error.context:
        best = [e for e in error.context if e.validator not in ("type",)] or list(error.context)
        return [f"{_where(error)}: {error.message[:160]} ({'; '.join(_leaf(e) for e in best[:3])})"]
    return [_leaf(error)]


def _leaf(error: ValidationError) -> str:
    return f"{_where(error)}: {error.message[:200]}"


def _where(error: ValidationError) -> str:
    return "/" + "/".join(str(p) for p in error.absolute_path)

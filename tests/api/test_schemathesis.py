"""schemathesis against the real app (create_app) on the API tests' harness: temp SQLite, the
in-memory FakeCloud (connected, so routes get past "no connection") and a recording fake in place
of Temporal. Every operation, valid and invalid requests: no 5xx, and every status, content type,
body and header as OpenAPI documents them. Bounded and derandomized: the same cases on every run.

More examples against a running `make run`: `make fuzz` (README, Testing)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, cast

import pytest
import schemathesis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from pydantic import BaseModel
from schemathesis.checks import (
    allow_header_conformance,
    content_type_conformance,
    load_all_checks,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation.feedback import FeedbackSources
from schemathesis.pytest._test_builder import (
    build_operation_test,  # what schema.parametrize() builds each test with
)
from schemathesis.python._constants.orchestrator import make_constants_value_source

from api.app import create_app
from api.deps import AppDeps
from api.guard import OPEN_SESSIONS
from messages.connection import ConnectResult
from messages.workflows import WorkflowRef
from providers import registry
from store.secrets import SecretBox
from tests.api.conftest import GOOD_KEY, TOKEN, FakeCloud, FakeWorkflows, app_serving

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, allow_header_conformance,
          response_schema_conformance, response_headers_conformance]
SECURED = ("/api/", "/codec/")
MAX_EXAMPLES = 10  # per operation, after the coverage phase's boundary cases (`make fuzz`: 300)


class FakeFuzzWorkflows(FakeWorkflows):
    """Records every start and execute like FakeWorkflows, but verifies only Fake Cloud's
    credentials: any other cloud's adapter would call out to its endpoint, which the fuzzer makes up."""

    async def execute(self, ref: WorkflowRef[Any, Any], arg: BaseModel, *, workflow_id: str,
                      execution_timeout_s: float, attach: bool = False) -> Any:
        provider = getattr(arg, "provider", None)
        if provider != FakeCloud.id:
            self.executes.append((ref.name, arg, workflow_id))
            return ConnectResult(connection_id=getattr(arg, "connection_id", ""), ok=False,
                                 reason=f"{provider} is not verified under fuzzing")
        return await super().execute(ref, arg, workflow_id=workflow_id,
                                     execution_timeout_s=execution_timeout_s, attach=attach)


@dataclass
class FuzzTarget:
    """The app, with Fake Cloud connected and one allocation made, and what makes a generated case
    reach past the first refusal: random text is never a valid SSH key, credential or known id."""

    app: Any
    ssh_key: str
    ids: dict[str, str]  # path parameter -> an id that exists

    def make_realistic(self, case: Any) -> None:
        """Half the ids become real ones (an even length chooses: the same cases every run); keys
        become a valid one; Fake Cloud's credentials the good ones. Invalid shapes stay invalid."""
        for name, value in (case.path_parameters or {}).items():
            if name in self.ids and isinstance(value, str) and len(value) % 2 == 0:
                case.path_parameters[name] = self.ids[name]
        body = case.body
        if not isinstance(body, dict):
            return
        keys = body.get("ssh_public_keys")
        if isinstance(keys, list) and all(isinstance(k, str) for k in keys):
            body["ssh_public_keys"] = [self.ssh_key] * len(keys)
        if body.get("provider") == FakeCloud.id and isinstance(body.get("credentials"), dict):
            body["credentials"] = {"api_key": GOOD_KEY}


@pytest.fixture
def fuzz_target(engine: sa.Engine, box: SecretBox, ssh_key: str) -> FuzzTarget:
    deps = AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001",
                   workflows=FakeFuzzWorkflows(engine=engine, box=box))
    app = app_serving(deps)
    with TestClient(app, headers=AUTH) as client:
        r = client.post("/api/compute/connections",
                        json={"provider": FakeCloud.id, "credentials": {"api_key": GOOD_KEY}})
        assert r.status_code == 201, r.text
        connection_id = r.json()["id"]
        r = client.post("/api/compute/instances", json={"cloud": FakeCloud.id, "ssh_public_keys": [ssh_key]})
        assert r.status_code == 202, r.text
    return FuzzTarget(app=app, ssh_key=ssh_key,
                      ids={"connection_id": connection_id, "instance_id": r.json()["id"]})


@pytest.fixture
def fuzz_app(fuzz_target: FuzzTarget) -> Any:
    return fuzz_target.app


def _spec() -> dict[str, Any]:
    """The app's OpenAPI with FakeCloud among the clouds (its id in the enums), read at import so
    pytest gets one test per operation. (schemathesis.pytest.from_fixture, which would read it
    from the fixture, fails on pytest 9.2: it sets `node._nodeid`, which pytest no longer has.)"""
    registry.register_for_tests(FakeCloud)
    try:
        deps = AppDeps(engine=cast(Any, None), box=cast(Any, None), api_token=TOKEN,
                       installation_id="inst0001", workflows=cast(Any, None))
        return create_app(deps).openapi()
    finally:
        registry.unregister_for_tests(FakeCloud.id)


# Each test builds what it needs from session fixtures: pytest-xdist may spread them (tests/tiers.py).
TESTS_RUN_APART = True


schema = schemathesis.openapi.from_dict(_spec())
schema.config.update(headers=AUTH)
schema.config.generation.update(max_examples=MAX_EXAMPLES, deterministic=True)
# Each operation's test is built when it runs, not as pytest collects: `schema.parametrize()` builds
# all 63 as it collects (schemathesis generates the ~3,700 coverage-phase cases then, 3-4 CPU-s), and
# every xdist worker collects every test but runs a third of them. The build is the one the
# schemathesis pytest plugin makes (its seed is derived from the operation's label, as there).
OPERATIONS = {op.label: op for op in (result.ok() for result in schema.get_all_operations())}


@functools.cache
def _feedback() -> FeedbackSources:
    load_all_checks()
    return FeedbackSources(constants_value_source=make_constants_value_source(schema))


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_every_operation_answers_as_documented(operation: str, fuzz_target: FuzzTarget) -> None:
    """The coverage phase's boundary cases, then MAX_EXAMPLES generated ones, each checked by CHECKS."""
    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def answers_as_documented(case: Any) -> None:
        fuzz_target.make_realistic(case)
        case.call_and_validate(app=fuzz_target.app, headers=AUTH, checks=CHECKS)

    test = build_operation_test(config=schema.config, operation=OPERATIONS[operation],
                                test_func=answers_as_documented, given_kwargs={}, feedback=_feedback())
    test()


def test_openapi_documents_the_error_shape_and_cloud_enum(fuzz_app: Any) -> None:
    spec = TestClient(fuzz_app).get("/openapi.json").json()
    assert "HTTPValidationError" not in spec["components"]["schemas"]  # FastAPI's list-shaped 422
    assert FakeCloud.id in spec["components"]["schemas"]["InstanceCreate"]["properties"]["cloud"]["anyOf"][0][
        "enum"]
    for path, item in spec["paths"].items():
        for method, op in item.items():
            for code, response in op["responses"].items():
                if int(code) >= 400:
                    schema_ref = response["content"]["application/json"]["schema"]["$ref"]
                    assert schema_ref == "#/components/schemas/ErrorOut", (method, path, code)
            if path.startswith(SECURED) and (method.upper(), path) not in OPEN_SESSIONS:
                assert "401" in op["responses"], (method, path)
                assert "WWW-Authenticate" in op["responses"]["401"]["headers"]
            if "requestBody" in op:
                assert {"400", "413", "422"} <= set(op["responses"]), (method, path)
            if "{" in path:
                assert "404" in op["responses"], (method, path)


def test_every_secured_operation_refuses_a_missing_or_wrong_token(fuzz_app: Any) -> None:
    """Every documented operation under a secured prefix: 401 in the one shape, with WWW-Authenticate.
    (From OpenAPI: FastAPI 0.165 keeps included routers' routes out of `app.routes`.)"""
    checked = 0
    with TestClient(fuzz_app) as client:
        for path, item in client.get("/openapi.json").json()["paths"].items():
            if not path.startswith(SECURED):
                continue
            concrete = re.sub(r"\{[^}]*\}", "x", path)  # any value stands for an id
            for method in item:
                if (method.upper(), path) in OPEN_SESSIONS:  # logging out needs no token
                    continue
                for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
                    r = client.request(method, concrete, headers=headers, json={})
                    assert r.status_code == 401, (method, path, headers, r.text)
                    assert r.json() == {"detail": "missing or invalid bearer token"}
                    assert r.headers["www-authenticate"] == "Bearer"
                    checked += 1
    assert checked >= 27  # 9 operations x 3 ways of getting the token wrong, at least

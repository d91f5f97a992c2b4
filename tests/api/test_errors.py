"""One error shape for every non-2xx answer: `{detail, errors?}` (api/errors.py ErrorOut)."""

from __future__ import annotations

import httpx
from fastapi.testclient import TestClient

from api.app import create_app
from api.deps import AppDeps
from api.errors import error_response, summary, validation_errors
from tests.api.conftest import GOOD_KEY, FakeCloud


async def test_validation_errors_name_the_field_and_never_echo_the_value(client: httpx.AsyncClient) -> None:
    secret = "s3cr3t-value-never-echoed"
    r = await client.post("/api/compute/connections", json={
        "provider": FakeCloud.id, "credentials": {"api_key": [secret]}, "extra": secret})
    assert r.status_code == 422 and secret not in r.text
    body = r.json()
    assert set(body) == {"detail", "errors"}
    assert {tuple(e["loc"]) for e in body["errors"]} == {("body", "credentials"), ("body", "extra")}
    assert all(set(e) == {"loc", "msg", "type"} for e in body["errors"])
    assert "body.credentials: credentials.api_key must be a string, a number or true/false" in body["detail"]
    assert "body.extra: Extra inputs are not permitted" in body["detail"]


async def test_an_http_exception_answers_the_same_shape_without_errors(client: httpx.AsyncClient) -> None:
    r = await client.get("/api/compute/clouds", params={"cursor": "zzz"})
    assert r.status_code == 422
    assert r.json() == {"detail": "invalid cursor: not a cursor this API issued "
                                  "(pass next_cursor back unchanged)"}
    r = await client.get("/api/compute/nowhere")
    assert r.status_code == 404 and r.json() == {"detail": "Not Found"}


async def test_a_key_name_is_bounded_in_the_answer(client: httpx.AsyncClient) -> None:
    """An unknown key name that does not look like a field name is not echoed (the body could be
    a 1 MB key): `loc` says `<key>`."""
    r = await client.post("/api/compute/instances", headers={"Content-Type": "application/json"},
                          content=b'{"x' + b"k" * 5000 + b'": 1}')
    assert r.status_code == 422, r.text
    assert ["body", "<key>"] in [e["loc"] for e in r.json()["errors"]]
    assert len(r.text) < 3000


def test_field_errors_are_encodable_whatever_the_key() -> None:
    """A lone surrogate or a control character in a key name is not shown (`<key>`), never a 500 on
    encoding; a field-like key is."""
    fields = validation_errors([{"loc": ("body", "a\ud800", "b\x1b[31m", "gpu", 3), "msg": "Value error, bad",
                                 "type": "value_error", "input": "secret"}])
    assert fields[0].loc == ["body", "<key>", "<key>", "gpu", 3] and fields[0].msg == "bad"
    assert summary(fields, 1) == "body.<key>.<key>.gpu[3]: bad"
    assert b"secret" not in error_response(422, summary(fields, 1), errors=fields).body


async def test_a_405_lists_every_method_of_the_path(client: httpx.AsyncClient) -> None:
    """Starlette's own 405 names only the first route whose path matched (`Allow: POST`)."""
    for path, allowed in [("/api/compute/connections", "GET, POST"), ("/api/compute/instances", "GET, POST"),
                          ("/api/compute/instances/x", "GET")]:
        r = await client.request("PUT", path)
        assert r.status_code == 405 and r.headers["allow"] == allowed, (path, r.headers)
        assert r.json() == {"detail": "Method Not Allowed"}


def test_a_bug_answers_500_in_the_one_shape_with_nothing_of_it(engine: object, box: object) -> None:
    app = create_app(AppDeps(engine=engine, box=box, api_token="t",  # type: ignore[arg-type]
                             installation_id="inst0001", workflows=None))  # type: ignore[arg-type]

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError(f"internal detail {GOOD_KEY}")

    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/boom", headers={"Authorization": "Bearer t"})  # any route but the public ones needs it
    assert r.status_code == 500 and r.json() == {"detail": "internal error"} and GOOD_KEY not in r.text

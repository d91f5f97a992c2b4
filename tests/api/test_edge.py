"""The API's edge (api/guard.py and the request models): the token before any body byte, a 1 MiB cap,
strict JSON, no control characters in names, no input echoed or logged, nothing stored on a 4xx."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

import logsafe
from api.guard import MAX_BODY
from store.models import Connection, IdempotencyRecord, Instance
from tests.api.conftest import GOOD_KEY, TOKEN, FakeWorkflows, connect_fake

CHUNK = 64 * 1024


class CountedBody:
    """A request body streamed in pieces of exactly CHUNK bytes, counting how many the app pulled."""

    def __init__(self, total: int, prefix: bytes = b'{"provider": "') -> None:
        self.total, self.prefix, self.pulled = total, prefix, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sent = 0
        while sent < self.total:
            self.pulled += 1
            piece = self.prefix + b"A" * (CHUNK - len(self.prefix)) if sent == 0 else b"A" * CHUNK
            sent += len(piece)
            yield piece


def stored(engine: sa.Engine) -> list[list[dict[str, Any]]]:
    """Every connection, instance and idempotency record: what a refused request must not change."""
    with Session(engine) as session:
        return [[row.model_dump() for row in session.exec(select(model)).all()]
                for model in (Connection, Instance, IdempotencyRecord)]


# --------------------------------------------------------------------------- token before body


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer "}])
@pytest.mark.parametrize("path", ["/api/compute/connections", "/api/compute/instances", "/codec/decode"])
async def test_unauthenticated_body_is_never_read(client: httpx.AsyncClient, headers: dict[str, str],
                                                  path: str) -> None:
    client.headers.pop("Authorization")
    body = CountedBody(300 * CHUNK)
    r = await client.post(path, content=body, headers={**headers, "Content-Type": "application/json"})
    assert r.status_code == 401, r.text
    assert r.json() == {"detail": "missing or invalid bearer token"}
    assert r.headers["www-authenticate"] == "Bearer"
    assert body.pulled <= 1


async def test_health_and_docs_need_no_token(client: httpx.AsyncClient) -> None:
    client.headers.pop("Authorization")
    for path in ["/healthz", "/openapi.json", "/docs"]:
        assert (await client.get(path)).status_code == 200, path


# --------------------------------------------------------------------------- 1 MiB


async def test_a_declared_length_above_the_limit_is_refused_unread(client: httpx.AsyncClient) -> None:
    body = CountedBody(300 * CHUNK)
    r = await client.post("/api/compute/connections", content=body,
                          headers={"Content-Type": "application/json", "Content-Length": str(300 * CHUNK)})
    assert r.status_code == 413, r.text
    assert str(MAX_BODY) in r.json()["detail"]
    assert body.pulled <= 1


async def test_a_streamed_body_is_cut_off_once_past_the_limit(client: httpx.AsyncClient,
                                                              workflows: FakeWorkflows) -> None:
    body = CountedBody(300 * CHUNK)  # no Content-Length: chunked
    r = await client.post("/api/compute/instances", content=body,
                          headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert r.json() == {"detail": f"request body larger than {MAX_BODY} bytes, the limit of this route"}
    assert body.pulled == MAX_BODY // CHUNK + 1  # the one that went past the limit, and no more
    assert workflows.starts == []


async def test_the_limit_is_exact(client: httpx.AsyncClient) -> None:
    def padded(size: int) -> bytes:
        start = json.dumps({"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY}}).encode()
        return start[:-1] + b" " * (size - len(start)) + b"}"

    at_limit = await client.post("/api/compute/connections", content=padded(MAX_BODY),
                                 headers={"Content-Type": "application/json"})
    assert at_limit.status_code == 201, at_limit.text  # read and handled
    over = await client.post("/api/compute/connections", content=padded(MAX_BODY + 1),
                             headers={"Content-Type": "application/json"})
    assert over.status_code == 413


async def test_a_422_never_echoes_the_body(client: httpx.AsyncClient) -> None:
    marker = "ECHO-" + "k" * 900_000
    for body in [{"provider": "fakecloud", marker: 1},
                 {"provider": "fakecloud", "credentials": {marker: "v"}},
                 {"cloud": "fakecloud", "ssh_public_keys": ["x"], marker[:70]: {marker: 1}}]:
        path = "/api/compute/instances" if "cloud" in body else "/api/compute/connections"
        r = await client.post(path, json=body)
        assert r.status_code == 422, r.text[:300]
        assert "ECHO-" not in r.text and len(r.content) < 2000, r.text[:300]
        assert all("<key>" in e["loc"] for e in r.json()["errors"] if e["type"] != "value_error")


# --------------------------------------------------------------------------- strict JSON


STRICT_CASES = [
    ("/api/compute/connections", b'{"provider": "fakecloud", "credentials": {"api_key": NaN}}',
     "body.credentials.api_key: NaN is not valid JSON"),
    ("/api/compute/connections", b'{"provider": "fakecloud", "credentials": {"api_key": Infinity}}',
     "body.credentials.api_key: Infinity is not valid JSON"),
    ("/api/compute/instances", b'{"cloud": "fakecloud", "gpu_count": -Infinity, "ssh_public_keys": ["k"]}',
     "body.gpu_count: -Infinity is not valid JSON"),
    ("/api/compute/instances", b'NaN', "body: NaN is not valid JSON"),
    ("/api/compute/connections",
     b'{"provider": "fakecloud", "credentials": {"api_key": "MARKER-\\ud800-secret"}}',
     "body.credentials.api_key: contains a lone surrogate"),
    ("/api/compute/connections", b'{"provider": "fakecloud", "name": "MARKER\\udfff"}',
     "body.name: contains a lone surrogate"),
    ("/api/compute/instances", b'{"cloud": "fakecloud", "ssh_public_keys": ["ok", "MARKER\\udc00"]}',
     "body.ssh_public_keys[1]: contains a lone surrogate"),
    ("/api/compute/connections", b'{"provider": "fakecloud", "credentials": {"MARKER\\ud800": "v"}}',
     "body.credentials: a key contains a lone surrogate"),
]


@pytest.mark.parametrize(("path", "body", "reason"), STRICT_CASES)
async def test_nan_infinity_and_lone_surrogates_are_a_422_saying_where(
        client: httpx.AsyncClient, engine: sa.Engine, workflows: FakeWorkflows,
        path: str, body: bytes, reason: str) -> None:
    await connect_fake(client)
    before = stored(engine)
    r = await client.post(path, content=body, headers={"Content-Type": "application/json",
                                                       "Idempotency-Key": "strict-1"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(reason), r.text
    assert "MARKER" not in r.text
    assert stored(engine) == before
    assert workflows.starts == []


async def test_forged_cursors_with_nan_or_surrogates_are_a_422(client: httpx.AsyncClient) -> None:
    import base64

    for kind in ["instances", "connections", "clouds"]:
        for position in ['"i": "MARKER\\ud800"', '"i": NaN', '"t": Infinity, "i": "x"']:
            raw = f'{{"v": 1, "k": "{kind}", "t": "2024-01-01T00:00:00", {position}}}'.encode()
            cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
            r = await client.get(f"/api/compute/{kind}", params={"cursor": cursor})
            assert r.status_code == 422, (kind, position, r.text)
            assert "MARKER" not in r.text


@pytest.mark.parametrize("encoded", ["%ED%A0%80", "%FF", "%C0%AF", "x%00y"])
async def test_odd_bytes_in_paths_and_queries_are_4xx(client: httpx.AsyncClient, encoded: str) -> None:
    await connect_fake(client)
    for method, url in [("GET", f"/api/compute/instances/{encoded}"),
                        ("POST", f"/api/compute/instances/{encoded}/terminate"),
                        ("DELETE", f"/api/compute/connections/{encoded}"),
                        ("GET", f"/api/compute/backends/{encoded}/offers"),
                        ("GET", f"/api/compute/backends/fakecloud/offers?gpu={encoded}&region={encoded}"),
                        ("GET", f"/api/compute/instances?project={encoded}"),
                        ("GET", f"/api/compute/connections?cursor={encoded}")]:
        r = await client.request(method, url)
        assert r.status_code < 500, (url, r.status_code, r.text)
        if r.status_code >= 400:
            assert "\\ufffd" not in r.text and "\ufffd" not in r.text, (url, r.text)  # not echoed


# --------------------------------------------------------------------------- names


CONTROLS = ["\x00", "\x1b[2J", "\r", "\x7f", "\x9b", "\u202e", "\u2066", "\u2069", "\u200b", "\u200d",
            "\ufeff", "\u2028"]


@pytest.mark.parametrize("char", CONTROLS, ids=lambda c: f"U+{ord(c[0]):04X}")
async def test_control_and_bidi_characters_in_names_are_refused(
        client: httpx.AsyncClient, engine: sa.Engine, workflows: FakeWorkflows, ssh_key: str,
        char: str) -> None:
    conn = await connect_fake(client)
    before, starts = stored(engine), len(workflows.starts)
    text = f"gpu{char}box"
    requests = [
        ("/api/compute/connections",
         {"provider": "fakecloud", "name": text, "credentials": {"api_key": GOOD_KEY}}, ["body", "name"]),
        ("/api/compute/connections", {"provider": "fakecloud", "credentials": {text: GOOD_KEY}},
         ["body", "credentials", "<key>", "[key]"]),
        *[("/api/compute/instances", {"cloud": "fakecloud", "ssh_public_keys": [ssh_key], field: text},
           ["body", field]) for field in ("name", "gpu", "region", "image")],
        ("/api/compute/instances", {"connection_id": text, "ssh_public_keys": [ssh_key]},
         ["body", "connection_id"]),
    ]
    for path, body, loc in requests:
        r = await client.post(path, json=body, headers={"Idempotency-Key": f"names-{loc[-1]}"})
        assert r.status_code == 422, (body, r.text)
        errors = r.json()["errors"]
        assert any(e["loc"] == loc and "control or formatting characters" in e["msg"] for e in errors), errors
    assert stored(engine) == before and len(workflows.starts) == starts
    assert conn["name"] == "Fake Cloud"


async def test_names_in_any_script_are_accepted(client: httpx.AsyncClient, ssh_key: str) -> None:
    name = "Übung – GPU 東京 🚀 עברית"
    r = await client.post("/api/compute/connections",
                          json={"provider": "fakecloud", "name": name, "credentials": {"api_key": GOOD_KEY}})
    assert r.status_code == 201 and r.json()["name"] == name, r.text
    r = await client.post("/api/compute/instances",
                          json={"cloud": "fakecloud", "ssh_public_keys": [ssh_key], "name": "東京-run 🚀"})
    assert r.status_code == 202, r.text


# --------------------------------------------------------------------------- nothing stored, nothing logged


MARKER = "MRK7q2x"


@dataclass
class Bad:
    method: str
    url: str
    body: Any = None  # bytes: sent as is (application/json); else json=
    headers: dict[str, str] | None = None


def raw(credentials_tail: str) -> bytes:
    """A connection body as text, its credentials object ending with `credentials_tail`."""
    return ('{"provider": "fakecloud", "credentials": {' + credentials_tail).encode()


def bad_requests(ssh_key: str) -> list[Bad]:
    """Refused requests, each carrying MARKER where a caller could put a secret. (A value shaped like
    an id — a cloud or instance id — is quoted back in its 4xx; these are not shaped like one.)"""
    secret = f"sk-{MARKER}-secret"
    conn = "/api/compute/connections"
    inst = "/api/compute/instances"
    return [
        Bad("POST", conn, {"provider": "fakecloud", "credentials": {"api_key": 1, "other": secret}}),
        Bad("POST", conn, {"provider": "fakecloud", "credentials": {"api_key": [secret]}}),
        Bad("POST", conn, {"provider": f"nope {MARKER}", "credentials": {"api_key": secret}}),
        Bad("POST", conn, {"provider": "fakecloud", "name": f"{MARKER}\x1b[2J",
                           "credentials": {"api_key": secret}}),
        Bad("POST", conn, {"provider": "fakecloud", "credentials": {"api_key": secret}, f"x {MARKER}": 1}),
        Bad("POST", conn, {"provider": "fakecloud", "credentials": {"api_key": secret},
                           "endpoint": f"https://user:{MARKER}@cloud.example\x00/"}),
        Bad("POST", conn, raw(f'"api_key": "{secret}\\ud800"}}}}')),
        Bad("POST", conn, raw(f'"api_key": "{secret}", "n": NaN}}}}')),
        Bad("POST", conn, raw(f'"api_key": "{secret}"')),  # cut short
        Bad("POST", conn, secret.encode() * 200_000),  # over the limit
        Bad("POST", conn, {"provider": "fakecloud", "credentials": {"api_key": secret}},
            headers={"Authorization": f"Bearer {MARKER}"}),
        Bad("POST", inst, {"cloud": "fakecloud", "ssh_public_keys": [ssh_key], "name": f"{MARKER}\u202e"}),
        Bad("POST", inst, {"cloud": "fakecloud", "ssh_public_keys": [ssh_key], "gpu_count": f"{MARKER}"}),
        Bad("POST", inst, {"connection_id": f"c {MARKER}", "ssh_public_keys": [ssh_key]}),
        Bad("POST", inst, {"cloud": "fakecloud", "ssh_public_keys": [ssh_key], "project": f"P {MARKER}"}),
        Bad("POST", inst, {"cloud": "fakecloud", "ssh_public_keys": [ssh_key]},
            headers={"Idempotency-Key": f"{MARKER}\t"}),
        Bad("GET", f"/api/compute/instances?project={MARKER}%ED%A0%80&limit={MARKER}"),
        Bad("GET", f"/api/compute/instances?cursor={MARKER}"),
        Bad("GET", f"/api/compute/backends/fakecloud/offers?gpu={MARKER}&gpu_count={MARKER}"),
        Bad("GET", f"/api/compute/instances/{MARKER}%20x"),
        Bad("DELETE", f"/api/compute/connections/{MARKER}%1b"),
        Bad("POST", f"/api/compute/instances/{MARKER}%E2%80%AE/terminate"),
        Bad("GET", f"/api/compute/backends/{MARKER}%20x/offers"),
    ]


async def send(client: httpx.AsyncClient, bad: Bad) -> httpx.Response:
    headers = {"Idempotency-Key": "bad-1", **(bad.headers or {})}
    if isinstance(bad.body, bytes):
        return await client.request(bad.method, bad.url, content=bad.body,
                                    headers={**headers, "Content-Type": "application/json"})
    return await client.request(bad.method, bad.url, json=bad.body, headers=headers)


def leaked(records: list[logging.LogRecord]) -> list[str]:
    """Every log record that holds MARKER in its message, args or exception text."""
    found = []
    for rec in records:
        if rec.name == "httpx" and isinstance(rec.args, tuple) and str(rec.args[1]).startswith("http://api/"):
            continue  # this test's own client, not the API
        exc_text = rec.exc_text or (logging.Formatter().formatException(rec.exc_info) if rec.exc_info else "")
        if MARKER in f"{rec.getMessage()} {rec.args!r} {exc_text}":
            found.append(f"{rec.name}: {rec.getMessage()[:200]}")
    return found


async def test_refused_requests_store_nothing_and_log_no_input(
        client: httpx.AsyncClient, engine: sa.Engine, workflows: FakeWorkflows, ssh_key: str,
        caplog: pytest.LogCaptureFixture) -> None:
    await connect_fake(client)
    caplog.set_level(logging.DEBUG)
    before, starts, executes = stored(engine), len(workflows.starts), len(workflows.executes)
    for bad in bad_requests(ssh_key):
        r = await send(client, bad)
        assert 400 <= r.status_code < 500, (bad, r.status_code, r.text[:300])
        assert r.json()["detail"], bad
        assert MARKER not in r.text, (bad, r.text[:300])
    assert stored(engine) == before and len(workflows.starts) == starts
    # Only verifications ran (the well-formed ones with a wrong key), and each was refused.
    assert all(workflows.results[wid].ok is False for _, _, wid in workflows.executes[executes:])
    assert leaked(caplog.records) == []


async def test_a_refused_verification_leaves_its_key_unused(client: httpx.AsyncClient,
                                                            engine: sa.Engine) -> None:
    before = stored(engine)
    wrong = {"provider": "fakecloud", "credentials": {"api_key": "wrong"}}
    r = await client.post("/api/compute/connections", json=wrong, headers={"Idempotency-Key": "k-refused"})
    assert r.status_code == 400, r.text
    assert stored(engine) == before
    right = {"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY}}  # corrected, same key
    r = await client.post("/api/compute/connections", json=right, headers={"Idempotency-Key": "k-refused"})
    assert r.status_code == 201, r.text


async def test_an_unhandled_error_is_a_500_logged_by_type_and_route_only(
        client: httpx.AsyncClient, workflows: FakeWorkflows, ssh_key: str,
        caplog: pytest.LogCaptureFixture) -> None:
    await connect_fake(client)
    caplog.set_level(logging.DEBUG)
    workflows.fail_with = RuntimeError(f"could not start: name {MARKER}")  # e.g. an exception quoting input
    r = await client.post("/api/compute/instances",
                          json={"cloud": "fakecloud", "ssh_public_keys": [ssh_key], "name": MARKER})
    assert r.status_code == 500
    assert r.json() == {"detail": "internal error"}
    assert leaked(caplog.records) == []
    logged = [rec.getMessage() for rec in caplog.records if rec.name == "api.guard"]
    assert len(logged) == 1, logged
    assert logged[0].startswith("unhandled error in POST /api/compute/instances: RuntimeError at "), logged
    assert "in create_instance" in logged[0], logged


# --------------------------------------------------------------------------- process logging (logsafe)


def test_logged_exceptions_show_type_and_frames_never_the_message() -> None:
    try:
        f"credential {MARKER}\ud800".encode()
    except UnicodeEncodeError:
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", None, exc_info=__import__(
            "sys").exc_info())
    text = logsafe.WithheldFormatter("%(message)s").format(record)
    assert MARKER not in text
    assert "UnicodeEncodeError (message withheld" in text and "test_logged_exceptions" in text


def test_a_withheld_application_error_still_names_its_kind() -> None:
    """gpuprov's error kinds are a fixed vocabulary, never input: the line keeps the kind (a capacity
    refusal tells itself from a bug) and withholds the message; any other type is not shown."""
    from temporalio.exceptions import ApplicationError

    from messages.enums import ErrorKind

    lines = []
    for kind in (ErrorKind.CAPACITY, f"custom {MARKER}"):
        try:
            raise ApplicationError(f"no capacity for {MARKER}", type=kind)
        except ApplicationError:
            record = logging.LogRecord("x", logging.WARNING, __file__, 1, "failed", None,
                                       exc_info=__import__("sys").exc_info())
        lines.append(logsafe.WithheldFormatter("%(message)s").format(record).splitlines()[-1])
    assert lines == ["ApplicationError [CapacityError] (message withheld: it may hold input)",
                     "ApplicationError (message withheld: it may hold input)"]


def test_handlers_set_up_by_others_withhold_exception_messages() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("tests.edge.withheld")
    logger.addHandler(handler)
    try:
        logsafe.withhold_in("tests.edge.withheld")
        try:
            raise KeyError(f"name {MARKER}")
        except KeyError:
            logger.exception("Exception in ASGI application")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert MARKER not in text
    assert "ERROR Exception in ASGI application" in text and "KeyError (message withheld" in text


def test_access_lines_lose_their_query_strings_and_url_loggers_are_quiet() -> None:
    line = ("127.0.0.1:5", "GET", f"/api/compute/instances?project={MARKER}", "1.1", 200)
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', line,
                               None)
    assert logsafe.DropQueryString().filter(record)
    assert record.getMessage() == '127.0.0.1:5 - "GET /api/compute/instances HTTP/1.1" 200'
    logsafe.quiet_url_loggers()
    assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)


def test_strict_json_is_what_the_guard_and_cursors_use() -> None:
    from api import strict_json

    assert strict_json.loads(b'{"a": [1, 2.5, "\\u00e9\\ud83d\\ude80"]}') == {"a": [1, 2.5, "é🚀"]}
    with pytest.raises(strict_json.StrictJsonError, match=r"^body\.a\[1\]\.<key>: NaN"):
        strict_json.loads('{"a": [0, {"' + MARKER * 20 + '": NaN}]}')
    with pytest.raises(ValueError):
        strict_json.loads(b"{")
    assert json.loads("NaN") != json.loads("NaN")  # what Python's json alone lets through

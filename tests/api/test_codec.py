"""The Web UI's codec endpoint: Temporal's remote codec protocol, the API's token or a session cookie,
CORS for the UI's origin only."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet

from api.deps import AppDeps
from api.routers import codec
from messages.allocation import AllocateRequest
from store.secrets import SecretBox
from tests.api.conftest import TOKEN
from workflows.codec import key_id
from workflows.converter import data_converter

UI = "http://127.0.0.1:8233"
REQUEST = AllocateRequest(allocation_id="al-codec02", connection_id="cn-1", cloud="fake", name="blue-heron",
                          ssh_public_keys=["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForCodecTests x"])


def wire(payloads: list[Any]) -> dict[str, Any]:
    """Payload protos as the UI sends them (protobuf JSON: bytes base64-encoded)."""
    return codec.from_protos(payloads)


def decoded_json(body: dict[str, Any]) -> list[bytes]:
    return [base64.b64decode(p["data"]) for p in body["payloads"]]


@pytest.fixture
async def encrypted(box: SecretBox) -> dict[str, Any]:
    return wire(await data_converter(box.keys).encode([REQUEST, "plain text"]))


@pytest.fixture
def anonymous(client: httpx.AsyncClient) -> httpx.AsyncClient:
    client.headers.pop("Authorization")
    return client


async def test_decode_with_the_token_gives_the_payloads_back(client: httpx.AsyncClient,
                                                             encrypted: dict[str, Any]) -> None:
    assert b"blue-heron" not in str(encrypted).encode()
    r = await client.post("/codec/decode", json=encrypted, headers={"X-Namespace": "default"})
    assert r.status_code == 200, r.text
    first, second = decoded_json(r.json())
    assert b'"name":"blue-heron"' in first and second == b'"plain text"'
    assert base64.b64decode(r.json()["payloads"][0]["metadata"]["encoding"]) == b"json/plain"


async def test_encode_uses_the_current_key_and_decode_inverts_it(client: httpx.AsyncClient,
                                                                 box: SecretBox) -> None:
    plain = wire(data_converter(box.keys).payload_converter.to_payloads(["hello"]))
    r = await client.post("/codec/encode", json=plain)
    assert r.status_code == 200, r.text
    meta = r.json()["payloads"][0]["metadata"]
    assert base64.b64decode(meta["encryption-key-id"]).decode() == key_id(box.keys[0])
    assert (await client.post("/codec/decode", json=r.json())).json() == plain


async def test_without_a_valid_token_nothing_is_decoded(anonymous: httpx.AsyncClient,
                                                        encrypted: dict[str, Any]) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        for route in ("/codec/decode", "/codec/encode", "/codec/session"):
            r = await anonymous.post(route, json=encrypted, headers=headers)
            assert r.status_code == 401, (route, r.text)
            assert "blue-heron" not in r.text


async def test_a_payload_of_a_key_not_in_the_ring_is_refused_naming_the_key_id(
        client: httpx.AsyncClient) -> None:
    other = Fernet.generate_key()
    r = await client.post("/codec/decode", json=wire(await data_converter([other]).encode(["x"])))
    assert r.status_code == 422 and key_id(other) in r.json()["detail"], r.text


async def test_bad_bodies_get_a_4xx_that_does_not_echo_them(client: httpx.AsyncClient) -> None:
    r = await client.post("/codec/decode", json={"payloads": [{"metadata": {"encoding": "%%hunter2%%"}}]})
    assert r.status_code == 422 and "hunter2" not in r.text and "metadata" in r.text, r.text
    r = await client.post("/codec/decode", json={"payloads": "hunter2"})
    assert r.status_code == 422 and "hunter2" not in r.text, r.text
    r = await client.post("/codec/decode", content=b"{not json hunter2")
    assert r.status_code == 422 and "hunter2" not in r.text, r.text
    r = await client.post("/codec/decode", content=b"x" * (codec.MAX_BODY + 1))
    assert r.status_code == 413, r.text


# --------------------------------------------------------------------------- CORS


async def test_preflight_from_the_ui_is_answered_without_auth(anonymous: httpx.AsyncClient) -> None:
    r = await anonymous.options("/codec/decode", headers={
        "Origin": UI, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace"})
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == UI
    assert r.headers["access-control-allow-credentials"] == "true"
    assert "x-namespace" in r.headers["access-control-allow-headers"].lower()


async def test_other_origins_and_other_routes_get_no_cors(anonymous: httpx.AsyncClient) -> None:
    r = await anonymous.options("/codec/decode", headers={"Origin": "http://evil.example",
                                                          "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in r.headers
    r = await anonymous.options("/api/compute/clouds", headers={"Origin": UI,
                                                                "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in r.headers


async def test_answers_to_the_ui_carry_cors_headers(client: httpx.AsyncClient,
                                                    encrypted: dict[str, Any]) -> None:
    r = await client.post("/codec/decode", json=encrypted, headers={"Origin": UI})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == UI


# --------------------------------------------------------------------------- the browser's session


def session_cookie(r: httpx.Response) -> str:
    header = r.headers["set-cookie"]
    assert header.startswith(f"{codec.COOKIE}=")
    attrs = {a.strip().split("=")[0].lower() for a in header.split(";")[1:]}
    assert {"httponly", "path", "samesite", "max-age"} <= attrs
    assert "samesite=strict" in header.lower() and "path=/codec" in header.lower()
    return header.split(";")[0].split("=", 1)[1]


async def test_a_session_opened_with_the_token_lets_the_ui_decode(client: httpx.AsyncClient,
                                                                   encrypted: dict[str, Any]) -> None:
    r = await client.post("/codec/session")
    assert r.status_code == 200, r.text
    value = session_cookie(r)
    assert TOKEN not in value
    client.headers.pop("Authorization")
    r = await client.post("/codec/decode", json=encrypted, headers={
        "Origin": UI, "Cookie": f"{codec.COOKIE}={value}"})
    assert r.status_code == 200 and b"blue-heron" in decoded_json(r.json())[0], r.text
    # The cookie goes with any same-site request: another local origin may not use it.
    r = await client.post("/codec/decode", json=encrypted, headers={
        "Origin": "http://127.0.0.1:9999", "Cookie": f"{codec.COOKIE}={value}"})
    assert r.status_code == 403 and "blue-heron" not in r.text


async def test_forged_or_expired_sessions_are_refused(client: httpx.AsyncClient, box: SecretBox,
                                                      encrypted: dict[str, Any]) -> None:
    deps: AppDeps = client._transport.app.state.deps  # type: ignore[attr-defined]
    good = codec.session_value(deps, int(time.time()) + 60)
    expired = codec.session_value(deps, int(time.time()) - 1)
    later = f"{int(time.time()) + 10**6}.{good.split('.', 1)[1]}"  # expiry changed, MAC kept
    foreign = codec.session_value(AppDeps(**{**deps.__dict__, "box": SecretBox(Fernet.generate_key())}),
                                  int(time.time()) + 60)
    client.headers.pop("Authorization")
    for value, status in ((good, 200), (expired, 401), (later, 401), (foreign, 401), ("a.b", 401)):
        r = await client.post("/codec/decode", json=encrypted, headers={"Cookie": f"{codec.COOKIE}={value}"})
        assert r.status_code == status, (value, r.text)


async def test_the_session_page_needs_no_auth_and_holds_no_secret(anonymous: httpx.AsyncClient) -> None:
    r = await anonymous.get("/codec/")
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    assert "http://api/codec" in r.text and TOKEN not in r.text
    assert "script-src 'nonce-" in r.headers["content-security-policy"]
    r = await anonymous.delete("/codec/session")
    assert r.status_code == 204 and codec.COOKIE in r.headers["set-cookie"]


async def test_malformed_bodies_get_a_reason_never_a_5xx(client: httpx.AsyncClient) -> None:
    from tests.api.test_fuzz import BAD_BODIES

    shapes = [*BAD_BODIES, {"payloads": [None]}, {"payloads": [{"metadata": {"encoding": 7}}]},
              {"payloads": [{"metadata": {"encoding": "YmluYXJ5L2VuY3J5cHRlZA=="}, "data": "AAAA"}]},
              {"payloads": [{"data": "\udcff"}]}]
    for route in ("/codec/decode", "/codec/encode"):
        for bad in shapes:
            if isinstance(bad, bytes | str):
                r = await client.post(route, content=bad, headers={"Content-Type": "application/json"})
            else:
                r = await client.post(route, content=json.dumps(bad).encode())
            # (encoding a well-formed payload whose bytes are nonsense is fine: 200)
            assert r.status_code == 200 or (400 <= r.status_code < 500 and r.json()["detail"]), \
                (route, bad, r.status_code, r.text)


async def test_a_project_token_may_not_use_the_codec(client: httpx.AsyncClient) -> None:
    """The codec decodes every project's payloads: the admin token only."""
    from tests.api.conftest import make_project

    token = await make_project(client, "vision")
    r = await client.post("/codec/decode", json={"payloads": []},
                          headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403 and "admin token" in r.json()["detail"]
    r = await client.post("/codec/session", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403

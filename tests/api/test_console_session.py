"""Console sign-in (api/console/session.py, api/auth.py): a token becomes an HttpOnly, SameSite=Strict
session cookie; every write with the cookie needs the session's CSRF token; signing out ends the
session on the server; a project token's session sees only its project."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session, select

from api.auth import CONSOLE_COOKIE, CSRF_HEADER
from store.models import Connection, ConsoleSession, utcnow
from tests.api.conftest import GOOD_KEY, TOKEN, make_project, statements

SESSION = "/api/console/session"
FAKE_CONNECTION = {"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY}}


@pytest.fixture
async def browser(client: httpx.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """A client with no Authorization header (a browser holding only what the server set)."""
    async with httpx.AsyncClient(transport=client._transport, base_url="http://api") as anon:
        yield anon


async def sign_in(browser: httpx.AsyncClient, token: str = TOKEN) -> tuple[str, dict[str, object]]:
    r = await browser.post(SESSION, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 201, r.text
    return r.cookies[CONSOLE_COOKIE], r.json()


def cookie(value: str) -> dict[str, str]:
    return {"Cookie": f"{CONSOLE_COOKIE}={value}"}


def connections_in(engine: sa.Engine) -> int:
    with Session(engine) as s:
        return len(s.exec(select(Connection)).all())


async def test_a_token_becomes_an_httponly_strict_cookie_that_holds_neither_the_token_nor_its_key(
        browser: httpx.AsyncClient, engine: sa.Engine) -> None:
    r = await browser.post(SESSION, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 201, r.text
    set_cookie = r.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=strict" in set_cookie and "path=/" in set_cookie
    value = r.cookies[CONSOLE_COOKIE]
    assert TOKEN not in value and value not in r.text
    body = r.json()
    assert body["admin"] is True and body["project"] is None and len(body["csrf_token"]) >= 32
    assert r.headers["cache-control"] == "no-store"
    with Session(engine) as s:
        rows = s.exec(select(ConsoleSession)).all()
    assert len(rows) == 1  # and what is stored opens nothing: a keyed digest, not the value
    stored = " ".join(str(v) for v in rows[0].model_dump().values())
    assert value not in stored and hashlib.sha256(value.encode()).hexdigest() not in stored
    assert TOKEN not in stored


@pytest.mark.parametrize("header", [None, "Bearer not-a-token", "Basic " + TOKEN])
async def test_no_session_without_a_valid_token(browser: httpx.AsyncClient, header: str | None) -> None:
    r = await browser.post(SESSION, headers={"Authorization": header} if header else {})
    assert r.status_code == 401, r.text
    assert CONSOLE_COOKIE not in r.cookies


async def test_the_cookie_reads_but_every_write_needs_the_csrf_token(browser: httpx.AsyncClient,
                                                                    engine: sa.Engine) -> None:
    value, body = await sign_in(browser)
    r = await browser.get("/api/compute/providers", headers=cookie(value))
    assert r.status_code == 200, r.text
    for headers in ({}, {CSRF_HEADER: "wrong"}, {CSRF_HEADER: str(body["csrf_token"])[:-1]}):
        r = await browser.post("/api/compute/connections", json=FAKE_CONNECTION,
                               headers={**cookie(value), **headers})
        assert r.status_code == 403 and CSRF_HEADER in r.json()["detail"], r.text
    assert connections_in(engine) == 0  # nothing was written by a refused request
    r = await browser.post("/api/compute/connections", json=FAKE_CONNECTION,
                           headers={**cookie(value), CSRF_HEADER: str(body["csrf_token"])})
    assert r.status_code == 201, r.text
    assert connections_in(engine) == 1


async def test_another_sessions_csrf_token_does_not_pass(browser: httpx.AsyncClient) -> None:
    mine, _ = await sign_in(browser)
    _, theirs = await sign_in(browser)
    r = await browser.post("/api/compute/connections", json=FAKE_CONNECTION,
                           headers={**cookie(mine), CSRF_HEADER: str(theirs["csrf_token"])})
    assert r.status_code == 403, r.text


async def test_signing_out_ends_the_session_on_the_server(browser: httpx.AsyncClient) -> None:
    value, body = await sign_in(browser)
    r = await browser.get(SESSION, headers=cookie(value))
    assert r.status_code == 200 and r.json()["csrf_token"] == body["csrf_token"]
    r = await browser.delete(SESSION, headers=cookie(value))
    assert r.status_code == 204
    assert 'gpuprov_console=""' in r.headers["set-cookie"] or "max-age=0" in r.headers["set-cookie"].lower()
    # a copy of the cookie kept elsewhere opens nothing now: not the API, not the session
    assert (await browser.get("/api/compute/providers", headers=cookie(value))).status_code == 401
    assert (await browser.get(SESSION, headers=cookie(value))).status_code == 401
    # signing out again (or without a session) is harmless
    assert (await browser.delete(SESSION, headers=cookie(value))).status_code == 204
    assert (await browser.delete(SESSION)).status_code == 204


async def test_an_expired_session_opens_nothing(browser: httpx.AsyncClient, engine: sa.Engine) -> None:
    value, _ = await sign_in(browser)
    with Session(engine) as s:
        row = s.exec(select(ConsoleSession)).one()
        row.expires_at = utcnow() - timedelta(seconds=1)
        s.add(row)
        s.commit()
    assert (await browser.get("/api/compute/providers", headers=cookie(value))).status_code == 401
    assert (await browser.get(SESSION, headers=cookie(value))).status_code == 401


async def test_a_project_tokens_session_sees_its_project_only_and_ends_with_the_token(
        client: httpx.AsyncClient, browser: httpx.AsyncClient) -> None:
    token = await make_project(client, "team-a")
    await make_project(client, "team-b")
    assert (await client.post("/api/compute/connections", json=FAKE_CONNECTION,
                              headers={"X-Project": "team-b"})).status_code == 201
    value, body = await sign_in(browser, token)
    assert body["admin"] is False and body["project"] == "team-a"
    r = await browser.get("/api/compute/connections", headers=cookie(value))
    assert r.status_code == 200 and r.json()["items"] == []  # team-b's connection is not seen
    r = await browser.get("/api/compute/connections", headers={**cookie(value), "X-Project": "team-b"})
    assert r.status_code == 404
    listed = (await browser.get("/api/projects", headers=cookie(value))).json()["items"]
    assert [p["id"] for p in listed] == ["team-a"]
    tokens = (await client.get("/api/projects/team-a/tokens")).json()["items"]
    assert (await client.delete(f"/api/projects/team-a/tokens/{tokens[0]['id']}")).status_code == 200
    assert (await browser.get("/api/compute/connections", headers=cookie(value))).status_code == 401


async def test_an_admin_session_works_in_the_project_it_names(client: httpx.AsyncClient,
                                                              browser: httpx.AsyncClient) -> None:
    await make_project(client, "team-b")
    assert (await client.post("/api/compute/connections", json=FAKE_CONNECTION,
                              headers={"X-Project": "team-b"})).status_code == 201
    value, _ = await sign_in(browser)
    default = await browser.get("/api/compute/connections", headers=cookie(value))
    team_b = await browser.get("/api/compute/connections", headers={**cookie(value), "X-Project": "team-b"})
    assert len(default.json()["items"]) == 0 and len(team_b.json()["items"]) == 1


async def test_a_bearer_token_wins_over_a_cookie(browser: httpx.AsyncClient) -> None:
    """A request with a bad bearer token is refused even beside a good cookie (no fallback)."""
    value, _ = await sign_in(browser)
    r = await browser.get("/api/compute/providers", headers={**cookie(value), "Authorization": "Bearer nope"})
    assert r.status_code == 401


@pytest.mark.parametrize("token", ["admin", "project"])
async def test_a_console_request_reads_its_session_once(client: httpx.AsyncClient, browser: httpx.AsyncClient,
                                                        engine: sa.Engine, token: str) -> None:
    """The edge guard's lookup of the cookie's session is the route's too: one read a request, the
    session and its token's revocation together (it was two: the guard's, then the route's)."""
    value, _ = await sign_in(browser, TOKEN if token == "admin" else await make_project(client, "team-a"))
    with statements(engine) as seen:
        r = await browser.get("/api/compute/providers", headers=cookie(value))
        write = await browser.post("/api/compute/connections", json=FAKE_CONNECTION, headers=cookie(value))
    assert r.status_code == 200, r.text
    assert write.status_code == 403  # the guard's lookup does not stand in for the write's CSRF check
    assert sum("console_sessions" in statement for statement, _ in seen) == 2, seen  # one a request

from __future__ import annotations

import re

import httpx
import pytest
import sqlalchemy as sa

from tests.api.conftest import TOKEN, make_project, statements


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN},
                                     {"Authorization": f"Basic {TOKEN}"}])
async def test_compute_routes_need_the_bearer_token(client: httpx.AsyncClient,
                                                    headers: dict[str, str]) -> None:
    client.headers.pop("Authorization")
    for method, path in [("GET", "/api/compute/connections"), ("GET", "/api/compute/instances"),
                         ("POST", "/api/compute/instances"), ("GET", "/api/compute/backends/x/offers"),
                         ("GET", "/api/compute/clouds"),
                         ("DELETE", "/api/compute/connections/x")]:
        r = await client.request(method, path, headers=headers, json={})
        assert r.status_code == 401, (method, path, r.text)
        assert r.json()["detail"] == "missing or invalid bearer token"
        assert r.headers["www-authenticate"] == "Bearer"


async def test_token_grants_access_and_openapi_lists_the_routes(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api/compute/instances")).json() == {"items": [], "next_cursor": None}
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert {"/api/compute/connections", "/api/compute/instances", "/api/compute/instances/{instance_id}",
            "/api/compute/instances/{instance_id}/terminate",
            "/api/compute/backends/{provider}/offers", "/api/compute/clouds"} <= set(paths)
    assert (await client.get("/healthz")).json() == {"status": "ok"}


async def test_an_admin_requests_project_is_read_once_and_one_not_made_yet_is_refused_until_it_is(
        client: httpx.AsyncClient, engine: sa.Engine) -> None:
    """Projects are never deleted, so the API remembers which exist: an admin's requests in a project
    read it once per process. One that does not exist is read again each time (404 until made)."""
    with statements(engine) as seen:
        for _ in range(3):
            r = await client.get("/api/compute/providers", headers={"X-Project": "default"})
            assert r.status_code == 200, r.text
    assert sum(bool(re.search(r"\bFROM project\b", statement)) for statement, _ in seen) == 1, seen
    url = "/api/compute/connections"
    assert (await client.get(url, headers={"X-Project": "team-c"})).json()["detail"] == "no project 'team-c'"
    await make_project(client, "team-c")
    assert (await client.get(url, headers={"X-Project": "team-c"})).status_code == 200

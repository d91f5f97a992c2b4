from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import TOKEN


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

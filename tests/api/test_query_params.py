"""Unknown query parameters are refused (422 naming each), on every /api route; the declared ones
(pagination's limit and cursor, a route's own filters, aliases) still work."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import connect_fake
from tests.api.test_edge_auth import concrete, every_route


def api_requests(client: httpx.AsyncClient) -> list[tuple[str, str]]:
    app = client._transport.app  # type: ignore[attr-defined]
    return [(method, concrete(path)) for path, methods in every_route(app.routes) if path.startswith("/api/")
            for method in sorted(methods)]


async def test_a_misspelt_filter_is_a_422_not_every_offer(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    r = await client.get("/api/compute/offers", params={"clouds": "verda"})
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["errors"] == [{"loc": ["query", "clouds"], "type": "unknown_parameter",
                               "msg": body["errors"][0]["msg"]}]
    assert "not a parameter of this route" in body["detail"] and "cloud" in body["errors"][0]["msg"]


async def test_every_api_route_refuses_a_parameter_it_does_not_declare(client: httpx.AsyncClient) -> None:
    requests = api_requests(client)
    assert len(requests) > 50
    for method, path in requests:
        r = await client.request(method, path, params={"bogus_param": "1"})
        assert r.status_code == 422, (method, path, r.status_code, r.text)
        assert ["query", "bogus_param"] in [e["loc"] for e in r.json()["errors"]], (method, path, r.text)


async def test_declared_parameters_still_work(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    first = await client.get("/api/compute/offers", params={"limit": 1, "gpu_count": 1})
    assert first.status_code == 200, first.text
    cursor = first.json()["next_cursor"]
    assert cursor is not None
    r = await client.get("/api/compute/offers", params={"limit": 1, "cursor": cursor, "gpu_count": 1})
    assert r.status_code == 200, r.text
    for path, params in (("/api/compute/instances", {"status": "active", "limit": 5}),
                         ("/api/compute/spend", {"days": 3}), ("/api/projects", {"limit": 2}),
                         ("/api/compute/workloads", {"type": "SFT"})):
        r = await client.get(path, params=params)
        assert r.status_code == 200, (path, r.text)


@pytest.mark.parametrize("name", ["s3cr3t value", "a" * 300, "\u202eevil"])
async def test_an_odd_name_is_refused_without_being_echoed(client: httpx.AsyncClient, name: str) -> None:
    r = await client.get("/api/compute/instances", params={name: "1"})
    assert r.status_code == 422, r.text
    assert name not in r.text and r.json()["errors"][0]["loc"] == ["query", "<key>"]


async def test_several_unknown_parameters_are_all_named(client: httpx.AsyncClient) -> None:
    r = await client.get("/api/compute/instances", params={"zz": "1", "aa": "2", "limit": 3})
    assert r.status_code == 422
    assert [e["loc"] for e in r.json()["errors"]] == [["query", "aa"], ["query", "zz"]]

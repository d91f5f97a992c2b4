"""Malformed input gets a 4xx with a reason, never a 500."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import connect_fake

BAD_BODIES: list[bytes | str | object] = [
    b"", b"{", b"null", b"[]", b"\xff\xfe\x00", "not json", 42, [1, 2], {"cloud": None},
    {"cloud": 7, "ssh_public_keys": "ssh-ed25519 AAAA"}, {"cloud": "fakecloud", "ssh_public_keys": [None]},
    {"cloud": "x" * 5000, "ssh_public_keys": []}, {"cloud": "fakecloud", "ports": ["eighty"]},
    {"provider": {"nested": True}}, {"provider": "fakecloud", "credentials": {"api_key": 1}},
    {"provider": "fakecloud", "credentials": ["api_key"]}, {"cloud": "fakecloud", "gpu_count": 1e300},
]


@pytest.mark.parametrize("path", ["/api/compute/instances", "/api/compute/connections"])
async def test_bad_bodies_are_4xx_with_a_reason(client: httpx.AsyncClient, path: str) -> None:
    await connect_fake(client)
    for bad in BAD_BODIES:
        if isinstance(bad, bytes | str):
            r = await client.post(path, content=bad, headers={"Content-Type": "application/json"})
        else:
            r = await client.post(path, json=bad)
        assert 400 <= r.status_code < 500, (bad, r.status_code, r.text)
        assert r.json()["detail"], bad


async def test_bad_path_and_query_values_are_4xx(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    for path in ["/api/compute/instances/%00", "/api/compute/instances/" + "x" * 3000,
                 "/api/compute/backends/%2e%2e/offers", "/api/compute/backends/fakecloud/offers?gpu_count=-1",
                 "/api/compute/backends/fakecloud/offers?gpu=", "/api/compute/connections/%ff"]:
        r = await client.get(path) if "connections" not in path else await client.delete(path)
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text)

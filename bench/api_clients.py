"""The client `bench.api_scale` measures the API with: bench/lean_http.py's (the default), or httpx's
(as every API figure before 2026-12-06 was measured; bench/RESULTS.md's thirty-first round compares
them). Both give `get(path or URL)` a reply with httpx's names (`status_code`, `headers`, `json()`)."""

from __future__ import annotations

import httpx

from bench.lean_http import LeanClient

CLIENTS = ("lean", "httpx")
Client = LeanClient | httpx.AsyncClient


def open_client(kind: str, base: str, cookies: dict[str, str], connections: int) -> Client:
    """A client of `kind` (CLIENTS) for paths under `base`/api/compute, sending the console's cookie,
    on at most `connections` keep-alive connections."""
    if kind == "httpx":
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        return httpx.AsyncClient(base_url=base + "/api/compute", limits=limits, timeout=60, cookies=cookies)
    cookie = "; ".join(f"{name}={value}" for name, value in cookies.items())
    return LeanClient(base + "/api/compute", connections=connections, headers={"Cookie": cookie})

"""How a REST adapter authenticates: httpx auth flows the REST base plugs in.

- `BearerAuth`: `Authorization: Bearer <key>` (Lambda, DigitalOcean, Hyperstack...).
- `HeaderKeyAuth`: the key in a header of the cloud's choosing (`api_key: <key>`, `X-Api-Key`).
- `OAuth2ClientCredentials`: a client id + secret exchanged at a token URL for an access token,
  cached until shortly before it expires, refreshed on expiry or on a 401 (Verda).

Secrets are read from the credentials model when a request is sent, never copied into logs or
exception messages.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import httpx

# Refresh a token this many seconds before the cloud says it expires (clock skew, slow requests).
REFRESH_MARGIN_S = 30.0


class BearerAuth(httpx.Auth):
    def __init__(self, token: Callable[[], str]) -> None:
        self._token = token

    def auth_flow(self, request: httpx.Request) -> Any:
        request.headers["Authorization"] = f"Bearer {self._token()}"
        yield request


class HeaderKeyAuth(httpx.Auth):
    def __init__(self, header: str, key: Callable[[], str], *, prefix: str = "") -> None:
        self._header, self._key, self._prefix = header, key, prefix

    def auth_flow(self, request: httpx.Request) -> Any:
        request.headers[self._header] = f"{self._prefix}{self._key()}"
        yield request


class OAuth2Error(Exception):
    """The token endpoint refused the client credentials (status and the endpoint's own words)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class OAuth2ClientCredentials(httpx.Auth):
    """RFC 6749 §4.4. The token request is sent through the same client (same TLS settings);
    concurrent requests share one refresh."""

    requires_response_body = True

    def __init__(self, token_url: str, client_id: Callable[[], str], client_secret: Callable[[], str],
                 *, scope: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.token_url, self._id, self._secret, self.scope = token_url, client_id, client_secret, scope
        self._clock = clock
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self.refreshes = 0  # how many tokens were fetched (tests and metrics)

    def _token_request(self) -> httpx.Request:
        data = {"grant_type": "client_credentials", "client_id": self._id(), "client_secret": self._secret()}
        if self.scope:
            data["scope"] = self.scope
        return httpx.Request("POST", self.token_url, data=data, headers={"Accept": "application/json"})

    def _store(self, response: httpx.Response) -> None:
        if response.status_code != 200:
            raise OAuth2Error(response.status_code, _oauth_message(response))
        try:
            body = response.json()
            token, expires_in = str(body["access_token"]), float(body.get("expires_in") or 3600)
        except (ValueError, KeyError, TypeError):
            raise OAuth2Error(502, "token endpoint answered without an access_token") from None
        self._token = token
        self._expires_at = self._clock() + max(0.0, expires_in - REFRESH_MARGIN_S)
        self.refreshes += 1

    def _fresh(self) -> bool:
        return self._token is not None and self._clock() < self._expires_at

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        for attempt in range(2):
            async with self._lock:
                if not self._fresh():
                    response = yield self._token_request()
                    await response.aread()
                    self._store(response)
                token = self._token
            request.headers["Authorization"] = f"Bearer {token}"
            response = yield request
            if response.status_code != 401 or attempt == 1:
                return
            # The cloud revoked or expired it early: fetch a new one once, then give up.
            async with self._lock:
                if self._token == token:
                    self._token = None

    def sync_auth_flow(self, request: httpx.Request) -> Any:
        raise RuntimeError("OAuth2ClientCredentials works with httpx.AsyncClient only")


def _oauth_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"token endpoint answered {response.status_code}"
    if isinstance(body, dict):
        desc = body.get("error_description") or body.get("message") or body.get("error")
        if desc:
            return str(desc)[:300]
    return f"token endpoint answered {response.status_code}"

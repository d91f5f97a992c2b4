"""The API client every command uses. API URL from GPUPROV_API_URL (default http://127.0.0.1:8000);
token from GPUPROV_TOKEN, else GPUPROV_API_TOKEN, else $GPUPROV_HOME/api-token (`gpuprov dev` writes it).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from cli.output import fail, reason

API_PREFIX = "/api/compute"
PROJECT_ENV = "GPUPROV_PROJECT"
_project: str | None = None  # `gpuprov --project P ...`: set by the command line's callback


def use_project(project: str | None) -> None:
    global _project
    _project = project
PAGE_LIMIT = 200  # the API's maximum: fewest round trips when reading a whole list
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0)  # a keyed create whose answer was lost is sent again, this often


def new_idempotency_key() -> str:
    return f"gpuprov-cli-{uuid.uuid4()}"


def token() -> str:
    from settings import Settings

    configured = os.environ.get("GPUPROV_TOKEN") or os.environ.get("GPUPROV_API_TOKEN")
    if configured:
        return configured.strip()
    path = Settings().home / "api-token"
    if path.exists():
        return path.read_text().strip()
    raise fail(f"no API token: set GPUPROV_TOKEN or start `gpuprov dev` (which writes {path})")


def http_client(base_url: str, token: str) -> httpx.Client:
    """The HTTP client every command uses (tests swap in one bound to the ASGI app)."""
    return httpx.Client(base_url=base_url, timeout=90, headers={"Authorization": f"Bearer {token}"})


class Api:
    def __init__(self, url: str | None = None, api_token: str | None = None) -> None:
        from settings import Settings

        self.url = (url or os.environ.get("GPUPROV_API_URL") or Settings().api_url).rstrip("/")
        self._client = http_client(self.url, api_token or token())
        # The project to work in: --project, else GPUPROV_PROJECT, else the token's own (or, for the
        # admin token, `default`).
        self.project = _project or os.environ.get(PROJECT_ENV) or None
        if self.project:
            self._client.headers["X-Project"] = self.project

    def call(self, method: str, path: str, *, idempotency_key: str | None = None, prefix: str = API_PREFIX,
             **kwargs: Any) -> Any:
        """One request. With `idempotency_key` (a create), a request whose answer was lost on the way
        (the connection dropped, the API restarted) is sent again with the same key: the API answers
        with what the first one made, so nothing is made twice."""
        if idempotency_key is not None:
            kwargs["headers"] = {**kwargs.get("headers", {}), "Idempotency-Key": idempotency_key}
        delays = list(RETRY_DELAYS_S) if idempotency_key is not None else []
        while True:
            try:
                r = self._client.request(method, prefix + path, **kwargs)
                break
            except httpx.TransportError as e:
                if delays:
                    time.sleep(delays.pop(0))
                    continue
                raise fail(f"cannot reach the gpuprov API at {self.url} ({e.__class__.__name__}) — "
                           "is `gpuprov dev` running? (GPUPROV_API_URL sets the address)") from None
        if r.status_code == 401:
            raise fail("the API refused the token (GPUPROV_TOKEN / $GPUPROV_HOME/api-token)")
        if r.status_code >= 400:
            try:
                why = reason(r.json().get("detail", r.text))
            except ValueError:
                why = r.text or r.reason_phrase
            raise fail(f"{why} (HTTP {r.status_code})")
        return r.json() if r.content else None

    def pages(self, path: str, params: dict[str, Any] | None = None,
              prefix: str = API_PREFIX) -> Iterator[list[dict[str, Any]]]:
        """The pages of a list, following `next_cursor` until the last one."""
        query: dict[str, Any] = {**(params or {}), "limit": PAGE_LIMIT}
        while True:
            page = self.call("GET", path, params=query, prefix=prefix)
            yield page["items"]
            if not page.get("next_cursor"):
                return
            query["cursor"] = page["next_cursor"]

    def items(self, path: str, params: dict[str, Any] | None = None,
              prefix: str = API_PREFIX) -> list[dict[str, Any]]:
        """A whole list: every page."""
        return [item for page in self.pages(path, params, prefix) for item in page]

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
import typer

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
             still_asked: StillAsked | None = None, **kwargs: Any) -> Any:
        """One request. With `idempotency_key` (a create), a request whose answer was lost on the way
        (the connection dropped, the API restarted) is sent again with the same key: the API answers
        with what the first one made, so nothing is made twice. With `still_asked`, a 504 — a cloud
        that has not answered the offers page yet, and is still asked — is asked again until it
        answers or `still_asked` runs out."""
        if idempotency_key is not None:
            kwargs["headers"] = {**kwargs.get("headers", {}), "Idempotency-Key": idempotency_key}
        delays = list(RETRY_DELAYS_S) if idempotency_key is not None else []
        while True:
            try:
                r = self._client.request(method, prefix + path, **kwargs)
            except httpx.TransportError as e:
                if delays:
                    time.sleep(delays.pop(0))
                    continue
                raise fail(f"cannot reach the gpuprov API at {self.url} ({e.__class__.__name__}) — "
                           "is `gpuprov dev` running? (GPUPROV_API_URL sets the address)") from None
            if r.status_code == 504 and still_asked is not None and still_asked.again(_detail(r)):
                continue
            break
        if r.status_code == 401:
            raise fail("the API refused the token (GPUPROV_TOKEN / $GPUPROV_HOME/api-token)")
        if r.status_code >= 400:
            raise fail(f"{_detail(r)} (HTTP {r.status_code})")
        return r.json() if r.content else None

    def pages(self, path: str, params: dict[str, Any] | None = None, prefix: str = API_PREFIX,
              still_asked: StillAsked | None = None) -> Iterator[list[dict[str, Any]]]:
        """The pages of a list, following `next_cursor` until the last one."""
        query: dict[str, Any] = {**(params or {}), "limit": PAGE_LIMIT}
        while True:
            page = self.call("GET", path, params=query, prefix=prefix, still_asked=still_asked)
            yield page["items"]
            if not page.get("next_cursor"):
                return
            query["cursor"] = page["next_cursor"]

    def items(self, path: str, params: dict[str, Any] | None = None, prefix: str = API_PREFIX,
              still_asked: StillAsked | None = None) -> list[dict[str, Any]]:
        """A whole list: every page."""
        return [item for page in self.pages(path, params, prefix, still_asked) for item in page]


def _detail(r: httpx.Response) -> str:
    """Why the API refused: its `detail`, else the body, else the status's phrase."""
    try:
        return reason(r.json().get("detail", r.text))
    except ValueError:
        return r.text or r.reason_phrase


class StillAsked:
    """How long a command keeps asking for the offers of a cloud that has not answered yet. The API
    stops waiting for a cloud after GPUPROV_OFFERS_TIMEOUT_S and goes on asking it, serving its answer
    to the next request: a command that asks again shortly gets it (a cold search on a busy box, or
    one paced under the cloud's rate limit, can take longer than the API waits)."""

    def __init__(self, wait_s: float, pause_s: float) -> None:
        self.deadline, self.pause_s, self.said = time.monotonic() + wait_s, pause_s, False

    def again(self, why: str) -> bool:
        """Whether to ask again (after a pause), saying so once; False once the wait is over."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            return False
        if not self.said:
            typer.echo(f"{why} — asking again for up to {left:.0f} s", err=True)
            self.said = True
        time.sleep(min(self.pause_s, left))
        return True

"""The console's browser tests: Debian's chromium (tests/browser/chromium.py) driven by Playwright
against one real `gpuprov dev` run shared by the package's files.

Every test's page records what it asked the server for and what went wrong in it: at the end of
each test, every fetch the page made must be an operation of `/openapi.json`, no script error and no
Content-Security-Policy violation may have been logged, and a screenshot of where the test ended is
saved under .test-output/screenshots/ (ignored by git)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import devstack
from tests.browser import chromium, openapi_ops
from tests.devstack import SharedDev
from tests.eventually import eventually_sync

SCREENSHOTS = Path(__file__).resolve().parents[2] / ".test-output" / "screenshots"
TIMEZONE = "Pacific/Chatham"  # UTC+13:45 (+12:45 in its winter): no test machine runs in it
VIEWPORT = {"width": 1280, "height": 860}
NARROW = {"width": 390, "height": 844}


@dataclass
class Stack(SharedDev):
    """The package's `gpuprov dev` (tests/devstack.py) and the API's own description."""

    spec: dict[str, Any] = field(default_factory=dict)

    def api(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url + "/api/compute", timeout=60,
                            headers={"Authorization": f"Bearer {token or self.token}"})

    def connection_body(self, cloud: str) -> dict[str, Any]:
        """The body that connects simulated `cloud` as `make run` does (its endpoint and credentials)."""
        from cli.dev import TOKENS_FILE, connection_bodies

        token = json.loads((self.home / TOKENS_FILE).read_text())[cloud]
        p = self.ports
        return connection_bodies(f"http://127.0.0.1:{p['GPUPROV_LOCALCLOUD_PORT']}", {cloud: token},
                                 f"https://127.0.0.1:{p['GPUPROV_LOCALCLOUD_TLS_PORT']}",
                                 (self.home / "localcloud" / "tls" / "ca.pem").read_text(),
                                 f"http://127.0.0.1:{p['GPUPROV_LOCALCLOUD_GRPC_PORT']}",
                                 f"https://127.0.0.1:{p['GPUPROV_LOCALCLOUD_GRPC_TLS_PORT']}")[cloud]

    def gpuprov(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        env = {"GPUPROV_TOKEN": self.token, "GPUPROV_API_URL": self.url, "GPUPROV_POLL_INTERVAL": "0.2",
               "PATH": "/usr/bin:/bin", "HOME": str(self.home)}
        return subprocess.run([sys.executable, "-m", "cli", *args], env=env, capture_output=True, text=True,
                              timeout=timeout)


@pytest.fixture(scope="package")
def stack(shared_dev: SharedDev, tmp_path_factory: pytest.TempPathFactory,
          package_processes: None) -> Iterator[Stack]:
    """The suite's shared `gpuprov dev` (tests/devstack.py), or a run of this package's own when it
    was stopped already (the make-run checks ran first: `pytest tests/e2e tests/browser`)."""
    own = None if shared_dev.alive() else devstack.start(tmp_path_factory.mktemp("console"))
    run = own or shared_dev
    try:
        found = Stack(**vars(run))
        # the tests open the console where `make run` says it is
        assert run.run.wait_for(r"Console\s+(\S+)").group(1) == found.url + "/studio/compute"
        found.spec = httpx.get(found.url + "/openapi.json", timeout=30).json()
        yield found
    finally:
        if own is not None:
            own.run.interrupt()


@pytest.fixture(scope="package")
def browser(machine_ready: None) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    path = chromium.ensure()
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=path, headless=True, args=chromium.ARGS)
        try:
            yield launched
        finally:
            launched.close()


REFUSAL = re.compile(r"Failed to load resource: the server responded with a status of 4\d\d ")


@dataclass
class Recorder:
    """What one page asked for and what went wrong in it."""

    requests: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    tolerated: re.Pattern[str] | None = None  # console errors a page shows and handles (its test asserts it)

    def watch(self, page: Any) -> None:
        page.on("request", lambda r: self.requests.append((r.method, r.url))
                if r.resource_type in ("fetch", "xhr", "eventsource") else None)
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.problems.append(f"script error: {e}"))

    def _console(self, message: Any) -> None:
        # Chromium logs every 4xx answer as a console error; those are the API's refusals, which
        # the tests provoke on purpose (a wrong token, a wrong key) and assert on the page itself.
        if message.type == "error" and not REFUSAL.match(message.text) and not (
                self.tolerated is not None and self.tolerated.match(message.text)):
            self.problems.append(f"console {message.type}: {message.text}")


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def new_page(browser: Any, recorder: Recorder, *, viewport: dict[str, int] = VIEWPORT) -> Any:
    context = browser.new_context(timezone_id=TIMEZONE, locale="en-US", viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(30_000)
    recorder.watch(page)
    return page


@pytest.fixture
def page(browser: Any, recorder: Recorder, stack: Stack, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context (no cookies) in TIMEZONE; checked and photographed at the end."""
    opened = new_page(browser, recorder)
    yield opened
    finish(opened, recorder, stack, request.node.name)


def finish(page: Any, recorder: Recorder, stack: Stack, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        shot = SCREENSHOTS / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.png"
        page.screenshot(path=str(shot), full_page=True)
    finally:
        page.context.close()
    assert recorder.problems == [], recorder.problems
    assert openapi_ops.unknown(recorder.requests, stack.spec) == []


def until(page: Any, js: str, arg: Any = None, timeout: float = 30) -> Any:
    """Poll the page until the JavaScript function `js` (called with `arg`) answers something truthy;
    that answer. Evaluated through the DevTools protocol from here, never compiled inside the page:
    Playwright's own `wait_for_function` compiles a string in the page, which the console's CSP
    (no unsafe-eval) refuses once it has to poll."""
    if not js.lstrip().startswith(("(", "function", "async")) and "=>" not in js.split("\n")[0]:
        js = f"() => ({js})"
    return eventually_sync(lambda: page.evaluate(js, arg), within=timeout, what=f"the page: {js[:80]}")


def sign_in(page: Any, stack: Stack, token: str | None = None, path: str = "/studio/compute/cloud") -> None:
    """Open `path`, paste the token into the sign-in form, wait for the Compute header."""
    page.goto(stack.url + path)
    page.fill("#token", token or stack.token)
    page.click("form.signin button[type=submit]")
    page.wait_for_selector("nav.tabs")

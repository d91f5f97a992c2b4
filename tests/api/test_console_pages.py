"""The console's pages and files (api/console/pages.py): the seed's paths, headers fit for a page that
holds a session, no inline script or style, nothing served from outside static/, and the console's
code built without any way to turn text into HTML."""

from __future__ import annotations

import hashlib
import re
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from api.console import pages

STATIC = pages.STATIC
SCRIPTS = sorted((STATIC / "js").glob("*.js"))


@pytest.fixture
async def browser(client: httpx.AsyncClient) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=client._transport, base_url="http://api")


class Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script":
            self.scripts.append(named)
        if tag == "style" or "style" in named or any(k.startswith("on") for k in named):
            self.inline.append(f"<{tag} {named}>")

    def handle_data(self, data: str) -> None:
        if self.lasttag == "script" and data.strip():
            self.inline.append(data.strip()[:40])


@pytest.mark.parametrize("path", pages.PAGES)
async def test_every_page_is_the_shell_with_its_headers_and_no_sign_in_needed(browser: httpx.AsyncClient,
                                                                               path: str) -> None:
    r = await browser.get(path, params={"provider": "aws"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    csp = r.headers["content-security-policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'",
                      "base-uri 'none'", "connect-src 'self'"):
        assert directive in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
    markup = Markup()
    markup.feed(r.text)
    assert markup.inline == []  # nothing the CSP would have to allow
    assert [s.get("src") for s in markup.scripts] == ["/studio/static/vendor/chartjs/chart.umd.min.js",
                                                      "/studio/static/js/app.js"]


async def test_compute_lands_on_the_cloud_tab(browser: httpx.AsyncClient) -> None:
    r = await browser.get("/studio/compute")
    assert r.status_code == 307 and r.headers["location"] == "/studio/compute/cloud"


@pytest.mark.parametrize("path,kind", [("js/app.js", "text/javascript; charset=utf-8"),
                                       ("css/console.css", "text/css; charset=utf-8"),
                                       ("vendor/chartjs/chart.umd.min.js", "text/javascript; charset=utf-8")])
async def test_static_files_with_their_charset_and_csp(browser: httpx.AsyncClient, path: str,
                                                       kind: str) -> None:
    r = await browser.get(f"/studio/static/{path}")
    assert r.status_code == 200 and r.headers["content-type"] == kind
    assert r.content == (STATIC / path).read_bytes()
    assert "content-security-policy" in r.headers


@pytest.mark.parametrize("path", ["../pages.py", "%2e%2e/pages.py", "..%2fsession.py", "js/../../pages.py",
                                  "vendor/chartjs/LICENSE.md", "nope.js", "js", "/etc/passwd"])
async def test_nothing_outside_static_or_without_a_known_type(browser: httpx.AsyncClient, path: str) -> None:
    r = await browser.get(f"/studio/static/{path}")
    assert r.status_code in (401, 404), (path, r.status_code)  # 401: routes nowhere public
    assert b"import" not in r.content


async def test_pages_are_not_api_operations_but_the_session_is(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    assert not [p for p in spec["paths"] if p.startswith("/studio")]
    assert set(spec["paths"]["/api/console/session"]) == {"get", "post", "delete"}


async def test_other_studio_paths_need_a_token(browser: httpx.AsyncClient) -> None:
    assert (await browser.get("/studio/other")).status_code == 401
    assert (await browser.post("/studio/compute/cloud")).status_code == 401


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_consoles_code_has_no_way_to_make_html_from_text(script: Path) -> None:
    code = script.read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                 "localStorage", "setAttribute(\"on", "DOMParser"):
        assert sink not in code, f"{script.name} uses {sink}"


def test_the_vendored_chart_library_is_the_published_file() -> None:
    vendored = STATIC / "vendor" / "chartjs"
    note = (vendored / "VENDORED.md").read_text()
    digest = re.search(r"sha256 of this file: ([0-9a-f]{64})", note)
    published = hashlib.sha256((vendored / "chart.umd.min.js").read_bytes()).hexdigest()
    assert digest and published == digest.group(1)
    assert (vendored / "chart.umd.min.js").read_text()[:80].count("Chart.js v4.6.1") == 1
    assert "MIT License" in (vendored / "LICENSE.md").read_text()

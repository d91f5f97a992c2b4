"""The console's pages (`/studio/...`, the seed's paths) and its static files (`/studio/static/...`).

Every page path answers the same shell (static/console.html); its script reads the path and draws
that page from the JSON API. Nothing here reads the database or needs a sign-in: the files hold
code only. Each answer carries the headers a page that holds a session should have: a strict
Content-Security-Policy (scripts and styles from this origin only, no inline script, no framing),
no MIME sniffing, no referrer."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import FileResponse, RedirectResponse, Response

PREFIX = "/studio"
STATIC = Path(__file__).parent / "static"
SHELL = STATIC / "console.html"

# The seed's paths (../shared/seeds/000_17d23b0ee0b454c5.txt): /studio/compute lands on the Cloud tab.
PAGES = ("/studio/compute/cloud", "/studio/compute/workload-queue", "/studio/compute/policies",
         "/studio/connect-cloud", "/studio/backend-offers")
LANDING = ("/studio/compute", "/studio/compute/cloud")

CSP = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "font-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
))
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
}
# Served with their charset; anything else under static/ is not served.
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml; charset=utf-8"}

router = APIRouter(prefix=PREFIX, include_in_schema=False)


STATIC_ROUTE = PREFIX + "/static/{name:path}"
# Every route of this module (method, path template): public, as they hold code and no data.
ROUTES = frozenset((method, path) for method in ("GET", "HEAD")
                   for path in (*PAGES, LANDING[0], STATIC_ROUTE))


def is_console_path(path: str) -> bool:
    """Whether `path` is one of the console's pages or files (public: code, no data)."""
    return path in PAGES or path == LANDING[0] or path.startswith(PREFIX + "/static/")


def _page() -> Response:
    return FileResponse(SHELL, media_type=TYPES[".html"], headers={**HEADERS, "Cache-Control": "no-cache"})


@router.get("/compute")
def landing() -> Response:
    return RedirectResponse(LANDING[1], status_code=status.HTTP_307_TEMPORARY_REDIRECT, headers=HEADERS)


for _path in PAGES:
    router.add_api_route(_path.removeprefix(PREFIX), _page, methods=["GET"])


@router.get("/static/{name:path}")
def static_file(name: str) -> Response:
    """A file under static/, by its relative path: nothing outside it, nothing without a known type."""
    path = (STATIC / name).resolve()
    media_type = TYPES.get(path.suffix)
    if media_type is None or not path.is_relative_to(STATIC.resolve()) or not path.is_file():
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such file")
    # no-cache: the browser revalidates (ETag) so a new version is picked up on the next load.
    return FileResponse(path, media_type=media_type, headers={**HEADERS, "Cache-Control": "no-cache"})

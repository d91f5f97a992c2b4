"""Console sign-in: `POST /api/console/session` trades an API token (in the Authorization header,
never a URL or a body a log might keep) for an HttpOnly, SameSite=Strict session cookie; `GET` says
who the session is and hands the page its CSRF token (kept in the page's memory only); `DELETE`
ends it server-side. With the cookie, every /api route accepts the browser as the token's holder
(api/auth.py), and every write must carry `X-CSRF-Token` too."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response, status
from pydantic import BaseModel, Field

from api.auth import CONSOLE_COOKIE as COOKIE
from api.auth import CSRF_HEADER, BearerDep, console_session, is_admin_token, token_project
from api.deps import DepsDep, in_thread, open_session
from api.fields import Timestamp
from store import console_sessions, projects

PATH = "/api/console/session"

router = APIRouter(prefix="/console", tags=["console"])


class ConsoleSessionOut(BaseModel):
    admin: bool = Field(description="opened with the installation's admin token")
    project: str | None = Field(description="a project token's project; null for an admin session, "
                                            "which picks one per request with X-Project")
    csrf_token: str = Field(description=f"send it as {CSRF_HEADER} with every write this session makes")
    expires_at: Timestamp


def _out(s: console_sessions.OpenSession) -> ConsoleSessionOut:
    return ConsoleSessionOut(admin=s.admin, project=s.project, csrf_token=s.csrf,
                             expires_at=s.expires_at)


def _bad_token() -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, "that is not a valid API token: paste the admin "
                         "token `gpuprov dev` printed, or a project token",
                         headers={"WWW-Authenticate": "Bearer"})


@router.post("/session", response_model=ConsoleSessionOut, status_code=status.HTTP_201_CREATED, responses={
    401: {"description": "no valid token in the Authorization header"}})
async def start_session(request: Request, response: Response, creds: BearerDep,
                        deps: DepsDep) -> ConsoleSessionOut:
    """Sign a browser in: the token in `Authorization: Bearer …` (admin or project) becomes a session
    cookie (HttpOnly, SameSite=Strict; the token itself is not kept)."""
    if creds is None:
        raise _bad_token()
    token = creds.credentials
    admin = is_admin_token(deps, token)
    project = None if admin else await in_thread(token_project, deps, token)
    if not admin and project is None:
        raise _bad_token()

    def save() -> tuple[str, console_sessions.OpenSession]:
        with open_session(deps) as session:
            return console_sessions.open_session(
                session, deps.box, admin=admin, project=project,
                token_hash=None if admin else projects.token_hash(token), ttl_s=deps.console_session_ttl_s)

    value, opened = await in_thread(save)
    response.set_cookie(COOKIE, value, max_age=int(deps.console_session_ttl_s), path="/", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
    response.headers["Cache-Control"] = "no-store"
    return _out(opened)


@router.get("/session", response_model=ConsoleSessionOut, responses={
    401: {"description": "no live session cookie"}})
async def read_session(request: Request, response: Response, deps: DepsDep) -> ConsoleSessionOut:
    """The browser's session: who it is and its CSRF token (a page asks once when it loads)."""
    opened = await in_thread(console_session, deps, request.cookies.get(COOKIE))
    if opened is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "not signed in (or the session ended)",
                            headers={"WWW-Authenticate": "Bearer"})
    response.headers["Cache-Control"] = "no-store"
    return _out(opened)


@router.delete("/session", status_code=status.HTTP_204_NO_CONTENT)
async def end_session(request: Request, deps: DepsDep) -> Response:
    """Sign out: the session ends on the server (its cookie opens nothing from now on, wherever a
    copy of it is) and the browser forgets the cookie."""
    value = request.cookies.get(COOKIE)

    def end() -> None:
        with open_session(deps) as session:
            console_sessions.end_session(session, deps.box, value)

    await in_thread(end)
    response = Response(status_code=status.HTTP_204_NO_CONTENT)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
    return response

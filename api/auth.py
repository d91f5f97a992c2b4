"""Who is calling: the bearer token (the installation's admin token or a project token), or a Compute
console session opened with one (api/console/session.py), and the project a request works in, as
FastAPI dependencies (`CallerDep`, `require_token`)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, Header, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from api.deps import AppDeps, DepsDep, open_session
from api.fields import PROJECT_PATTERN
from store import console_sessions, projects
from store.db import reads

_bearer = HTTPBearer(auto_error=False, description="the admin token printed by `gpuprov dev`, or a project "
                                                   "token (POST /api/projects/{project}/tokens)")
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]

DEFAULT_PROJECT = "default"
CONSOLE_COOKIE = "gpuprov_console"  # the console's session (api/console/session.py)
CSRF_HEADER = "X-CSRF-Token"  # every write a console session makes carries its CSRF token
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PROJECT_HEADER = "X-Project"


@dataclass(frozen=True)
class Caller:
    """Who is calling. `project` is the one project this request works in: the token's own, or for
    the admin token the X-Project header's (default `default`)."""

    admin: bool
    project: str


def _read(deps: AppDeps) -> sa.Connection:
    """A bare connection for one lookup (store/db.py `reads`: on PostgreSQL outside a transaction, a
    lookup 0.61 -> 0.42 ms)."""
    return reads(deps.engine).connect()


def token_project(deps: AppDeps, token: str) -> str | None:
    """The project of a live project token; None for an unknown or revoked one. Sync (a database
    read): call it from the threadpool."""
    with _read(deps) as conn:
        return projects.project_of_token(conn, token)


def is_admin_token(deps: AppDeps, token: str) -> bool:
    # compare_digest: the time taken does not reveal how much of the token matched.
    return hmac.compare_digest(token.encode(), deps.api_token.encode())


@dataclass(frozen=True)
class TokenCheck:
    """What the edge guard learnt of a request's bearer token, kept in the request's state so that
    `current_caller` does not look the same token up again (one database read per request, not two)."""

    token: str
    admin: bool
    project: str | None  # a live project token's project; None for the admin token or an invalid one

    @property
    def valid(self) -> bool:
        return self.admin or self.project is not None


TOKEN_CHECK = "gpuprov_token_check"  # its key in the ASGI scope's "state" (Starlette's request.state)


def check_token(deps: AppDeps, token: str) -> TokenCheck:
    """Whether `token` may use the API: the admin token or a live project token. The one place tokens
    are checked (the edge guard, before any body is read, and `current_caller`). Sync: it may look
    tokens up in the database, so call it from the threadpool."""
    if not token:
        return TokenCheck(token, admin=False, project=None)
    if is_admin_token(deps, token):
        return TokenCheck(token, admin=True, project=None)
    return TokenCheck(token, admin=False, project=token_project(deps, token))


async def checked_token(deps: AppDeps, token: str) -> TokenCheck:
    """check_token from the event loop: the admin token is compared here, a project token is looked
    up on the threadpool."""
    if token and is_admin_token(deps, token):
        return TokenCheck(token, admin=True, project=None)
    return await run_in_threadpool(check_token, deps, token)


@dataclass(frozen=True)
class ConsoleCheck:
    """What the edge guard learnt of a request's console session cookie (TokenCheck's counterpart):
    `current_caller` reads it rather than looking the same session up again."""

    value: str
    opened: console_sessions.OpenSession | None


CONSOLE_CHECK = "gpuprov_console_check"  # its key in the ASGI scope's "state"


UNAUTHORIZED = "missing or invalid bearer token"


def _unauthorized() -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})


def no_project(project: str) -> HTTPException:
    """Another project's object, or one that does not exist: the same 404 (never 403), so a project
    token cannot even learn which projects exist."""
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no project {project!r}")


ProjectHeader = Annotated[str | None, Header(
    alias=PROJECT_HEADER, pattern=PROJECT_PATTERN,
    description="The project to work in. Admin token: any project (default `default`); a project "
                "token: only its own (another answers 404).")]


def console_session(deps: AppDeps, value: str | None) -> console_sessions.OpenSession | None:
    """The live console session a cookie value opens, else None. Sync (a database read)."""
    if not value:
        return None
    with _read(deps) as conn:
        return console_sessions.live_session(conn, deps.box, value)


def project_exists(deps: AppDeps, project: str) -> bool:
    """Whether `project` exists. Projects are never deleted (store/projects.py), so one seen once is
    remembered for the process: an admin's requests read it once, not at every request. Sync."""
    if project in deps.known_projects:
        return True
    with open_session(deps) as session:
        exists = projects.get_project(session, project) is not None
    if exists:
        deps.known_projects.add(project)
    return exists


async def _who(request: Request, creds: HTTPAuthorizationCredentials | None,
               deps: AppDeps) -> tuple[bool, str | None]:
    """(admin, project) of the request's bearer token, else of its console session: what the edge
    guard learnt of the same credential if it did, else a lookup. 401 for neither; 403 for a
    console session's write without its CSRF token (a cookie rides along with requests the page did
    not make)."""
    if creds is not None:
        check = getattr(request.state, TOKEN_CHECK, None)
        if not (isinstance(check, TokenCheck) and check.token == creds.credentials):
            check = await checked_token(deps, creds.credentials)
        if not check.valid:
            raise _unauthorized()
        return check.admin, check.project
    value = request.cookies.get(CONSOLE_COOKIE)
    known = getattr(request.state, CONSOLE_CHECK, None)
    if isinstance(known, ConsoleCheck) and known.value == value:
        opened = known.opened
    else:
        opened = await run_in_threadpool(console_session, deps, value)
    if opened is None:
        raise _unauthorized()
    if request.method not in SAFE_METHODS and not hmac.compare_digest(
            request.headers.get(CSRF_HEADER, "").encode(), opened.csrf.encode()):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"a console session's write needs its {CSRF_HEADER}")
    return opened.admin, opened.project


async def current_caller(request: Request, creds: BearerDep, deps: DepsDep,
                         x_project: ProjectHeader = None) -> Caller:
    """Authenticate the request (a bearer token, else a console session cookie) and settle its
    project. What the edge guard already checked costs nothing more; what reads the database (a
    credential the guard did not check, a project an admin names for the first time) runs on the
    threadpool, never on the event loop. Async: a dependency FastAPI would otherwise hand to its
    threadpool."""
    admin, own = await _who(request, creds, deps)
    if admin:
        project = x_project or DEFAULT_PROJECT
        if not (project in deps.known_projects or await run_in_threadpool(project_exists, deps, project)):
            raise no_project(project)
        return Caller(admin=True, project=project)
    if own is None:
        raise _unauthorized()
    if x_project is not None and x_project != own:
        raise no_project(x_project)
    return Caller(admin=False, project=own)


CallerDep = Annotated[Caller, Depends(current_caller)]


async def require_token(caller: CallerDep) -> None:
    """Router-wide: every route authenticates, whether or not it reads the caller (FastAPI runs
    `current_caller` once per request however many times it is named)."""


def require_admin_token(creds: BearerDep, deps: DepsDep) -> None:
    """The installation's admin token, whatever the project (the codec endpoint: it decodes every
    project's payloads). 401 without a valid token, 403 for a project token."""
    if creds is None:
        raise _unauthorized()
    if is_admin_token(deps, creds.credentials):
        return
    if token_project(deps, creds.credentials) is None:
        raise _unauthorized()
    raise HTTPException(status.HTTP_403_FORBIDDEN, "this needs the installation's admin token")


def require_admin(caller: Caller) -> None:
    if not caller.admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this needs the installation's admin token")

"""Projects and their API tokens. The admin token makes projects and tokens; a project token sees
only its own project, and another project answers 404 exactly like one that does not exist."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field
from sqlmodel import Session, select

from api.auth import BearerDep, Caller, CallerDep, no_project, require_admin
from api.deps import SessionDep
from api.fields import Name, Strict, Timestamp, aware
from api.fields import Project as ProjectSlug
from api.pagination import Keyset, Page, PageDep
from store import projects
from store.models import ApiToken, Project


class ProjectCreate(Strict):
    id: ProjectSlug


class ProjectOut(BaseModel):
    id: str
    created_at: Timestamp | None

    @classmethod
    def of(cls, row: Project) -> ProjectOut:
        return cls(id=row.id, created_at=aware(row.created_at))


class TokenCreate(Strict):
    label: Name | None = Field(None, description="what the token is for, e.g. `ci`")


class TokenOut(BaseModel):
    """A project token as listed: never its value (only its hash is kept)."""

    id: str
    project: str
    label: str | None
    created_at: Timestamp | None
    revoked_at: Timestamp | None

    @classmethod
    def of(cls, row: ApiToken) -> TokenOut:
        return cls(id=row.id, project=row.project, label=row.label, created_at=aware(row.created_at),
                   revoked_at=aware(row.revoked_at))


class TokenCreated(TokenOut):
    token: str = Field(description="the token: shown this once, not kept (only its hash is)")

router = APIRouter(prefix="/projects", tags=["projects"])

PROJECTS = Keyset("projects", Project.created_at, Project.id, descending=False)
TOKENS = Keyset("tokens", ApiToken.created_at, ApiToken.id, descending=False)
Responses = dict[int | str, dict[str, Any]]
ADMIN_ONLY: Responses = {403: {"description": "a project token: this needs the admin token"}}
UNKNOWN: Responses = {404: {"description": "no such project (or another project's, for a project token)"}}


def _visible(session: Session, caller: Caller, project: str) -> None:
    """404 unless the caller may see `project`: the admin token any existing one, a project token its own."""
    if (not caller.admin and project != caller.project) or projects.get_project(session, project) is None:
        raise no_project(project)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ProjectOut,
             responses={**ADMIN_ONLY, 409: {"description": "the project exists"}})
def create_project(body: ProjectCreate, session: SessionDep, caller: CallerDep) -> ProjectOut:
    require_admin(caller)
    row = projects.add_project(session, body.id)
    if row is None:
        raise HTTPException(status.HTTP_409_CONFLICT, f"project {body.id!r} exists")
    return ProjectOut.of(row)


@router.get("", response_model=Page[ProjectOut])
def list_projects(session: SessionDep, caller: CallerDep, page: PageDep) -> Page[ProjectOut]:
    """Every project for the admin token; a project token's own project for it."""
    stmt = select(Project)
    if not caller.admin:
        stmt = stmt.where(Project.id == caller.project)
    rows, following = PROJECTS.fetch(session, stmt, page)
    return Page(items=[ProjectOut.of(p) for p in rows], next_cursor=following)


@router.post("/{project}/tokens", status_code=status.HTTP_201_CREATED, response_model=TokenCreated,
             responses={**ADMIN_ONLY, **UNKNOWN})
def create_token(project: str, body: TokenCreate, session: SessionDep, caller: CallerDep) -> TokenCreated:
    """A new token of the project: its value is in this answer only (the database keeps its hash)."""
    _visible(session, caller, project)
    require_admin(caller)
    row, value = projects.add_token(session, project, body.label)
    return TokenCreated(**TokenOut.of(row).model_dump(), token=value)


@router.get("/{project}/tokens", response_model=Page[TokenOut], responses=UNKNOWN)
def list_tokens(project: str, session: SessionDep, caller: CallerDep, page: PageDep) -> Page[TokenOut]:
    """The project's tokens, revoked ones included (with `revoked_at`); never their values."""
    _visible(session, caller, project)
    rows, following = TOKENS.fetch(session, select(ApiToken).where(ApiToken.project == project), page)
    return Page(items=[TokenOut.of(t) for t in rows], next_cursor=following)


@router.delete("/{project}/tokens/{token_id}", response_model=TokenOut,
               responses={403: {"description": "a project token revoking another token: this needs the "
                                               "admin token (a token may revoke itself)"},
                          404: {"description": "no such project or token"}})
def revoke_token(project: str, token_id: str, session: SessionDep, caller: CallerDep,
                 creds: BearerDep) -> TokenOut:
    """Revoke a token: it is refused from the next request on. Revoking twice answers the same.
    The admin token revokes any token; a project token only itself (making one needs the admin
    token, so a leaked project token must not be able to lock its project's others out)."""
    _visible(session, caller, project)
    target = session.get(ApiToken, token_id)
    if (not caller.admin and target is not None and target.project == project
            and (creds is None or target.token_hash != projects.token_hash(creds.credentials))):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "revoking another token of the project needs "
                                                       "the installation's admin token; a token may revoke "
                                                       "itself")
    row = projects.revoke_token(session, project, token_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no token {token_id!r} in project {project!r}")
    return TokenOut.of(row)

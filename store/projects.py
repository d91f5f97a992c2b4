"""Projects and their API tokens (store/models.py Project, ApiToken); only a token's hash is kept.

A project is never deleted (nothing here or in a migration removes one): the API remembers which
exist for as long as its process runs (api/auth.py project_exists). Deleting projects would need
that memory dropped first."""

from __future__ import annotations

import hashlib
import secrets as _random

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col

from store.ids import new_id
from store.models import ApiToken, Project, utcnow

DEFAULT_PROJECT = "default"  # exists in every database (migration 0007)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def get_project(session: Session, project: str) -> Project | None:
    return session.get(Project, project)


def add_project(session: Session, project: str) -> Project | None:
    """Create a project and commit; None when it exists already."""
    if session.get(Project, project) is not None:
        return None
    row = Project(id=project)
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # created concurrently
        session.rollback()
        return None
    return row


def add_token(session: Session, project: str, label: str | None) -> tuple[ApiToken, str]:
    """A new token of `project` (committed) and its value, which is not kept: shown once."""
    value = "gpt_" + _random.token_urlsafe(32)
    row = ApiToken(id=new_id(), project=project, token_hash=token_hash(value), label=label)
    session.add(row)
    session.commit()
    return row, value


def project_of_token(conn: sa.Connection, token: str) -> str | None:
    """The project of a live (unrevoked) token, or None. Every request asks: two columns by a
    statement built once, on a bare connection (a Session around it cost more than the read)."""
    row = conn.execute(_TOKEN_LOOKUP, {"token_hash": token_hash(token)}).first()
    if row is None or row.revoked_at is not None:
        return None
    return str(row.project)


_TOKEN_LOOKUP = sa.select(col(ApiToken.project), col(ApiToken.revoked_at)).where(
    col(ApiToken.token_hash) == sa.bindparam("token_hash"))


def revoke_token(session: Session, project: str, token_id: str) -> ApiToken | None:
    """Revoke a token of `project` and commit (a revoked one stays revoked); None if it has none such."""
    row = session.get(ApiToken, token_id)
    if row is None or row.project != project:
        return None
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.add(row)
        session.commit()
    return row

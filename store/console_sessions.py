"""The Compute console's sessions (store/models.py ConsoleSession): opened with an API token, ended
server-side by signing out, by their expiry, or by revoking the project token they were opened with.

The browser holds a random value in an HttpOnly cookie; the database holds only its keyed digest, so
a copy of the database opens no session. The CSRF token a page sends with every write is derived
from the same value (a second keyed digest): nothing more to store, and it dies with the session."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session, col

from store.clock import aware
from store.models import ApiToken, ConsoleSession, utcnow
from store.secrets import SecretBox


@dataclass(frozen=True)
class OpenSession:
    """A live session, as the API sees it: who it is and the CSRF token its writes must carry."""

    admin: bool
    project: str | None
    csrf: str
    expires_at: datetime


def _id_digest(box: SecretBox, value: str) -> str:
    return box.digest(b"gpuprov console session\0" + value.encode())


def csrf_token(box: SecretBox, value: str) -> str:
    return box.digest(b"gpuprov console csrf\0" + value.encode())


def open_session(session: Session, box: SecretBox, *, admin: bool, project: str | None,
                 token_hash: str | None, ttl_s: float) -> tuple[str, OpenSession]:
    """A new session (committed) and the cookie value that opens it, which is not kept."""
    value = secrets.token_urlsafe(32)
    row = ConsoleSession(id_digest=_id_digest(box, value), admin=admin, project=project,
                         token_hash=token_hash, expires_at=utcnow() + timedelta(seconds=ttl_s))
    session.add(row)
    session.commit()
    return value, OpenSession(admin, project, csrf_token(box, value), row.expires_at)


def live_session(conn: sa.Connection, box: SecretBox, value: str | None) -> OpenSession | None:
    """The live session `value` opens, else None: unknown, ended, expired, or opened with a project
    token that has since been revoked. Every console request asks: one statement built once (the
    session's row and its token's revocation together), on a bare connection."""
    digest = _stored_id(box, value)
    if value is None or digest is None:
        return None
    row = conn.execute(_LIVE_LOOKUP, {"id_digest": digest}).first()
    if row is None or row.ended_at is not None or aware(row.expires_at) <= utcnow():
        return None
    if row.token_hash is not None and (row.token_project is None or row.revoked_at is not None):
        return None
    return OpenSession(bool(row.admin), row.project, csrf_token(box, value), aware(row.expires_at))


_LIVE_LOOKUP = sa.select(
    col(ConsoleSession.admin), col(ConsoleSession.project), col(ConsoleSession.token_hash),
    col(ConsoleSession.ended_at), col(ConsoleSession.expires_at),
    sa.label("token_project", col(ApiToken.project)), col(ApiToken.revoked_at),
).outerjoin(ApiToken, col(ApiToken.token_hash) == col(ConsoleSession.token_hash)).where(
    col(ConsoleSession.id_digest) == sa.bindparam("id_digest"))


def end_session(session: Session, box: SecretBox, value: str | None) -> bool:
    """End the session `value` opens (committed); False when there was none live."""
    row = _row(session, box, value)
    if row is None or row.ended_at is not None:
        return False
    row.ended_at = utcnow()
    session.add(row)
    session.commit()
    return True


def _row(session: Session, box: SecretBox, value: str | None) -> ConsoleSession | None:
    """The session row a cookie value names."""
    digest = _stored_id(box, value)
    return None if digest is None else session.get(ConsoleSession, digest)


def _stored_id(box: SecretBox, value: str | None) -> str | None:
    """The id a cookie value's session is stored under; None for a value no cookie of ours could hold."""
    if not value or len(value) > 128:
        return None
    return _id_digest(box, value)



"""Every request's token lookup (api/auth.py `token_project`: on PostgreSQL outside a transaction) on
SQLite and PostgreSQL: a live token's project, nothing for an unknown or a revoked one; and a console
session's (`console_session`: its row and its token's revocation in one statement)."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from cryptography.fernet import Fernet
from sqlmodel import Session, col

from api.auth import console_session, token_project
from store import console_sessions, projects
from store.models import ConsoleSession, utcnow
from store.secrets import SecretBox


def test_a_live_token_names_its_project_a_revoked_one_nothing(migrated: sa.Engine) -> None:
    with Session(migrated) as session:
        projects.add_project(session, "vision")
        row, token = projects.add_token(session, "vision", "t")
        row_id = row.id
    deps: Any = SimpleNamespace(engine=migrated)
    assert token_project(deps, token) == "vision"
    assert token_project(deps, token + "x") is None
    with Session(migrated) as session:
        assert projects.revoke_token(session, "vision", row_id) is not None
    assert token_project(deps, token) is None  # at once: nothing remembered between requests
    assert migrated.pool.checkedout() == 0  # every lookup gave its connection back


def test_a_console_session_opens_while_live_and_its_token_is(migrated: sa.Engine) -> None:
    box = SecretBox(Fernet.generate_key())
    deps: Any = SimpleNamespace(engine=migrated, box=box)
    with Session(migrated) as session:
        projects.add_project(session, "vision")
        row, token = projects.add_token(session, "vision", "t")
        row_id = row.id
        admin, opened = console_sessions.open_session(session, box, admin=True, project=None, token_hash=None,
                                                      ttl_s=600)
        mine, _ = console_sessions.open_session(session, box, admin=False, project="vision",
                                                token_hash=projects.token_hash(token), ttl_s=600)
        ended, _ = console_sessions.open_session(session, box, admin=True, project=None, token_hash=None,
                                                 ttl_s=600)
        expired, _ = console_sessions.open_session(session, box, admin=True, project=None, token_hash=None,
                                                   ttl_s=600)
        assert console_sessions.end_session(session, box, ended)
        session.exec(sa.update(ConsoleSession).where(
            col(ConsoleSession.id_digest) == console_sessions._id_digest(box, expired)).values(
            expires_at=utcnow() - timedelta(seconds=1)))
        session.commit()
    seen = console_session(deps, admin)
    assert seen is not None and (seen.admin, seen.project, seen.csrf) == (True, None, opened.csrf)
    seen = console_session(deps, mine)
    assert seen is not None and (seen.admin, seen.project) == (False, "vision")
    assert seen.csrf == console_sessions.csrf_token(box, mine) != opened.csrf
    for value in (ended, expired, mine + "x", "", "x" * 129):
        assert console_session(deps, value) is None, value
    with Session(migrated) as session:
        assert projects.revoke_token(session, "vision", row_id) is not None
    assert console_session(deps, mine) is None  # the token's revocation ends its sessions at once
    assert console_session(deps, admin) is not None
    assert migrated.pool.checkedout() == 0

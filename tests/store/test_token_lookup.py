"""Every request's token lookup (api/auth.py `token_project`: on PostgreSQL outside a transaction) on
SQLite and PostgreSQL: a live token's project, nothing for an unknown or a revoked one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from api.auth import token_project
from store import projects


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

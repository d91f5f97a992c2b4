"""Alembic environment. The engine (or URL) is handed in by store.migrate via
`config.attributes`; when alembic is run by hand it falls back to settings."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context
from sqlmodel import SQLModel

import store.models  # noqa: F401 — registers the tables on SQLModel.metadata
from store.db import make_engine

config = context.config
target_metadata = SQLModel.metadata


def _engine() -> sa.Engine:
    engine = config.attributes.get("engine")
    if engine is not None:
        return engine
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        from settings import get_settings

        url = get_settings().resolved_database_url()
    return make_engine(url)


def run_migrations_offline() -> None:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True,
                      render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    with _engine().connect() as connection:
        _run(connection)


def _run(connection: sa.Connection) -> None:
    # render_as_batch: SQLite can't ALTER most things; batch mode copies the table instead.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        if connection.dialect.name == "postgresql":
            # N API replicas and workers start together: one upgrades, the others wait, then no-op.
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(727274)"))
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

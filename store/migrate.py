"""Schema migrations (alembic), applied at API, worker and `gpuprov dev` start.

    from store.migrate import upgrade
    upgrade(engine)            # or upgrade("sqlite:///...") / upgrade() for the configured DB
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from store.db import in_memory_sqlite, make_engine


class MigrationError(Exception):
    """The database is in a state the migrations cannot safely act on."""


MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_MIGRATION_LOCK = 0x67707276  # "gprv": any constant unique to gpuprov within its database


def alembic_config(engine_or_url: sa.Engine | str | None = None) -> Config:
    """A Config without alembic.ini: the script location is this package's migrations dir."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if isinstance(engine_or_url, sa.Engine):
        cfg.attributes["engine"] = engine_or_url
    elif engine_or_url:
        cfg.attributes["url"] = engine_or_url
    return cfg


def _engine(engine_or_url: sa.Engine | str | None) -> sa.Engine:
    if isinstance(engine_or_url, sa.Engine):
        return engine_or_url
    if engine_or_url:
        return make_engine(engine_or_url)
    from store.db import default_engine

    return default_engine()


def head() -> str:
    rev = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert rev is not None
    return rev


def current(engine_or_url: sa.Engine | str | None = None) -> str | None:
    with _engine(engine_or_url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine_or_url: sa.Engine | str | None = None, revision: str = "head") -> None:
    """Bring the schema to `revision`. Safe to call from several processes at once: every worker
    and API process migrates at start, and they take turns — on PostgreSQL by an advisory lock held
    for the transaction, on SQLite by a lock on a file beside the database (its driver sends no
    BEGIN before DDL: two processes creating the tables at once failed "table ... already exists")."""
    engine = _engine(engine_or_url)
    cfg = alembic_config(engine)
    with _sqlite_turn(engine), engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
        cfg.attributes["connection"] = conn
        if _created_without_alembic(conn):
            # Tables with no migration record: we cannot know their revision, and guessing
            # could corrupt them. Refuse, touching nothing.
            raise MigrationError(
                "the database has gpuprov tables but no alembic_version record; it was not created "
                "by gpuprov's migrations. Point GPUPROV_DATABASE_URL at an empty database, or stamp "
                "it with `alembic stamp <revision>` if you know its schema.")
        command.upgrade(cfg, revision)


@contextmanager
def _sqlite_turn(engine: sa.Engine) -> Iterator[None]:
    """On a SQLite file, this process's turn to migrate it (an flock on `<database>.migrate-lock`,
    released when the file closes, also by a process that dies holding it); elsewhere nothing."""
    if engine.dialect.name != "sqlite" or in_memory_sqlite(engine.url):
        yield
        return
    with open(f"{engine.url.database}.migrate-lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _created_without_alembic(conn: sa.Connection) -> bool:
    names = set(sa.inspect(conn).get_table_names())
    return "alembic_version" not in names and "instance" in names


if __name__ == "__main__":  # `python -m store.migrate`: migrate the configured database and exit
    upgrade()

"""A migrated SQLite database for a test without running the migrations for it.

Running the 22 migrations costs about half a second of CPU per database, and the API and CLI tests
each want a fresh one (500+ of them): the first call in a test process migrates a template once,
every call copies that file (a closed, checkpointed SQLite file copies as a whole). What the
migrations themselves do is tested on SQLite and PostgreSQL in tests/store/test_migrations.py."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

import sqlalchemy as sa

from store import migrate
from store.db import make_engine

_template: Path | None = None


def _migrated_template() -> Path:
    global _template
    if _template is None:
        folder = Path(tempfile.mkdtemp(prefix="gpuprov-schema-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = folder / "template.db"
        engine = make_engine(f"sqlite:///{path}")
        migrate.upgrade(engine)
        engine.dispose()  # the last connection closed: the WAL is checkpointed into the file
        _template = path
    return _template


def sqlite_engine(path: Path) -> sa.Engine:
    """An engine on a new SQLite database at `path`, at the migrations' head."""
    if path.exists():
        raise FileExistsError(f"{path} exists: a migrated copy goes to a new file only")
    shutil.copyfile(_migrated_template(), path)
    return make_engine(f"sqlite:///{path}")

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlmodel import SQLModel

from messages.enums import AllocationStatus
from store import migrate

ROOT = Path(__file__).resolve().parents[2]


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_upgrade_creates_exactly_the_model_tables(engine: sa.Engine) -> None:
    assert migrate.current(engine) is None
    migrate.upgrade(engine)
    assert migrate.current(engine) == migrate.head()
    assert _tables(engine) == set(SQLModel.metadata.tables) | {"alembic_version"}
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, SQLModel.metadata) == []


def test_upgrade_is_idempotent_and_downgrade_removes_everything(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    migrate.upgrade(engine)  # every process runs it at start; the second is a no-op
    assert migrate.current(engine) == migrate.head()
    command.downgrade(migrate.alembic_config(engine), "base")
    assert _tables(engine) <= {"alembic_version"}


def test_upgrade_refuses_tables_it_did_not_make_and_leaves_them_alone(engine: sa.Engine) -> None:
    SQLModel.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO instance (id, project, provider, connection_id, workflow_id, "
                             "status, phase) VALUES ('keep', 'p', 'local', 'c', 'w', 'ready', 'ready')"))
    with pytest.raises(migrate.MigrationError, match="no alembic_version"):
        migrate.upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT status FROM instance WHERE id = 'keep'")).scalar() == "ready"
        assert "alembic_version" not in sa.inspect(conn).get_table_names()


def test_upgrade_accepts_a_url(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'by-url.db'}"
    migrate.upgrade(url)
    assert migrate.current(url) == migrate.head()


def _instance(engine: sa.Engine, iid: str, status: str, workflow_id: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO instance (id, project, provider, connection_id, workflow_id, "
                             "status, phase) VALUES (:id, 'p', 'local', 'c', :wid, :st, :st)"),
                     {"id": iid, "wid": workflow_id, "st": status})


def test_processes_migrating_one_new_sqlite_file_at_once_take_turns(tmp_path: Path) -> None:
    # As the API's processes and the worker do at start. Without the lock all but one failed
    # ("table ... already exists"): SQLite's driver sends no BEGIN before DDL, so nothing serialised them.
    url = f"sqlite:///{tmp_path / 'gpuprov.db'}"
    script = "import sys; from store import migrate; migrate.upgrade(sys.argv[1])"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = [subprocess.Popen([sys.executable, "-c", script, url], cwd=ROOT, env=env,
                                stderr=subprocess.PIPE, text=True) for _ in range(4)]
    failures = [err for p in started if (err := p.communicate(timeout=240)[1]) and p.returncode != 0]
    assert failures == []
    assert migrate.current(url) == migrate.head()


def test_upgrade_refuses_while_a_live_instance_runs_under_a_retired_workflow(engine: sa.Engine) -> None:
    """0023: the retired AllocateWorkflow's code is gone, so its live machines must be ended first."""
    migrate.upgrade(engine, "0022")
    _instance(engine, "old1", "ready", "allocate-old1")
    _instance(engine, "old2", "terminated", "allocate-old2")  # ended: nothing left to end
    _instance(engine, "new1", "ready", "allocation-new1")
    named = r"1 live instance.*old1 \(project p, ready, workflow allocate-old1\)"
    with pytest.raises(RuntimeError, match=named):
        migrate.upgrade(engine)
    assert migrate.current(engine) == "0022"  # nothing changed: the upgrade rolled back
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE instance SET status = 'terminated' WHERE id = 'old1'"))
    migrate.upgrade(engine)
    assert migrate.current(engine) == migrate.head()


@pytest.mark.parametrize("index", ["ix_instance_live_project_created_at",
                                   "ix_instance_live_project_connection"])
def test_the_live_instances_indexes_hold_exactly_the_live_statuses(engine: sa.Engine, index: str) -> None:
    """0032's partial indexes are read only by a query whose status list is their predicate: a
    status made live (or no longer live) without a migration that rebuilds them would leave the
    Cloud tab reading every live row again, so the two must agree."""
    migrate.upgrade(engine)
    query = ("SELECT sql FROM sqlite_master WHERE name = :n" if engine.dialect.name == "sqlite"
             else "SELECT indexdef FROM pg_indexes WHERE indexname = :n AND schemaname = current_schema()")
    with engine.connect() as conn:
        definition = conn.execute(sa.text(query), {"n": index}).scalar_one()
    held = {s.value for s in AllocationStatus if f"'{s.value}'" in definition}
    assert held == {s.value for s in AllocationStatus if s.live}, definition

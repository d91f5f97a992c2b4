"""A worker stopped by SIGTERM ends with exit code 0 once it has shut down: not, now and then, the
abort of the Temporal SDK's threads in the interpreter's teardown ("Fatal Python error:
PyGILState_Release", exit 134; 1 of 30 SIGTERMs of an idle worker before workflows/converter.py's
exit_after_client). That abort is rare, so one stop here seldom shows it; what this shows every time is
the path the worker now ends by: a graceful shutdown, then exit code 0."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import sqlalchemy as sa
from sqlmodel import Session
from temporalio.testing import WorkflowEnvironment

from fakeclouds.server import FakeCloudServer
from store.models import Connection, Instance
from store.secrets import SecretBox
from tests import simclouds
from tests.crash.conftest import WorkerProcess, worker_env
from tests.eventually import eventually

ROOT = Path(__file__).resolve().parent.parent.parent


async def test_a_worker_stopped_by_sigterm_shuts_down_and_exits_0(worker_process: WorkerProcess) -> None:
    # Its own log, not the task queue's pollers: those still list an earlier test's worker for a while,
    # and a SIGTERM before this one has set its handlers kills it (-15), as a fresh clone's run showed.
    await eventually(lambda: "watching" in worker_process.log.read_text(errors="replace"), within=90,
                     what="the worker running (its 'watching … connection(s)' line)")
    worker_process.stop()
    assert worker_process.proc is not None
    log = worker_process.log.read_text(errors="replace")
    assert worker_process.proc.returncode == 0, log[-3000:]
    assert "shutting down" in log and "Fatal Python error" not in log


async def test_a_stopped_worker_removes_the_ca_bundle_files_its_adapters_wrote(
        temporal_env: WorkflowEnvironment, tmp_path: Path, db_path: Path, secret_key: bytes,
        db_engine: sa.Engine, secret_box: SecretBox, sim: FakeCloudServer, processes: None) -> None:
    """An SDK adapter given a CA bundle writes it to a file in the temporary directory (boto3,
    requests and azure-core take a path: providers/sdk.py `ca_bundle_file`), removed when the adapter
    closes. A worker stopped by SIGTERM closes its adapters as it exits; before, every stop of a
    worker with an Azure, AWS or GCP connection to a private CA left one file per connection."""
    with Session(db_engine) as s:
        connection_id = simclouds.add_connection(s, secret_box, sim, "azure")  # served over TLS: a CA
        # A ready machine to watch (the watch builds no adapter for a connection without one).
        s.add(Instance(id="ca-file-probe", provider="azure", connection_id=connection_id,
                       workflow_id="allocation-ca-file-probe", status="ready", phase="ready",
                       cloud_instance_id="ca-file-probe", key="ca-file-probe"))
        s.commit()
    worker = WorkerProcess(worker_env(temporal_env, tmp_path, db_path, secret_key, sim),
                           tmp_path / "worker.log")
    temp = tmp_path / "tmp"  # its TMPDIR (worker_env)
    try:
        worker.start()
        # The worker starts a watch on every connection; its first round lists the machines.
        await eventually(lambda: list(temp.glob("gpuprov-azure-ca-*.pem")), within=90,
                         what="the Azure adapter's CA bundle file written")
        worker.stop()
        assert worker.proc is not None and worker.proc.returncode == 0, worker.log.read_text()[-3000:]
        assert list(temp.iterdir()) == []
    finally:
        worker.kill()
        with Session(db_engine) as s:  # the module's other workers would watch them too
            s.delete(s.get_one(Instance, "ca-file-probe"))
            s.delete(s.get_one(Connection, connection_id))
            s.commit()


def test_exit_after_client_flushes_what_is_buffered_and_skips_the_teardown(tmp_path: Path) -> None:
    """Its output, buffered (stdout to a file, PYTHONUNBUFFERED unset) and held by a logging handler
    until shutdown, is written; the exit code is the one given; no teardown runs (an atexit hook
    would be part of it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout block-buffered
    script = textwrap.dedent(f"""
        import atexit, logging, logging.handlers, sys
        from workflows.converter import exit_after_client
        held = logging.handlers.MemoryHandler(capacity=1000, flushLevel=logging.CRITICAL,
                                              target=logging.FileHandler({str(tmp_path / "log")!r}))
        logging.getLogger().addHandler(held)
        logging.getLogger().warning("logged before the exit")
        atexit.register(lambda: open({str(tmp_path / "teardown")!r}, "w").close())
        sys.stdout.write("printed before the exit")
        exit_after_client(3)
        """)
    with (tmp_path / "out").open("wb") as out:
        done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, stdout=out,
                              stderr=subprocess.PIPE, timeout=60)
    assert done.returncode == 3, done.stderr.decode()
    assert (tmp_path / "out").read_text() == "printed before the exit"
    assert (tmp_path / "log").read_text() == "logged before the exit\n"
    assert not (tmp_path / "teardown").exists()

"""One Temporal dev server (SQLite on disk, WAL), one simulated cloud, one store and one worker
process, shared by the benchmarks so every figure is measured side by side. Each of those runs as
its own process, so /proc attributes CPU and memory to it apart from this (the bench client)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import sqlalchemy as sa
from cryptography.fernet import Fernet
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from activities.deps import ActivityDeps
from bench.procs import pid_with_arg
from bench.worker_proc import KEY_ENV
from fakeclouds import clouds
from fakeclouds.connect import allowed_env, ca_bundle, endpoint
from fakeclouds.server import FakeCloudProcess, start_subprocess
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from providers import registry
from providers.pacing import TIME_SCALE_ENV
from store import connections as connection_store
from store import migrate
from store.db import make_engine, session_scope
from store.secrets import SecretBox
from workflows import client_calls, dev_server, search_attributes
from workflows.converter import data_converter

ROOT = Path(__file__).resolve().parent.parent
# A git worktree has no .venv of its own: GPUPROV_TEMPORAL_BIN points at another checkout's CLI.
TEMPORAL_BIN = os.environ.get("GPUPROV_TEMPORAL_BIN", str(ROOT / ".venv" / "bin" / "temporal"))
TASK_QUEUE = "gpuprov-bench"
INSTALLATION = "benchins"
# The clouds (a) is measured on, each through its simulation; the other figures use Lambda.
OVERHEAD_CLOUDS = ("lambda", "aws", "gcp", "azure")
CLOUD_STOP_S = 120.0  # the simulated cloud's shutdown, after a whole run's thousands of machines


def region_for(cloud: str) -> str | None:
    """Where a bench allocation on `cloud` goes: its first region where the cloud needs one."""
    caps = registry.capabilities(cloud)
    return caps.regions[0] if caps.region_required else None


@dataclass
class Bench:
    client: Client
    cloud: FakeCloudProcess
    engine: sa.Engine
    deps: ActivityDeps  # the harness's own (direct calls in (a)); worker processes build the same
    connections: dict[str, str]  # cloud -> its connection id (OVERHEAD_CLOUDS)
    user_key: str  # a user's public key, as `gpuprov up --ssh-key` would send
    boot_delay: float
    temporal_pid: int
    worker_pid: int  # the gpuprov worker on TASK_QUEUE
    _db: Path
    _fernet_key: bytes

    def request(self, allocation_id: str, timing: Timing, *, cloud: str = "lambda",
                **fields: object) -> AllocateRequest:
        fields.setdefault("region", region_for(cloud))
        return AllocateRequest(allocation_id=allocation_id, connection_id=self.connections[cloud],
                               cloud=cloud, k3s=False,
                               ssh_public_keys=[self.user_key], timing=timing, **fields)  # type: ignore[arg-type]

    async def allocate(self, allocation_id: str, timing: Timing, *, task_queue: str = TASK_QUEUE,
                       cloud: str = "lambda", **fields: object) -> float:
        """Run one allocation to ready on a simulated cloud (Lambda unless told); its wall time in s."""
        req = self.request(allocation_id, timing, cloud=cloud, **fields)
        t0 = time.perf_counter()
        workflow_id = allocation_workflow_id(allocation_id)
        await client_calls.start(self.client, wf.ALLOCATION, AllocationInput(request=req),
                                 workflow_id=workflow_id, task_queue=task_queue)
        state = await client_calls.update(self.client, workflow_id, wf.ALLOCATION.ready)  # a long poll
        if state.phase != Phase.READY:
            raise RuntimeError(f"allocation {allocation_id} ended {state.phase}: {state.error}")
        return time.perf_counter() - t0

    async def release(self, allocation_id: str) -> None:
        """Terminate an allocation and wait until the cloud shows its machine gone (not timed)."""
        await client_calls.update(self.client, allocation_workflow_id(allocation_id), wf.ALLOCATION.terminate)

    @asynccontextmanager
    async def worker_process(self, kind: str, task_queue: str,
                             env: dict[str, str] | None = None) -> AsyncIterator[int]:
        """Run `python -m bench.worker_proc kind` on `task_queue` until exit (with `env` on top of the
        harness's: GPUPROV_* settings the worker reads); yields its pid."""
        argv = [sys.executable, "-m", "bench.worker_proc", kind, "--task-queue", task_queue,
                "--target", self.client.service_client.config.target_host,
                "--db", str(self._db), "--installation", INSTALLATION]
        pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        full = {**os.environ, "PYTHONPATH": pythonpath, KEY_ENV: self._fernet_key.decode(),
                # like `make run`: the worker may call the simulated clouds, nothing else on loopback
                **allowed_env(self.cloud), TIME_SCALE_ENV: "0", **(env or {})}
        proc = await asyncio.create_subprocess_exec(*argv, cwd=ROOT, env=full, stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        drain: asyncio.Task[None] | None = None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 120)
            if line.strip() != b"ready":
                raise RuntimeError(f"bench worker ({kind}) did not start (exit code {proc.returncode})")
            # Everything it writes after "ready" is read on: the Temporal SDK's core logs to stdout
            # under load, and a full pipe blocked the core's threads — every poller stopped, the
            # worker idle with 1,000 allocations in flight (what (scale) first showed as a stall).
            drain = asyncio.create_task(_copy_to_stderr(proc.stdout))
            yield proc.pid
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)  # graceful: in-flight activities get their grace period
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            if drain is not None:
                # Read on to the end of its output: a pipe left open here is closed by the garbage
                # collector after the bench's event loop has gone ("Event loop is closed").
                try:
                    await asyncio.wait_for(drain, 10)
                except TimeoutError:
                    pass


async def _copy_to_stderr(stream: asyncio.StreamReader) -> None:
    while line := await stream.readline():
        sys.stderr.buffer.write(line)


@asynccontextmanager
async def bench_stack(*, boot_delay: float) -> AsyncIterator[Bench]:
    os.environ[TIME_SCALE_ENV] = "0"  # this process's adapters (the direct side) do not pace either
    with tempfile.TemporaryDirectory(prefix="gpuprov-bench-") as tmp:
        home = Path(tmp)
        temporal_db = str(home / "temporal.db")
        fernet_key = Fernet.generate_key()  # the secret store's and the payload codec's
        env = await WorkflowEnvironment.start_local(
            data_converter=data_converter([fernet_key]),
            dev_server_existing_path=TEMPORAL_BIN,
            dev_server_database_filename=temporal_db,
            search_attributes=search_attributes.ALL,
            dev_server_startup_timeout=dev_server.STARTUP_TIMEOUT,
            # Its "slow gRPC call" warnings under the throughput figure's load would bury the figures.
            dev_server_log_level="error",
            dev_server_extra_args=dev_server.FLAGS,
        )
        db = home / "gpuprov.db"
        engine = make_engine(f"sqlite:///{db}")
        migrate.upgrade(engine)
        box = SecretBox(fernet_key)
        deps = ActivityDeps(engine=engine, box=box, installation_id=INSTALLATION, client=env.client)
        deps.public_key()  # create the SSH identity now, not raced by the worker's first activities
        try:
            # The cloud runs in its own process, as a real one would be remote.
            # Documented rate limits off (and so the adapters' pacing): the bench measures overhead.
            cloud = start_subprocess(boot_delay=boot_delay, terminate_delay=0.01, time_scale=0)
            try:
                connections = {}
                with session_scope(engine) as s:
                    for name in OVERHEAD_CLOUDS:
                        sim = clouds.facade(name)
                        connections[name] = connection_store.add_connection(
                            s, box, provider=name, name="bench", endpoint=endpoint(cloud, name),
                            ca_bundle=ca_bundle(cloud, name),
                            credentials=sim.credentials(cloud.tokens[name])).id
                user_key = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
                b = Bench(env.client, cloud, engine, deps, connections, user_key, boot_delay,
                          temporal_pid=pid_with_arg(temporal_db), worker_pid=0,
                          _db=db, _fernet_key=fernet_key)
                async with b.worker_process("gpuprov", TASK_QUEUE) as pid:
                    b.worker_pid = pid
                    yield b
            finally:
                # Their homes take a while to remove (2,001 took 7.7 s): more than a test's cloud is
                # given. Killed before it finished, the cloud left them in /tmp for its next start.
                cloud.stop(timeout=CLOUD_STOP_S)
        finally:
            await env.shutdown()
            engine.dispose()

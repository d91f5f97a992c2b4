"""A pool scaled 0 → 8 → 3 → 0 by its ScaleWorkflow on the simulated local cloud, with the REAL worker
process SIGKILLed in the middle of each step and restarted: the cloud's own state, sampled all along,
never holds more than 8 of the pool's machines, and each step ends at exactly the desired size. A
machine that dies on the cloud is replaced (the watch reports it lost; the pool fills its slot with the
next generation). The pool's spec is written the way PUT writes it (store/pools.py)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from fakeclouds.admin import FakeCloudAdminError
from fakeclouds.engine import HELD_S, PENDING, TERMINATED, TERMINATING, Machine
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import Timing
from messages.pool import (
    POOL_ID_LENGTH,
    PoolStatus,
    ScaleInput,
    ScaleState,
    scale_workflow_id,
    slot_of_allocation,
)
from store import ids, pools, projects
from store.models import Pool
from tests.crash.conftest import TASK_QUEUE, WorkerProcess, worker_env
from tests.eventually import eventually
from tests.processes import until

TIMING = Timing(heartbeat_timeout_s=2, poll_interval_s=0.2, call_timeout_s=30, boot_timeout_s=60,
                ssh_timeout_s=20, max_retry_interval_s=1, record_timeout_s=5)
MAX = 8
PARALLEL = 4  # machines provisioning at once
# A workflow task held by the killed worker goes to the new one after this (Temporal's default: 10 s).
TASK_TIMEOUT_S = 3.0
BOOT_DELAY_S, TERMINATE_DELAY_S = 0.3, 0.05  # the crash tests' simulated cloud's (tests/crash/conftest.py)


@pytest.fixture
def pool_worker(temporal_env: WorkflowEnvironment, tmp_path: Path, db_path: Path, secret_key: bytes,
                db_engine: sa.Engine, sim: FakeCloudServer, local_connection: str,
                processes: None) -> Iterator[WorkerProcess]:
    """`python worker.py`, started after the connection exists (so its watch runs), watching every
    0.5 s, and handing a crashed worker's workflows to the next one after 1 s, not Temporal's 10 s."""
    env = {**worker_env(temporal_env, tmp_path, db_path, secret_key, sim), "GPUPROV_WATCH_INTERVAL_S": "0.5"}
    w = WorkerProcess(env, tmp_path / "worker.log")
    w.start()
    yield w
    w.stop()


@pytest.fixture
def delays_restored(sim: FakeCloudServer) -> Iterator[None]:
    """The module's simulated cloud gets its boot and teardown delays back, however the test ends."""
    yield
    sim.admin.configure(boot_delay=BOOT_DELAY_S, terminate_delay=TERMINATE_DELAY_S)


class CloudSampler:
    """The cloud's own view of the pool's machines (the simulation's engine, not gpuprov's records),
    sampled every 10 ms on a thread of its own, so the bound is watched even while the test waits."""

    def __init__(self, sim: FakeCloudServer, pool_id: str) -> None:
        self.engine, self.mark = sim.engine, f"pl{pool_id}-"
        self.most = 0
        self.most_booting = 0
        self.samples = 0
        self._stop = threading.Event()

    def machines(self) -> list[Machine]:
        """The pool's machines that are not gone (terminating ones still count: they still exist)."""
        while True:
            try:
                every = list(self.engine.machines.values())  # the engine's loop may add one meanwhile
                break
            except RuntimeError:
                continue
        found = [m for m in every if self.mark in (m.name or "") and m.status != TERMINATED]
        booting = sum(1 for m in found if m.status == PENDING)
        self.most, self.samples = max(self.most, len(found)), self.samples + 1
        self.most_booting = max(self.most_booting, booting)
        return found

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.machines()

    @contextmanager
    def running(self) -> Iterator[CloudSampler]:
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()


def _row(engine: sa.Engine, pool_id: str) -> Pool | None:
    with Session(engine) as session:
        return session.get(Pool, pool_id)


async def settled(engine: sa.Engine, cloud: CloudSampler, pool_id: str, size: int) -> bool:
    """The cloud holds exactly `size` running machines of the pool, and the pool's last reconcile
    counted them all ready."""
    machines = cloud.machines()
    if len(machines) != size or any(m.status != "running" for m in machines):
        return False
    row = await asyncio.to_thread(_row, engine, pool_id)
    shown = (row.machines or []) if row is not None else []
    return len(shown) == size and all(m["on_cloud"] and m["status"] == "ready" for m in shown)


def _resize(engine: sa.Engine, pool_id: str, size: int) -> None:
    with Session(engine) as session:
        row = session.get(Pool, pool_id)
        assert row is not None
        row.size = size
        pools.save_pool(session, row)


def _delete(engine: sa.Engine, pool_id: str) -> None:
    with Session(engine) as session:
        pools.mark_deleting(session, pool_id)


async def crash(worker: WorkerProcess) -> None:
    worker.kill()
    worker.start()


async def test_scale_0_8_3_0_with_the_worker_killed_in_each_step(
        temporal_client: Client, sim: FakeCloudServer, db_engine: sa.Engine, pool_worker: WorkerProcess,
        delays_restored: None) -> None:
    await sim.admin.aio.set_stock("cpu-small", "local-1", 20, facade="local")
    pool_id, name = ids.new_id(POOL_ID_LENGTH), f"p{uuid.uuid4().hex[:6]}"
    with Session(db_engine) as session:
        pools.save_pool(session, Pool(id=pool_id, project=projects.DEFAULT_PROJECT, name=name, cloud="local",
                                      min_size=0, max_size=MAX, size=MAX, status=PoolStatus.ACTIVE,
                                      workflow_id=scale_workflow_id(pool_id)))
    handle: WorkflowHandle[Any, ScaleState] = await temporal_client.start_workflow(
        wf.SCALE.name, ScaleInput(pool_id=pool_id, project=projects.DEFAULT_PROJECT, name=name, timing=TIMING,
                                    resync_s=0.5, parallel=PARALLEL, task_timeout_s=TASK_TIMEOUT_S),
        id=scale_workflow_id(pool_id), task_queue=TASK_QUEUE, result_type=ScaleState,
        task_timeout=timedelta(seconds=TASK_TIMEOUT_S))
    cloud = CloudSampler(sim, pool_id)
    await sim.admin.aio.configure(hold_boots=True)
    with cloud.running():
        # 0 → 8: killed while the first machines boot (held booting, so their allocations wait on a
        # heartbeating activity, whose loss is noticed in seconds; a 2 s boot could end before all
        # four were made on a busy box) and the others are not made yet; then their boots end.
        await until(lambda: _booting(cloud, PARALLEL), 60, "the first machines booting")
        await crash(pool_worker)
        await sim.admin.aio.configure(hold_boots=False)
        await boot_now(sim, cloud)
        await until(lambda: settled(db_engine, cloud, pool_id, 8), 90, "8 ready machines")

        # 8 → 3: the cloud holds the teardowns terminating, so the kill lands while machines are being
        # removed however slow this host; they end once the delay is back.
        await sim.admin.aio.configure(terminate_delay=HELD_S)
        await asyncio.to_thread(_resize, db_engine, pool_id, 3)
        ready = {m.id for m in cloud.machines()}
        await handle.execute_update(wf.SCALE.reconcile.name)
        await under_way(cloud, ready, 5)
        await crash(pool_worker)
        await sim.admin.aio.configure(terminate_delay=TERMINATE_DELAY_S)
        await until(lambda: settled(db_engine, cloud, pool_id, 3), 90, "3 ready machines")

        # A machine dies on the cloud: it is replaced by the next generation of its slot.
        victim = cloud.machines()[0]
        await sim.admin.aio.kill(victim.id)
        await until(lambda: _replaced(cloud, victim), 60, "the dead machine replaced")
        await until(lambda: settled(db_engine, cloud, pool_id, 3), 90, "3 ready machines again")

        # 3 → 0 (DELETE): killed during the (held) teardown; the pool is forgotten once the cloud shows none.
        await sim.admin.aio.configure(terminate_delay=HELD_S)
        await asyncio.to_thread(_delete, db_engine, pool_id)
        ready = {m.id for m in cloud.machines()}
        await handle.execute_update(wf.SCALE.reconcile.name)
        await under_way(cloud, ready, 3)
        await crash(pool_worker)
        await sim.admin.aio.configure(terminate_delay=TERMINATE_DELAY_S)
        final = await asyncio.wait_for(handle.result(), 90)
        assert final.done and final.slots == {}
        assert cloud.machines() == []
        assert await asyncio.to_thread(_row, db_engine, pool_id) is None
    assert cloud.samples > 50  # the bound below was watched, not glimpsed
    assert cloud.most == MAX, f"the cloud held {cloud.most} of the pool's machines at once (max {MAX})"
    assert 0 < cloud.most_booting <= PARALLEL, f"{cloud.most_booting} booting at once (parallel {PARALLEL})"


async def boot_now(sim: FakeCloudServer, cloud: CloudSampler) -> None:
    """End the boot of each of the pool's machines still booting (those created while boots were held:
    any made since boots on its own)."""
    for m in cloud.machines():
        if m.status == PENDING:
            try:
                await sim.admin.aio.boot_now(m.id)
            except FakeCloudAdminError as err:  # up (or gone) since it was sampled: nothing to end
                if err.status != 400:
                    raise


async def _booting(cloud: CloudSampler, n: int) -> bool:
    return sum(1 for m in cloud.machines() if m.status == PENDING) >= n


async def under_way(cloud: CloudSampler, ready: set[str], n: int) -> None:
    """Until `n` of the `ready` machines have begun their teardown (terminating, or gone) and one at
    least is still terminating: a kill now lands mid-teardown. With the teardowns held (HELD_S) none
    is gone, so that is `n` terminating at once, however far apart they began (a fresh-clone run once
    saw 3 never terminating together within 60 s at a 1.5 s teardown)."""
    def begun() -> bool:
        now = {m.id: m.status for m in cloud.machines()}
        terminating = [i for i in ready if now.get(i) == TERMINATING]
        gone = [i for i in ready if i not in now]
        return bool(terminating) and len(terminating) + len(gone) >= n

    await eventually(begun, within=60, what=f"{n} teardowns under way",
                     detail=lambda: {m.id: m.status for m in cloud.machines()})


async def _replaced(cloud: CloudSampler, victim: Machine) -> bool:
    machines = cloud.machines()
    dead = slot_of_allocation(_allocation(victim))
    assert dead is not None
    for m in machines:
        slot = slot_of_allocation(_allocation(m))
        if slot is not None and slot.slot == dead.slot and slot.generation > dead.generation:
            return all(other.id != victim.id for other in machines)
    return False


def _allocation(machine: Machine) -> str:
    """The allocation id in a local machine's name (the attempt key `gp-<allocation>-a<n>`)."""
    from messages.ids import allocation_of_key

    allocation_id = allocation_of_key(machine.name or "")
    assert allocation_id is not None, machine
    return allocation_id

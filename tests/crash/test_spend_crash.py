"""The spend ledger across worker crashes (SIGKILL, restart): one allocation's worker dies while its
machine runs, another's while its teardown is under way. Each keeps exactly one interval, its start
where it was before the crash (no minute lost), the time the worker was down counted, and its end
when the cloud showed the machine gone (no minute doubled)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime

import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client

from fakeclouds.engine import HELD_S
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState
from messages.enums import Phase
from messages.ids import allocation_workflow_id, attempt_key
from store import spend
from store.models import SpendInterval, utcnow
from tests.crash.conftest import TASK_QUEUE, WorkerProcess
from tests.crash.test_worker_crash import TIMING, USER_KEY, until
from tests.workflows.conftest import settled, terminate


def ledger(engine: sa.Engine, allocation_id: str) -> list[SpendInterval]:
    with Session(engine) as s:
        return list(spend.intervals_of(s, allocation_id))


def at(t: datetime | None) -> datetime:
    assert t is not None
    return spend.aware(t)


async def running(client: Client, ids: list[str], connection_id: str) -> list[AllocationState]:
    """Allocate `ids` on the simulated cloud and wait until each is ready."""
    handles = [await client.start_workflow(
        wf.ALLOCATION.name,
        AllocationInput(request=AllocateRequest(allocation_id=a, connection_id=connection_id, cloud="local",
                                                ssh_public_keys=[USER_KEY], timing=TIMING)),
        id=allocation_workflow_id(a), task_queue=TASK_QUEUE, result_type=AllocationState) for a in ids]
    return [await asyncio.wait_for(settled(h), 90) for h in handles]


async def test_a_killed_worker_neither_loses_nor_doubles_minutes(
        temporal_client: Client, sim: FakeCloudServer, worker_process: WorkerProcess, local_connection: str,
        db_engine: sa.Engine) -> None:
    first, second = ids = [f"spend-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    states = await running(temporal_client, ids, local_connection)
    opened = {}
    for a, st in zip(ids, states, strict=True):
        [iv] = ledger(db_engine, a)
        assert st.offer is not None and iv.rate_per_hour == st.offer.price_per_hour
        assert iv.key == attempt_key(a, 1) and iv.ended_at is None
        opened[a] = (iv.id, at(iv.started_at))

    # 1. Killed while both machines run (and bill); restarted; the first is terminated.
    worker_process.kill()
    killed = utcnow()
    worker_process.start()
    asked = utcnow()
    assert (await asyncio.wait_for(terminate(temporal_client, first), 90)).phase == Phase.TERMINATED
    done = utcnow()
    [iv] = ledger(db_engine, first)  # one interval: the restarted worker's retries opened none
    assert (iv.id, at(iv.started_at)) == opened[first]  # the start is kept
    assert opened[first][1] < killed < asked <= at(iv.ended_at) <= done  # the downtime counted

    # 2. Killed while the second's teardown runs: the cloud holds the machine terminating (however
    # slow this host, the worker cannot see it gone before the kill), then lets it go.
    sim.admin.configure(terminate_delay=HELD_S)
    try:
        teardown = asyncio.ensure_future(terminate(temporal_client, second))
        machine = states[1].ref.instance_id  # type: ignore[union-attr]
        await until(lambda: any(m["id"] == machine and m["status"] == "terminating"
                                for m in sim.admin.machines()))
        worker_process.kill()
        killed = utcnow()
        assert ledger(db_engine, second)[0].ended_at is None  # still billing: still open
    finally:
        sim.admin.configure(terminate_delay=0.05)  # the held termination ends
    worker_process.start()
    assert (await asyncio.wait_for(teardown, 90)).phase == Phase.TERMINATED
    done = utcnow()
    [iv] = ledger(db_engine, second)
    assert (iv.id, at(iv.started_at)) == opened[second]
    assert killed < at(iv.ended_at) <= done  # closed once, when the cloud showed it gone
    assert all(m["status"] == "terminated" for m in sim.admin.machines())

"""Jobs on a pool's machines, end to end: a pool of 2 machines on the simulated cloud (its row written
the way PUT writes it, its ScaleWorkflow on this module's worker with the tests' fast timing), jobs
posted through the API with `pool`. Two run at once on distinct machines, a third waits for a free
one; all succeed and the pool keeps its 2 machines. Scaling to 1 while a job runs terminates the idle
machine, not the busy one; scaling to 0 fails the job with the reason. The pool_utilisation facts
follow along (100 %, 50 %, 0 %, not evaluated with no ready machine)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlmodel import Session
from temporalio.client import WorkflowHandle

from activities.policy import pool_utilisation_facts
from messages import workflows as wf
from messages.policy import Facts, PoolUtilisationWhen
from messages.pool import PoolStatus, ScaleInput, ScaleState, scale_workflow_id, slot_of_allocation
from store import pool_claims, pools, projects
from store.models import Instance, Pool, utcnow
from tests import recorded
from tests.jobs.conftest import CLOUD, FAST, Stack
from tests.jobs.test_jobs import replays
from tests.processes import until
from tests.unread import UnreadOutcomes, unread_outcomes

POOL, POOL_ID = "web", "pj0001"


def facts(stack: Stack) -> Facts:
    with Session(stack.deps.engine) as s:
        return pool_utilisation_facts(s, projects.DEFAULT_PROJECT,
                                      PoolUtilisationWhen(pool=POOL, percent=50, direction="above"), utcnow())


def ready(stack: Stack) -> list[str]:
    with Session(stack.deps.engine) as s:
        pool = s.get(Pool, POOL_ID)
        return [] if pool is None else [m.id for m in pool_claims.ready_machines(s, pool)]


def instance_status(stack: Stack, allocation_id: str) -> str | None:
    with Session(stack.deps.engine) as s:
        row = s.get(Instance, allocation_id)
        return None if row is None else row.status


async def resize(stack: Stack, handle: WorkflowHandle[Any, ScaleState], size: int) -> None:
    with Session(stack.deps.engine) as s:
        row = s.get(Pool, POOL_ID)
        assert row is not None
        row.size = size
        pools.save_pool(s, row)
    await handle.execute_update(wf.SCALE.reconcile.name)


async def post(stack: Stack, command: str, **fields: Any) -> httpx.Response:
    body = {"name": "pooled", "type": "task", "command": command, "requested_by": "tests", "pool": POOL}
    return await stack.http.post("/api/compute/jobs", json={**body, **fields})


async def run(stack: Stack, command: str) -> str:
    r = await post(stack, command)
    assert r.status_code == 202, r.text
    job_id: str = r.json()["id"]
    return job_id


def waits_for(flag: Path) -> str:
    return f"echo started; while [ ! -e {flag} ]; do sleep 0.05; done; echo done"


@pytest.fixture
def unretrieved() -> Iterator[UnreadOutcomes]:
    with unread_outcomes() as handler:
        yield handler


async def test_jobs_share_a_pool_idle_machines_go_first_and_utilisation_is_measured(
        stack: Stack, tmp_path: Path, unretrieved: UnreadOutcomes) -> None:
    r = await post(stack, "true")
    assert r.status_code == 422 and f"pool {POOL!r}" in r.text, r.text  # no such pool yet
    with Session(stack.deps.engine) as s:
        pools.save_pool(s, Pool(id=POOL_ID, project=projects.DEFAULT_PROJECT, name=POOL, cloud=CLOUD,
                                gpu="a10", min_size=0, max_size=2, size=2, status=PoolStatus.ACTIVE,
                                workflow_id=scale_workflow_id(POOL_ID)))
    r = await post(stack, "true", cloud=CLOUD)
    assert r.status_code == 422 and "not both" in r.text, r.text
    r = await post(stack, "true", gpu="h100")
    assert r.status_code == 422 and "a10" in r.text, r.text
    assert facts(stack).not_evaluated == "the pool has no ready machine"

    handle: WorkflowHandle[Any, ScaleState] = await stack.client.start_workflow(
        wf.SCALE.name, ScaleInput(pool_id=POOL_ID, project=projects.DEFAULT_PROJECT, name=POOL, timing=FAST,
                                    resync_s=0.5),
        id=scale_workflow_id(POOL_ID), task_queue=stack.queue, result_type=ScaleState)
    try:
        await until(lambda: _async(len(ready(stack)) == 2), 90, "2 ready machines")
        assert facts(stack).utilisation_percent == 0

        # Two at once on distinct machines; the third waits for one of them to be free.
        flag_a, flag_b = tmp_path / "a", tmp_path / "b"
        a = await run(stack, waits_for(flag_a))
        job_a = await stack.until_status(a, "running")
        b = await run(stack, waits_for(flag_b))
        job_b = await stack.until_status(b, "running")
        assert {job_a["allocation_id"], job_b["allocation_id"]} == set(ready(stack))
        c = await run(stack, "echo third")
        job_c = await stack.until_status(c, "provisioning")
        assert job_c["allocation_id"] is None and job_c["gpu"] == "a10" and job_c["cloud"] == CLOUD
        assert facts(stack).utilisation_percent == 100
        flag_a.touch()
        job_c = await stack.until_status(c, "succeeded")
        assert job_c["allocation_id"] == job_a["allocation_id"]  # the one freed
        assert await stack.logs(c) == b"third\n"
        assert facts(stack).utilisation_percent == 50  # b still runs
        flag_b.touch()
        for j in (a, b):
            assert (await stack.until_status(j, "succeeded"))["exit_code"] == 0
        await replays(stack, c)  # a pool job that waited for its machine
        assert len(ready(stack)) == 2 and facts(stack).utilisation_percent == 0  # the pool keeps them
        on_cloud = [m for m in await stack.live_machines() if f"pl{POOL_ID}-" in (m.get("name") or "")]
        assert len(on_cloud) == 2, on_cloud

        # Scale to 1 while a job runs: the idle machine goes. Of two jobs, the one on the higher slot
        # runs on — the machine that scaling down by age alone would pick (both started in one pass,
        # the higher slot goes first) — the other ends.
        flags = {j: tmp_path / f"j{j}" for j in range(2)}
        jobs = [await run(stack, waits_for(flags[j])) for j in range(2)]
        machines = [(await stack.until_status(j, "running"))["allocation_id"] for j in jobs]
        slots = [slot_of_allocation(m) for m in machines]
        assert slots[0] is not None and slots[1] is not None
        keep = 0 if slots[0].slot > slots[1].slot else 1
        busy, busy_machine, idle_machine = jobs[keep], machines[keep], machines[1 - keep]
        flags[1 - keep].touch()
        await stack.until_status(jobs[1 - keep], "succeeded")
        assert facts(stack).utilisation_percent == 50
        await resize(stack, handle, 1)
        await until(lambda: _async(instance_status(stack, idle_machine) == "terminated"), 90,
                    "the idle machine terminated")
        assert ready(stack) == [busy_machine]
        assert (await stack.job(busy))["status"] == "running"
        assert facts(stack).utilisation_percent == 100

        # Scale to 0: the busy machine goes, and its job fails saying so.
        await resize(stack, handle, 0)
        job = await stack.until_status(busy, "failed")
        assert "its machine was lost" in (job["error"] or ""), job
        await replays(stack, busy)
        assert instance_status(stack, busy_machine) == "terminated"
        gc.collect()  # a task is logged as never retrieved when it is collected: now, not some time later
        assert unretrieved.seen == [], unretrieved.seen[0]  # five pool jobs ran (and two replayed)
    finally:
        with Session(stack.deps.engine) as s:
            pools.mark_deleting(s, POOL_ID)
        await handle.execute_update(wf.SCALE.reconcile.name)
        await handle.result()  # the pool forgotten once the cloud shows none of its machines
    await recorded.replays(stack.client, handle.id)  # its last run: scaled to 0, then deleted


async def _async(value: bool) -> bool:
    return value

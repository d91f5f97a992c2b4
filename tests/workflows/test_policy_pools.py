"""The `scale_pool` action for real (activities/policy_pools.py) on the dev server: it saves the
pool's new size within min..max and wakes the pool's ScaleWorkflow — here a FAKE one that only counts
its `reconcile` updates — and a retried action (the worker lost after the save) scales once."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from sqlmodel import Session
from temporalio import workflow
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.deps import ActivityDeps
from activities.policy_pools import scale_pool_action, scale_pool_cost, shrink_by_idle, size_of
from messages import workflows as wf
from messages.policy import ActInput, PolicyFacts, ScalePoolThen
from messages.pool import PoolStatus, ScaleInput, pool_allocation_id
from store import pools
from store.models import Instance, Pool


@workflow.defn(name=wf.SCALE.name)
class FakeScaleWorkflow:
    """FAKE: stands in for workflows/scale.py, counting the wake-ups the action sends."""

    def __init__(self) -> None:
        self.reconciles = 0
        self.done = False

    @workflow.update(name=wf.SCALE.reconcile.name)
    async def reconcile(self) -> None:
        self.reconciles += 1

    @workflow.query(name="reconciles")
    def count(self) -> int:
        return self.reconciles

    @workflow.signal(name="done")  # the fake's own: the test ends it
    def stop(self) -> None:
        self.done = True

    @workflow.run
    async def run(self, inp: ScaleInput) -> None:
        await workflow.wait_condition(lambda: self.done)


def make_pool(engine: sa.Engine, *, size: int, max_size: int, price: float | None) -> Pool:
    pool_id = uuid.uuid4().hex[:6]
    name = f"train{pool_id[:4]}"
    machines = []
    with Session(engine) as s:
        if price is not None:
            s.add(Instance(id=f"al{pool_id}", provider="fakecloud", connection_id="c", project="default",
                           workflow_id=f"allocation-al{pool_id}", status="ready", price_per_hour=price))
            s.commit()
            machines = [{"allocation_id": f"al{pool_id}", "slot": 0, "generation": 0}]
        row = Pool(id=pool_id, project="default", name=name, cloud="fakecloud", min_size=1,
                   max_size=max_size, size=size, status=PoolStatus.ACTIVE,
                   workflow_id=f"scale-test-{pool_id}", machines=machines)
        return pools.save_pool(s, row)


def act_input(pool_size: int | None, then: ScalePoolThen) -> ActInput:
    facts = PolicyFacts(policy_id="pol1", project="default", pool_size=pool_size)
    return ActInput(policy_id="pol1", project="default", facts=facts, reason="queue wait of sft over 5 min")


async def test_scale_pool_saves_the_size_within_max_wakes_the_pool_and_a_retry_scales_once(
        db_engine: sa.Engine, activity_deps: ActivityDeps, temporal_client: Client) -> None:
    pool = make_pool(db_engine, size=2, max_size=5, price=4.0)
    env = ActivityEnvironment()
    by2 = ScalePoolThen(pool=pool.name, by=2)
    with Session(db_engine) as s:
        assert size_of(s, "default", by2) == 2
        assert scale_pool_cost(s, "default", by2) == 8.0  # two more machines at $4/h
        assert scale_pool_cost(s, "default", ScalePoolThen(pool=pool.name, by=9)) == 12.0  # only to max 5
    async with Worker(temporal_client, task_queue=env.info.task_queue, workflows=[FakeScaleWorkflow],
                      workflow_runner=UnsandboxedWorkflowRunner()):  # a FAKE in a test module
        done = await env.run(scale_pool_action, activity_deps, act_input(2, by2), by2)
        assert done.ok and done.ran and done.result == f"scaled pool {pool.name!r} from 2 to 4"
        # The same attempt again (its answer lost): the size measured was 2, so it stays 4.
        again = await env.run(scale_pool_action, activity_deps, act_input(2, by2), by2)
        assert again.ok and again.ran
        with Session(db_engine) as s:
            saved = pools.get_pool(s, "default", pool.name)
        assert saved is not None and saved.size == 4
        handle = temporal_client.get_workflow_handle(pool.workflow_id)
        assert await handle.query("reconciles") == 2  # woken each time: it reconciles to the saved size
        # Already at its max: nothing to do, said so, not counted as acting.
        top = ScalePoolThen(pool=pool.name, to=9)
        await env.run(scale_pool_action, activity_deps, act_input(4, top), top)
        at_max = await env.run(scale_pool_action, activity_deps, act_input(5, top), top)
        assert not at_max.ran and "already at 5 (its max)" in at_max.result
        missing = ScalePoolThen(pool="nosuch", by=1)
        gone = await env.run(scale_pool_action, activity_deps, act_input(None, missing), missing)
        assert not gone.ran and "no active pool 'nosuch'" in gone.result
        await handle.signal("done")


def test_an_unpriced_pool_has_an_unknown_cost_and_shrinking_costs_nothing(db_engine: sa.Engine) -> None:
    pool = make_pool(db_engine, size=1, max_size=4, price=None)
    with Session(db_engine) as s:
        assert scale_pool_cost(s, "default", ScalePoolThen(pool=pool.name, by=1)) is None
        assert scale_pool_cost(s, "default", ScalePoolThen(pool=pool.name, to=1)) == 0.0


def test_idle_pool_machines_shrink_their_pool_never_under_its_min(db_engine: sa.Engine) -> None:
    """terminate_idle's pool side: the size drops by the idle machines (counted from the ready
    machines, so a retry lowers it no further), never under min."""
    pool = make_pool(db_engine, size=3, max_size=5, price=None)
    with Session(db_engine) as s:
        for slot in range(3):
            s.add(Instance(id=pool_allocation_id(pool.id, pool.name, slot, 0), provider="fakecloud",
                           connection_id="c", project="default", workflow_id=f"w{pool.id}{slot}",
                           status="ready"))
        s.commit()
        shrunk = shrink_by_idle(s, pool.id, 2)
        assert shrunk is not None and (shrunk[0].size, shrunk[1]) == (1, 3)
        assert shrink_by_idle(s, pool.id, 2) is None  # retried: 3 ready - 2 idle is still 1
        row = s.get(Pool, pool.id)
        assert row is not None
        row.size, row.min_size = 3, 2
        s.add(row)
        s.commit()
        again = shrink_by_idle(s, pool.id, 3)
        assert again is not None and again[0].size == 2  # not under min

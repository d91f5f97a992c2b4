"""`terminate_idle`'s rule (activities/policy.py) on the dev server, with FAKE allocation workflows
that only count the `terminate` updates they get: of the machines idle over the minutes, job machines
are terminated, pool machines are left to their pool, machines allocated by hand only with the
opt-in; a machine idle for less, one whose last sample failed or is stale, or one with a job still
provisioning on it, is not touched. The idle run
itself (store/idle.py): kept across idle samples, cleared by a busy or a failed one."""

from __future__ import annotations

import uuid
from datetime import timedelta

import sqlalchemy as sa
from sqlmodel import Session
from temporalio import workflow
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.deps import ActivityDeps
from activities.policy import idle_facts, terminate_idle_action
from messages import workflows as wf
from messages.policy import ActInput, IdleWhen, PolicyFacts, TerminateIdleThen
from messages.pool import pool_allocation_id
from store import idle
from store.models import Instance, Job, utcnow


@workflow.defn(name="FakeIdleAllocationWorkflow")
class FakeIdleAllocationWorkflow:
    """FAKE: stands in for an AllocationWorkflow, counting the `terminate` updates it is sent."""

    def __init__(self) -> None:
        self.terminates = 0
        self.done = False

    @workflow.update(name=wf.ALLOCATION.terminate.name)
    async def terminate(self) -> None:
        self.terminates += 1

    @workflow.query(name="terminates")
    def count(self) -> int:
        return self.terminates

    @workflow.signal(name="done")  # the fake's own: the test ends it
    def stop(self) -> None:
        self.done = True

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.done)


def test_an_idle_run_is_kept_across_idle_samples_and_cleared_by_a_busy_or_failed_one(
        db_engine: sa.Engine) -> None:
    a = f"al{uuid.uuid4().hex[:8]}"
    t0 = utcnow()
    with Session(db_engine) as s:
        first = idle.record_sample(s, allocation_id=a, project="p", at=t0, gpu_max_pct=4.0, sessions=0)
        assert first.idle_since == first.sampled_at
        kept = idle.record_sample(s, allocation_id=a, project="p", at=t0 + timedelta(minutes=1),
                                  gpu_max_pct=None, sessions=0)  # no GPU: nothing to be busy
        assert kept.idle_since is not None and kept.idle_since < kept.sampled_at
        assert idle.record_sample(s, allocation_id=a, project="p", at=t0, gpu_max_pct=5.0,
                                  sessions=0).idle_since is None  # 5 % is not under 5 %
        idle.record_sample(s, allocation_id=a, project="p", at=t0, gpu_max_pct=0.0, sessions=0)
        assert idle.record_sample(s, allocation_id=a, project="p", at=t0, gpu_max_pct=0.0, sessions=0,
                                  job_id="j1").idle_since is None
        idle.record_sample(s, allocation_id=a, project="p", at=t0, gpu_max_pct=0.0, sessions=0)
        assert idle.record_sample(s, allocation_id=a, project="p", at=t0,
                                  error="sample failed: TimeoutError").idle_since is None


async def test_terminate_idle_takes_job_machines_leaves_pool_ones_and_hand_ones_until_opted_in(
        db_engine: sa.Engine, activity_deps: ActivityDeps, temporal_client: Client) -> None:
    project = f"idle-{uuid.uuid4().hex[:6]}"
    tag = uuid.uuid4().hex[:6]
    ids = {"job": f"al{tag}job", "pool": pool_allocation_id(tag, "train", 0, 0), "manual": f"al{tag}hand",
           "recent": f"al{tag}new", "failed": f"al{tag}err", "stale": f"al{tag}old", "busy": f"al{tag}run"}
    now = utcnow()
    with Session(db_engine) as s:
        for a in ids.values():
            s.add(Instance(id=a, provider="fake", connection_id="c", project=project,
                           workflow_id=f"fake-idle-{a}", status="ready"))
        s.add(Job(id=f"{tag}-j", project=project, name="done", type="task", command="true", requested_by="t",
                  workflow_id=f"job-{tag}", status="succeeded", allocation_id=ids["job"]))
        # A job still provisioning on its machine: about to run there, so the machine is not idle.
        s.add(Job(id=f"{tag}-k", project=project, name="next", type="task", command="true", requested_by="t",
                  workflow_id=f"job-{tag}-k", status="provisioning", allocation_id=ids["busy"]))
        s.commit()
        jobs = idle.running_jobs(s, list(ids.values()))
        assert jobs == {ids["busy"]: f"{tag}-k"}
        for kind, a in ids.items():
            start = now - timedelta(minutes=5 if kind == "recent" else 40)
            idle.record_sample(s, allocation_id=a, project=project, at=start, gpu_max_pct=0.0, sessions=0)
            if kind != "stale":  # the watch samples the others still: the latest sample now
                idle.record_sample(s, allocation_id=a, project=project, at=now, gpu_max_pct=0.0, sessions=0,
                                   job_id=jobs.get(a), error="sample failed" if kind == "failed" else None)
        facts = idle_facts(s, project, IdleWhen(minutes=30), now)
    assert sorted(facts.idle_machines or []) == sorted([ids["job"], ids["pool"], ids["manual"]])

    env = ActivityEnvironment()

    def act() -> ActInput:
        return ActInput(policy_id="pol", project=project, reason="idle",
                        facts=PolicyFacts(policy_id="pol", project=project))

    async with Worker(temporal_client, task_queue=f"idle-{tag}", workflows=[FakeIdleAllocationWorkflow],
                      workflow_runner=UnsandboxedWorkflowRunner()):  # FAKEs in a test module
        handles = {kind: await temporal_client.start_workflow(
            "FakeIdleAllocationWorkflow", id=f"fake-idle-{a}", task_queue=f"idle-{tag}")
            for kind, a in ids.items()}
        plain = TerminateIdleThen(minutes=30)
        first = await env.run(terminate_idle_action, activity_deps, act(), plain)
        assert first.ok and first.ran, first
        assert first.result == (f"terminating 1 idle machine(s): {ids['job']} (left 1 idle pool machine(s): "
                                "their pool cannot shrink (at its min, or gone); left 1 machine(s) "
                                "allocated by hand (not opted in))")
        opted = TerminateIdleThen(minutes=30, include_manual=True)
        second = await env.run(terminate_idle_action, activity_deps, act(), opted)
        assert second.ok and ids["manual"] in second.result and ids["job"] in second.result, second
        counts = {kind: await h.query("terminates") for kind, h in handles.items()}
        assert counts == {"job": 2, "pool": 0, "manual": 1, "recent": 0, "failed": 0, "stale": 0, "busy": 0}
        for h in handles.values():
            await h.signal("done")

"""The job queue: order (priority, round-robin between projects, age), and 20 jobs of mixed types
under a project limit of 4 GPUs, checked against the ledger of grants and the instances' lives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlmodel import Session, col, select

from store.models import Instance, Job, SpendInterval
from store.queue import queue_order
from tests.jobs.conftest import CLOUD, Stack
from tests.processes import until

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _job(i: int, project: str, priority: int = 0) -> Job:
    return Job(id=f"j{i:02d}", project=project, name="n", type="sft", command="true", requested_by="t",
               priority=priority, workflow_id="w", created_at=T0 + timedelta(seconds=i))


def test_order_is_priority_then_round_robin_between_projects_then_age() -> None:
    jobs = [_job(0, "a"), _job(1, "a"), _job(2, "a"), _job(3, "b"), _job(4, "b", priority=1), _job(5, "c")]
    assert [j.id for j in queue_order(jobs)] == ["j04", "j00", "j03", "j05", "j01", "j02"]


def max_concurrent(intervals: list[tuple[datetime, datetime, int]]) -> int:
    """The most held at once, from [start, end) intervals each holding n."""
    events = sorted([(s, n) for s, _, n in intervals] + [(e, -n) for _, e, n in intervals],
                    key=lambda ev: (ev[0], ev[1]))  # at equal times a release counts before a grant
    held = peak = 0
    for _, n in events:
        held += n
        peak = max(peak, held)
    return peak


async def test_20_jobs_under_a_4_gpu_limit(stack: Stack) -> None:
    http = stack.http
    r = await http.put("/api/compute/limits", json={"max_gpus": 4})
    assert r.status_code == 200, r.text
    try:
        await _run_20(stack)
    finally:
        await http.put("/api/compute/limits", json={"max_gpus": None})


async def _run_20(stack: Stack) -> None:
    http = stack.http
    ids: list[str] = []
    # Not queued, and they fit: granted at once.
    ids += [await stack.run("echo task", type="task") for _ in range(2)]
    ids.append(await stack.run("echo compile", type="kb_compile", gpu=None))  # no GPU: always fits
    # Queued: 16 of the training, eval and synthetic types, every fourth at a higher priority.
    queued_types = ["sft", "dpo", "grpo", "ppo", "eval", "synthetic"]
    for i in range(16):
        ids.append(await stack.run(f"echo {i}; sleep 0.2", type=queued_types[i % 6],
                                   priority=5 if i % 4 == 0 else 0))
    # A serving job is not queued: over the limit it is refused, the limit named.
    r = await http.post("/api/compute/jobs", json={"name": "big", "type": "serving", "command": "true",
                                                   "cloud": CLOUD, "gpu": "a10", "gpu_count": 5,
                                                   "requested_by": "tests"})
    assert r.status_code == 409 and "limit of 4 GPUs" in r.json()["detail"], r.text
    # A queued job cancelled while it waits leaves the queue without ever holding anything.
    last = await stack.run("echo never", type="sft", priority=-10)
    r = await http.post(f"/api/compute/jobs/{last}/cancel")
    assert r.status_code == 202, r.text

    listed = (await http.get("/api/compute/jobs", params={"limit": 200})).json()["items"]
    mine = [j for j in listed if j["id"] in ids]
    assert all(j["pri"] is None for j in mine if j["type"] in ("task", "kb_compile"))
    waiting = sorted([j for j in mine if j["pri"] is not None], key=lambda j: j["pri"])
    assert [j["pri"] for j in waiting] == list(range(1, len(waiting) + 1))  # the global positions
    assert len(waiting) >= 8  # at most 4 of the 16 can hold GPUs: the rest wait
    keys = [(-j["priority"], j["created_at"]) for j in waiting]
    assert keys == sorted(keys), waiting  # one project: priority, then age

    async def all_ended() -> bool:
        jobs = [await stack.job(i) for i in ids]
        return all(j["status"] in ("succeeded", "failed", "cancelled") for j in jobs)

    await until(all_ended, 240, "all 19 jobs to end")
    assert (await stack.job(last))["status"] == "cancelled"
    with Session(stack.deps.engine) as s:
        jobs = {j.id: j for j in s.exec(select(Job).where(col(Job.id).in_([*ids, last]))).all()}
        assert all(jobs[i].status == "succeeded" for i in ids), {i: (jobs[i].status, jobs[i].error)
                                                                 for i in ids}
        assert jobs[last].granted_at is None and jobs[last].allocation_id is None
        grants = [(j.granted_at, j.released_at, j.granted_gpus) for j in jobs.values() if j.granted_at]
        assert len(grants) == 19 and all(r is not None for _, r, _ in grants)  # every grant released
        peak = max_concurrent(grants)  # type: ignore[arg-type]
        print(f"\nGPUs held at once, at most: {peak} (limit 4)")
        assert peak <= 4
        lives: list[tuple[Any, Any, int]] = []
        for i in ids:
            job = jobs[i]
            inst = s.get(Instance, job.allocation_id)
            assert inst is not None and inst.status == "terminated" and inst.terminated_at is not None
            # every machine lived inside its job's grant, so the grants bound the machines
            assert job.granted_at <= inst.created_at  # type: ignore[operator]
            assert inst.terminated_at <= job.released_at  # type: ignore[operator]
            lives.append((inst.created_at, inst.terminated_at, job.granted_gpus))
            spend = s.exec(select(SpendInterval).where(SpendInterval.instance_id == inst.id)).all()
            assert spend and all(iv.job_type == job.type and iv.ended_at is not None for iv in spend)
        assert max_concurrent(lives) <= 4
    assert not [m for m in await stack.live_machines()
                if any(jobs[i].allocation_id in (m.get("name") or "") for i in ids)]

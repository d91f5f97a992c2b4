"""POST /api/compute/jobs without Temporal (FakeWorkflows): a keyed retry makes one job, limits
refuse what is not queued with the limit named, a $/hr limit needs a max price, a reached daily
budget refuses new jobs and holds queued ones (the reason on the job), and a queue group paused
and resumed through /queue."""

from __future__ import annotations

from datetime import timedelta

import httpx
import sqlalchemy as sa
from sqlmodel import Session

from store import spend
from store.models import utcnow
from tests.api.conftest import FakeWorkflows, connect_fake
from tests.api.test_list_scale import statements

JOB = {"name": "j", "command": "true", "requested_by": "tests", "gpu": "A10"}


async def test_a_keyed_retry_answers_the_same_job_and_starts_it_once(client: httpx.AsyncClient,
                                                                      workflows: FakeWorkflows) -> None:
    await connect_fake(client)
    key = {"Idempotency-Key": "job-retry-1"}
    first = await client.post("/api/compute/jobs", json={**JOB, "type": "sft"}, headers=key)
    again = await client.post("/api/compute/jobs", json={**JOB, "type": "sft"}, headers=key)
    assert first.status_code == again.status_code == 202, (first.text, again.text)
    assert first.json()["id"] == again.json()["id"]
    assert workflows.runs.count(f"job-{first.json()['id']}") == 1
    other = await client.post("/api/compute/jobs", json={**JOB, "type": "dpo"}, headers=key)
    assert other.status_code == 422  # the same key for another request
    job = (await client.get(f"/api/compute/jobs/{first.json()['id']}")).json()
    assert job["status"] == "queued" and job["pri"] == 1


async def test_limits_refuse_what_is_not_queued_and_queue_the_rest(client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    assert (await client.get("/api/compute/limits")).json()["project"] == {"max_gpus": None,
                                                                          "max_usd_per_hour": None}
    r = await client.put("/api/compute/limits", json={"max_gpus": 2})
    assert r.status_code == 200, r.text
    ok = await client.post("/api/compute/jobs", json={**JOB, "type": "serving", "gpu_count": 2})
    assert ok.status_code == 202, ok.text
    refused = await client.post("/api/compute/jobs", json={**JOB, "type": "task"})
    assert refused.status_code == 409 and "project default's limit of 2 GPUs" in refused.json()["detail"]
    queued = await client.post("/api/compute/jobs", json={**JOB, "type": "eval"})
    assert queued.status_code == 202 and queued.json()["status"] == "queued"  # waits its turn instead
    r = await client.put("/api/compute/limits", json={"max_usd_per_hour": 10})
    refused = await client.post("/api/compute/jobs", json={**JOB, "type": "eval"})
    assert refused.status_code == 422 and "max_price_per_hour" in refused.json()["detail"]
    r = await client.put("/api/compute/limits/installation", json={"max_gpus": 1})
    assert r.status_code == 200
    assert (await client.get("/api/compute/limits")).json()["installation"]["max_gpus"] == 1


async def test_a_reached_budget_refuses_new_jobs_and_holds_queued_ones_a_paused_group_says_so(
        client: httpx.AsyncClient, engine: sa.Engine) -> None:
    await connect_fake(client)
    queued = (await client.post("/api/compute/jobs", json={**JOB, "type": "ppo"})).json()["id"]
    r = await client.post("/api/compute/queue/pause", json={"type": "grpo"})
    assert r.status_code == 200 and [p["type"] for p in r.json()["paused"]] == ["grpo"], r.text
    assert r.json()["waiting"] == {"sft": 0, "grpo": 1, "eval": 0, "synthetic": 0}
    job = (await client.get(f"/api/compute/jobs/{queued}")).json()
    assert job["pri"] == 1 and "grpo queue of project default is paused (by hand" in job["waiting_reason"]
    refused = await client.post("/api/compute/queue/pause", json={"type": "ppo"})
    assert refused.status_code == 422 and "queued in the grpo group" in refused.text, refused.text
    r = await client.post("/api/compute/queue/resume", json={"type": "grpo"})
    assert r.status_code == 200 and r.json()["paused"] == []
    # Resumed, it still waits (its workflow asks again), and says so: never a null reason.
    assert (await client.get(f"/api/compute/jobs/{queued}")).json()["waiting_reason"] == (
        "fits the limits now: granted at its next admission check")

    now = utcnow()
    with Session(engine) as s:  # $1000/h for the last 30 minutes (or since midnight): over $1 today
        spend.open_interval(s, key="gp-budget-j1", instance_id="budget", project="default", connection_id="c",
                            provider="fakecloud", rate_per_hour=1000.0,
                            started_at=max(now - timedelta(minutes=30),
                                           now.replace(hour=0, minute=0, second=0)))
    assert (await client.put("/api/compute/budget", json={"daily_usd": 1})).status_code == 200
    for kind in ("sft", "serving"):  # queued or not, no new job
        r = await client.post("/api/compute/jobs", json={**JOB, "type": kind})
        assert r.status_code == 409 and "daily budget of $1.00" in r.json()["detail"], r.text
    listed = (await client.get("/api/compute/jobs")).json()["items"]
    assert [j["id"] for j in listed] == [queued]  # nothing was recorded for the refused ones
    assert "daily budget of $1.00" in listed[0]["waiting_reason"]


async def test_a_job_queued_behind_a_gpu_limit_says_so_and_the_one_behind_it_too(
        client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    assert (await client.put("/api/compute/limits", json={"max_gpus": 1})).status_code == 200
    assert (await client.post("/api/compute/jobs", json={**JOB, "type": "serving"})).status_code == 202
    first = (await client.post("/api/compute/jobs", json={**JOB, "type": "sft"})).json()["id"]
    second = (await client.post("/api/compute/jobs", json={**JOB, "type": "eval"})).json()["id"]
    job = (await client.get(f"/api/compute/jobs/{first}")).json()
    assert job["status"] == "queued" and job["pri"] == 1
    assert job["waiting_reason"] == ("waiting for capacity: over project default's limit of 1 GPUs "
                                     "(1 in use, this job needs 1)")
    listed = {j["id"]: j for j in (await client.get("/api/compute/jobs")).json()["items"]}
    assert listed[first]["waiting_reason"] == job["waiting_reason"]
    assert listed[second]["waiting_reason"] == (
        f"behind job {first} of project default (its jobs start in order), which waits for capacity: "
        "over project default's limit of 1 GPUs")
    # Every waiting job has a reason; the one not queued (serving, granted) has none.
    assert all(j["waiting_reason"] for j in listed.values() if j["pri"] is not None)
    assert [j["waiting_reason"] for j in listed.values() if j["pri"] is None] == [None]


async def test_a_page_without_a_waiting_job_does_not_walk_the_queue(client: httpx.AsyncClient,
                                                                     engine: sa.Engine) -> None:
    """A waiting job's reason takes the admission walk over the installation's whole queue; a page
    of jobs none of which waits has nothing to explain, and reads neither the limits, the grants,
    the pauses nor anyone's waiting jobs (it did: 160 ms a page with 5,000 jobs waiting anywhere)."""
    await connect_fake(client)
    assert (await client.put("/api/compute/limits", json={"max_gpus": 1})).status_code == 200
    waiting = (await client.post("/api/compute/jobs", json={**JOB, "type": "sft"})).json()["id"]
    serving = (await client.post("/api/compute/jobs", json={**JOB, "type": "serving"})).json()["id"]
    with statements(engine) as seen:
        page = (await client.get("/api/compute/jobs?limit=1")).json()["items"]
    assert [(j["id"], j["pri"], j["waiting_reason"]) for j in page] == [(serving, None, None)]
    queue_tables = ("job_limit", "queue_pause", "granted_at IS NOT NULL")
    assert not [s for s, _ in seen if any(t in s for t in queue_tables)], seen
    # The page that shows it explains it.
    listed = {j["id"]: j for j in (await client.get("/api/compute/jobs")).json()["items"]}
    assert listed[waiting]["pri"] == 1 and listed[waiting]["waiting_reason"]


async def test_a_job_over_a_limit_on_its_own_is_refused_with_the_limit_and_nothing_is_stored(
        client: httpx.AsyncClient) -> None:
    """Queued, it would wait for ever — and hold up every job behind it (make fuzz found a $50/h job
    under a $23.92/h installation limit at the head of the queue, 180 jobs waiting behind it)."""
    await connect_fake(client)
    r = await client.put("/api/compute/limits", json={"max_gpus": 2, "max_usd_per_hour": 10})
    assert r.status_code == 200, r.text
    for body, limit in [({"gpu_count": 3, "max_price_per_hour": 5},
                         "project default's limit of 2 GPUs (this job needs 3)"),
                        ({"max_price_per_hour": 50},
                         "project default's limit of $10/h (this job up to $50/h)")]:
        for kind in ("sft", "serving"):  # queued or not
            r = await client.post("/api/compute/jobs", json={**JOB, "type": kind, **body})
            assert r.status_code == 409, r.text
            assert r.json()["detail"].startswith(f"this job alone is over {limit}: it could not"), r.text
    assert (await client.get("/api/compute/jobs")).json()["items"] == []
    ok = await client.post("/api/compute/jobs", json={**JOB, "type": "sft", "gpu_count": 2,
                                                      "max_price_per_hour": 10})
    assert ok.status_code == 202, ok.text  # at the limits exactly: it can start


async def test_a_limit_lowered_under_a_queued_job_says_how_many_it_leaves_over_and_each_says_why(
        client: httpx.AsyncClient) -> None:
    await connect_fake(client)
    assert (await client.put("/api/compute/limits", json={"max_gpus": 1})).status_code == 200
    assert (await client.post("/api/compute/jobs", json={**JOB, "type": "serving"})).status_code == 202
    big = (await client.post("/api/compute/jobs", json={**JOB, "type": "sft"})).json()["id"]  # waits
    r = await client.put("/api/compute/limits", json={"max_gpus": 0})
    assert r.status_code == 200 and r.json()["over_on_their_own"] == 1, r.text
    job = (await client.get(f"/api/compute/jobs/{big}")).json()
    assert job["pri"] == 1 and job["waiting_reason"] == (
        "waiting for a higher limit (passed over meanwhile: it blocks no one): over project default's "
        "limit of 0 GPUs (this job needs 1)")
    r = await client.put("/api/compute/limits", json={"max_gpus": 1})
    assert r.json()["over_on_their_own"] == 0
    assert (await client.get(f"/api/compute/jobs/{big}")).json()["waiting_reason"].startswith(
        "waiting for capacity: over project default's limit of 1 GPUs (1 in use")

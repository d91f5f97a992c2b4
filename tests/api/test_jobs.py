"""POST /api/compute/jobs without Temporal (FakeWorkflows): a keyed retry makes one job, limits
refuse what is not queued with the limit named, a $/hr limit needs a max price."""

from __future__ import annotations

import httpx

from tests.api.conftest import FakeWorkflows, connect_fake

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

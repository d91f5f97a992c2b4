"""Managed jobs in the Workload Queue (GET /api/compute/workloads): a job running on a simulated cloud
is a row with the seed's columns beside the reported workloads, the pills count both sources, and
its detail shows its last log lines and its GPUs' metrics (the simulated nvidia-smi, sampled by
the run activity). Another project's job is not there."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from activities.jobs import parse_gpu_reading
from store import jobs as job_store
from store.models import Job
from tests.api.conftest import all_items, make_project
from tests.jobs.conftest import Stack
from tests.processes import until

URL = "/api/compute/workloads"
GROUP = {"sft": "SFT", "dpo": "SFT", "grpo": "GRPO", "ppo": "GRPO", "serving": "SERVING", "eval": "EVAL",
         "task": "TASK", "kb_compile": "TASK", "synthetic": "SYNTHETIC"}


async def test_a_running_job_in_the_queue_with_its_logs_and_gpu_metrics(stack: Stack) -> None:
    http = stack.http
    # One GPU for the project: the SFT job takes it, the eval job waits its turn (a PRI).
    assert (await http.put("/api/compute/limits", json={"max_gpus": 1})).status_code == 200
    try:
        await _check(stack)
    finally:
        await http.put("/api/compute/limits", json={"max_gpus": None})


async def _check(stack: Stack) -> None:
    http = stack.http
    # The job plays a busy GPU (the simulated nvidia-smi reports what this file says), prints, and
    # runs until the test lets it finish.
    job_id = await stack.run('echo 73 > "$HOME/.simulated-gpu-utilization"; echo hello; echo world; '
                             'while [ ! -e "$HOME/go" ]; do sleep 0.1; done', type="sft", name="llama-sft")
    await stack.until_status(job_id, "running")
    waiting = await stack.run("true", type="eval", name="waits")
    report = {"name": "reported-run", "kind": "grpo", "status": "running", "source": "training"}
    assert (await http.put(f"{URL}/run-elsewhere", json=report)).status_code in (200, 201)

    async def detail_with_metrics() -> dict[str, Any] | None:
        r = await http.get(f"{URL}/job:{job_id}")
        assert r.status_code == 200, r.text
        d: dict[str, Any] = r.json()
        busy = d["metrics"] and d["metrics"][-1]["gpus"][0]["utilization_pct"] > 0  # after the echo
        return d if busy and "world" in d["log_lines"] else None

    detail = await until(detail_with_metrics, 60, "the job's log lines and a GPU sample of it busy")
    assert (detail["id"], detail["job_id"], detail["source"], detail["workload"], detail["type"],
            detail["method"], detail["status"], detail["gpu"], detail["requested_by"], detail["pri"],
            detail["eta_at"]) == (f"job:{job_id}", job_id, "job", "llama-sft", "SFT", "sft", "running",
                                  "1× a10", "tests", None, None)
    assert detail["location"].startswith("Lambda Cloud · ") and detail["elapsed_s"] >= 0
    assert detail["log_lines"] == ["hello", "world"]
    assert detail["log_url"] == f"/api/compute/jobs/{job_id}/logs?follow=true&offset=12"
    [gpu] = detail["metrics"][-1]["gpus"]  # the a10 machine's one GPU, simulated busy at 73 %
    assert gpu["utilization_pct"] == 73 and gpu["memory_total_mib"] > 0
    assert gpu["memory_used_mib"] == gpu["memory_total_mib"] * 73 // 100

    # The list: both sources, active first then newest, the pills counted over both, pages exact.
    rows = await all_items(http, URL, limit=3)
    whole = (await http.get(URL, params={"limit": 200})).json()
    assert [w["id"] for w in rows] == [w["id"] for w in whole["items"]]
    by_id = {w["id"]: w for w in rows}
    assert {k: by_id[f"job:{job_id}"][k] for k in ("pri", "type", "status", "gpu", "location")} == {
        k: detail[k] for k in ("pri", "type", "status", "gpu", "location")}
    queued = by_id[f"job:{waiting}"]
    assert (queued["status"], queued["type"], queued["location"]) == ("queued", "Eval", None)
    assert queued["pri"] == (await stack.job(waiting))["pri"] and queued["pri"] >= 1  # the global position
    assert by_id["run-elsewhere"]["source"] == "training"
    assert [w["active"] for w in rows] == sorted([w["active"] for w in rows], reverse=True)
    expected = Counter(GROUP[w["kind"]] for w in rows)
    assert whole["counts"] == {"ALL": len(rows), **{p: expected[p] for p in
                                                    ("SFT", "GRPO", "SERVING", "EVAL", "TASK", "SYNTHETIC")}}
    assert min(expected["SFT"], expected["EVAL"], expected["GRPO"]) >= 1  # the jobs and the report
    eval_only = (await http.get(URL, params={"type": "EVAL"})).json()
    assert f"job:{waiting}" in [w["id"] for w in eval_only["items"]]
    assert eval_only["counts"] == whole["counts"]  # a pill narrows the rows, never the counts

    # Another project sees none of it: the job's detail is a 404 there.
    await make_project(http, "elsewhere")
    other = {"X-Project": "elsewhere"}
    assert (await http.get(f"{URL}/job:{job_id}", headers=other)).status_code == 404
    assert (await http.get(URL, headers=other)).json()["counts"]["ALL"] == 0

    assert (await http.post(f"/api/compute/jobs/{waiting}/cancel")).status_code == 202
    job = await stack.job(job_id)
    [machine] = [m for m in await stack.live_machines() if job["allocation_id"] in (m.get("name") or "")]
    (stack.home_of(machine) / "go").touch()
    await stack.until_status(job_id, "succeeded")
    await stack.until_status(waiting, "cancelled")
    ended = (await http.get(f"{URL}/job:{job_id}")).json()
    assert ended["status"] == "succeeded" and not ended["active"] and ended["metrics"]
    assert (await http.delete(f"{URL}/run-elsewhere")).status_code == 204


def test_gpu_readings_parse_and_only_the_recent_are_kept(job_engine: sa.Engine) -> None:
    assert parse_gpu_reading("73, 59538, 81559\n0, 0, 81559\n") == [(73.0, 59538, 81559), (0.0, 0, 81559)]
    with pytest.raises(ValueError):
        parse_gpu_reading("[N/A], 10, 81559")  # not sampled, rather than a made-up 0 %
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    with Session(job_engine) as s:
        s.add(Job(id="samples01", name="n", type="sft", command="true", requested_by="t", workflow_id="w",
                  status="succeeded"))  # not waiting: the queue of this module's other test ignores it
        s.commit()
        for i in range(5):
            job_store.add_gpu_reading(s, "samples01", t0 + timedelta(seconds=i), [(i, i, 100), (i, i, 100)],
                                      keep=3)
        kept = job_store.gpu_readings(s, "samples01")
    assert [(int(x.utilization_pct), x.gpu) for x in kept] == [(2, 0), (2, 1), (3, 0), (3, 1), (4, 0), (4, 1)]

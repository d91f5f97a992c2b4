"""The Workload Queue (GET/PUT/DELETE /api/compute/workloads): the seed's columns, the pills' counts in
the same response, active first then newest, PRI for queued training/eval/synthetic only, and the
queue's order (priority, then round-robin between projects, then age)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from api.routers.workloads import _job_rows, _location
from messages.workloads import Waiting, queue_order
from providers.lambda_ import LambdaProvider
from providers.ssh_fleet import SshFleetProvider
from store.models import Instance, Job, JobLogChunk
from tests.api.conftest import make_project

URL = "/api/compute/workloads"


def report(name: str, kind: str, status: str = "running", **kw: Any) -> dict[str, Any]:
    return {"name": name, "kind": kind, "status": status, **kw}


async def put(client: httpx.AsyncClient, wid: str, body: dict[str, Any], project: str | None = None) -> Any:
    headers = {"X-Project": project} if project else {}
    r = await client.put(f"{URL}/{wid}", json=body, headers=headers)
    assert r.status_code in (200, 201), r.text
    return r


async def test_rows_have_the_seeds_columns_and_the_pills_their_counts(client: httpx.AsyncClient) -> None:
    first = await put(client, "run-1", report("llama-dpo", "dpo", gpu="H100", gpu_count=4, location="lambda",
                                               source="training", requested_by="ana", progress_pct=40))
    assert first.status_code == 201
    await put(client, "m-1", report("qwen-chat", "serving", source="model", gpu="A10",
                                    location="local cluster"))
    await put(client, "kb-1", report("docs index", "kb_compile", status="succeeded"))
    await put(client, "g-1", report("math-grpo", "ppo", status="queued", gpu="H100", gpu_count=8))
    await put(client, "s-1", report("synth", "synthetic", status="queued", source="synthetic"))

    page = (await client.get(URL)).json()
    rows = {w["id"]: w for w in page["items"]}
    run = rows["run-1"]
    assert (run["workload"], run["type"], run["method"], run["status"], run["gpu"], run["location"],
            run["progress_pct"], run["requested_by"], run["pri"]) == (
        "llama-dpo", "SFT", "dpo", "running", "4× H100", "lambda", 40, "ana", None)
    assert (rows["g-1"]["type"], rows["m-1"]["type"], rows["kb-1"]["type"], rows["kb-1"]["method"]) == (
        "GRPO", "Serving", "Task", "kb compile")
    assert rows["m-1"]["pri"] is None  # serving is never queued: "—"
    assert page["counts"] == {"ALL": 5, "SFT": 1, "GRPO": 1, "SERVING": 1, "EVAL": 0, "TASK": 1,
                              "SYNTHETIC": 1}
    # active first (newest first among them), the finished KB compile last
    assert [w["id"] for w in page["items"]] == ["s-1", "g-1", "m-1", "run-1", "kb-1"]
    # a pill narrows the rows, never the counts
    grpo = (await client.get(URL, params={"type": "GRPO"})).json()
    assert [w["id"] for w in grpo["items"]] == ["g-1"] and grpo["counts"]["ALL"] == 5
    assert (await client.get(URL, params={"type": "BOGUS"})).status_code == 422
    # the detail is the same row; a reported workload has no logs or metrics (gpuprov does not run it)
    detail = (await client.get(f"{URL}/g-1")).json()
    assert {k: detail[k] for k in rows["g-1"]} == rows["g-1"]
    assert (detail["log_lines"], detail["log_url"], detail["metrics"]) == ([], None, [])


async def test_a_report_updates_in_place_and_keeps_its_age(client: httpx.AsyncClient) -> None:
    made = (await put(client, "run-1", report("a", "sft", status="queued"))).json()
    again = await put(client, "run-1", report("a", "sft", status="running", progress_pct=10))
    assert again.status_code == 200
    assert again.json()["created_at"] == made["created_at"] and again.json()["status"] == "running"
    assert (await client.delete(f"{URL}/run-1")).status_code == 204
    assert (await client.get(f"{URL}/run-1")).status_code == 404
    assert (await client.delete(f"{URL}/run-1")).status_code == 404


@pytest.mark.parametrize("wid,body,field", [
    ("ok-1", report("a", "pretraining"), "kind"),
    ("ok-1", report("a", "sft", status="exploded"), "status"),
    ("ok-1", report("a", "sft", gpu="H100; rm -rf /"), "gpu"),
    ("ok-1", report("a", "sft", progress_pct=101), "progress_pct"),
    ("ok-1", report("a", "sft", colour="red"), "colour"),
    ("bad%20id", report("a", "sft"), "workload_id"),
])
async def test_bad_reports_are_422_naming_the_field_and_store_nothing(
        client: httpx.AsyncClient, wid: str, body: dict[str, Any], field: str) -> None:
    r = await client.put(f"{URL}/{wid}", json=body)
    assert r.status_code == 422 and field in r.text, r.text
    assert (await client.get(URL)).json()["counts"]["ALL"] == 0


async def test_another_projects_workloads_are_invisible(client: httpx.AsyncClient) -> None:
    await make_project(client, "vision")
    await put(client, "v-1", report("vit", "eval", status="queued"), project="vision")
    assert (await client.get(URL)).json()["counts"]["ALL"] == 0
    assert (await client.get(f"{URL}/v-1")).status_code == 404
    assert (await client.delete(f"{URL}/v-1")).status_code == 404
    seen = (await client.get(URL, headers={"X-Project": "vision"})).json()
    assert [w["pri"] for w in seen["items"]] == [1]


def test_the_queue_orders_by_priority_then_round_robin_between_projects_then_age() -> None:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)

    def w(wid: str, project: str, priority: int, minute: int) -> Waiting:
        return Waiting(id=wid, project=project, priority=priority, created_at=t0 + timedelta(minutes=minute))

    # Project a queued a burst of three before b's one job; c's urgent job came last.
    queue = [w("a1", "a", 0, 0), w("a2", "a", 0, 1), w("a3", "a", 0, 2), w("b1", "b", 0, 3),
             w("c1", "c", 5, 9), w("b2", "b", 0, 4)]
    assert [x.id for x in queue_order(queue)] == ["c1", "a1", "b1", "a2", "b2", "a3"]
    assert [x.id for x in queue_order(reversed(queue))] == ["c1", "a1", "b1", "a2", "b2", "a3"]


def test_a_jobs_location_is_local_cluster_on_a_fleet_host_else_its_cloud_and_region() -> None:
    job = Job(id="j1", name="n", type="sft", command="true", requested_by="t", workflow_id="w",
              status="running")
    on = Instance(id="a1", provider=SshFleetProvider.id, connection_id="f1", workflow_id="w",
                  offer_region="rack")
    assert _location(job, on) == "local cluster"
    cloud = Instance(id="a2", provider=LambdaProvider.id, connection_id="c1", workflow_id="w")
    assert _location(job, cloud) == "Lambda Cloud"  # the region once the offer is known
    cloud.offer_region = "us-east-1"
    assert _location(job, cloud) == "Lambda Cloud · us-east-1"
    job.status = "queued"
    assert _location(job, cloud) is None and _location(job, None) is None


def test_a_job_that_named_no_gpu_shows_its_machines_gpus() -> None:
    job = Job(id="j1", name="n", type="sft", command="true", requested_by="t", workflow_id="w",
              status="running", allocation_id="a1")
    machine = Instance(id="a1", provider=LambdaProvider.id, connection_id="c1", workflow_id="w")
    assert _job_rows([job], {"a1": machine}, {})[0].gpu is None  # a machine of unknown GPUs: none to show
    machine.gpu, machine.gpu_count = "A10", 1  # as the machine was asked
    assert _job_rows([job], {"a1": machine}, {})[0].gpu == "1× A10"
    machine.gpus_found = [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(2)]  # as found
    assert _job_rows([job], {"a1": machine}, {})[0].gpu == "2× NVIDIA H100 80GB HBM3"
    job.gpu, job.gpu_count = "H100", 2  # what the job asked stays its own
    assert _job_rows([job], {"a1": machine}, {})[0].gpu == "2× H100"
    assert _job_rows([job], {}, {})[0].gpu == "2× H100"


async def test_a_jobs_detail_shows_its_last_lines_and_follows_from_just_past_them(
        client: httpx.AsyncClient, engine: sa.Engine) -> None:
    """The lines shown and the offset the log is followed from are read together: a chunk written
    while the detail is read (here, right after the detail's first read of the log) is either shown
    and followed past, or followed from, never shown and streamed again."""
    with Session(engine) as s:
        s.add(Job(id="j1", name="n", type="sft", command="true", requested_by="t", workflow_id="w",
                  status="running"))
        s.add(JobLogChunk(job_id="j1", offset=0, data=b"hello\nworld\n"))
        s.commit()
    written: list[bytes] = []

    def late_chunk(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "job_log_chunk" in statement and not written:
            written.append(b"late\n")
            with Session(engine) as other:  # the job's activity, appending as it reads more output
                other.add(JobLogChunk(job_id="j1", offset=12, data=written[0]))
                other.commit()

    sa.event.listen(engine, "after_cursor_execute", late_chunk)
    try:
        detail = (await client.get(f"{URL}/job:j1")).json()
    finally:
        sa.event.remove(engine, "after_cursor_execute", late_chunk)
    assert written  # the chunk did land mid-read
    shown = "".join(f"{line}\n" for line in detail["log_lines"]).encode()
    assert detail["log_offset"] == len(shown), detail
    assert detail["log_url"].endswith(f"&offset={len(shown)}")
    log = (await client.get("/api/compute/jobs/j1/logs", params={"offset": detail["log_offset"]})).content
    assert shown + log == b"hello\nworld\nlate\n"  # every byte once

"""Policies on the dev server: the API's Schedule per policy, seen by the Temporal CLI — paused when
the policy is disabled, gone when it is deleted — and PolicyWorkflow with its real activities:
the spend read from the ledger, the webhook POSTed to a local server, the run recorded."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client

from activities.deps import ActivityDeps
from api.app import create_app
from api.deps import AppDeps
from api.temporal import TemporalGateway
from messages import workflows as wf
from messages.policy import PolicyInput, PolicyRunOutcome
from store import policies, queue, spend
from store.models import Job, Policy, utcnow
from store.secrets import SecretBox
from tests import recorded
from tests.conftest import TEMPORAL_BIN, TEST_SECRET_KEY
from tests.workflows.conftest import TASK_QUEUE

TOKEN = "policy-test-token"


def cli(client: Client, *args: str) -> Any:
    """The Temporal CLI's JSON answer (None when it fails, e.g. no such schedule)."""
    address = client.service_client.config.target_host
    done = subprocess.run([str(TEMPORAL_BIN), "schedule", *args, "--address", address, "-o", "json"],
                          capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else None


@pytest.fixture
async def api(temporal_client: Client, db_engine: sa.Engine,
              secret_box: SecretBox) -> AsyncIterator[httpx.AsyncClient]:
    gateway = TemporalGateway("unused", "default", TASK_QUEUE, keys=[TEST_SECRET_KEY])
    gateway._client = temporal_client  # the session's dev server, with its codec
    deps = AppDeps(engine=db_engine, box=secret_box, api_token=TOKEN, installation_id="wftest01",
                   workflows=gateway, webhook_allowlist=("https://hooks.example",), policy_interval_s=3600)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(deps)), base_url="http://api",
                                 headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


async def test_each_policy_is_a_schedule_the_cli_lists_paused_when_disabled_gone_when_deleted(
        api: httpx.AsyncClient, temporal_client: Client) -> None:
    card = {"name": "sft wait", "when": {"kind": "queue_wait", "type": "sft", "minutes": 5},
            "then": {"kind": "scale_pool", "pool": "train", "by": 2}, "cooldown_minutes": 10,
            "max_spend_per_hour": 20}
    r = await api.post("/api/compute/policies", json=card)
    assert r.status_code == 201, r.text
    pid, sid = r.json()["id"], r.json()["schedule_id"]

    listed = await asyncio.to_thread(cli, temporal_client, "list")
    assert sid in {s["scheduleId"] for s in listed}
    described = await asyncio.to_thread(cli, temporal_client, "describe", "--schedule-id", sid)
    assert described["schedule"]["action"]["startWorkflow"]["workflowType"]["name"] == wf.POLICY.name
    assert not described["schedule"]["state"].get("paused", False)

    assert described["schedule"]["spec"]["interval"][0]["interval"] == "3600s"

    # Disabled, and now on a cron expression (as the API validated it, Temporal reads it).
    cron = {**card, "enabled": False, "when": {"kind": "cron", "expression": "*/15 9-17 * * mon-fri"}}
    r = await api.put(f"/api/compute/policies/{pid}", json=cron)
    assert r.status_code == 200, r.text
    described = await asyncio.to_thread(cli, temporal_client, "describe", "--schedule-id", sid)
    assert described["schedule"]["state"]["paused"] is True
    assert described["schedule"]["spec"].get("structuredCalendar") and not described["schedule"]["spec"].get(
        "interval")
    assert described["schedule"]["state"]["notes"] == "the policy is disabled"

    assert (await api.delete(f"/api/compute/policies/{pid}")).status_code == 200
    assert await asyncio.to_thread(cli, temporal_client, "describe", "--schedule-id", sid) is None


@pytest.fixture
async def hook() -> AsyncIterator[tuple[str, list[tuple[str, dict[str, Any]]]]]:
    """A local webhook receiver: (its URL, the (path, JSON body) of every POST it got)."""
    got: list[tuple[str, dict[str, Any]]] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        length = next(int(line.split(":")[1]) for line in head.split("\r\n")
                      if line.lower().startswith("content-length:"))
        got.append((head.split(" ")[1], json.loads(await reader.readexactly(length))))
        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/hooks", got


async def test_a_spend_policy_run_reads_the_ledger_posts_the_webhook_and_records_it(
        temporal_client: Client, wf_worker: None, activity_deps: ActivityDeps, db_engine: sa.Engine,
        hook: tuple[str, list[tuple[str, dict[str, Any]]]], monkeypatch: pytest.MonkeyPatch,
        secret_box: SecretBox) -> None:
    url, got = hook
    monkeypatch.setattr(activity_deps, "webhook_allowlist", [url])
    project = f"pol-{uuid.uuid4().hex[:6]}"
    with Session(db_engine) as s:  # $30/h for the last 20 minutes: $10 in the last hour
        spend.open_interval(s, key=f"gp-{project}-a1", instance_id=project, project=project,
                            connection_id="c", provider="fake", rate_per_hour=30.0,
                            started_at=utcnow() - timedelta(minutes=20))
        spend_pol = policies.save_policy(s, secret_box, policy_id=f"{project}-spend", project=project,
                                         name="spend alarm",
                                         enabled=True, spec={
                                             "when": {"kind": "spend", "window": "1h", "usd": 5},
                                             "then": {"kind": "webhook", "url": url + "/a"},
                                             "cooldown_minutes": 10, "max_spend_per_hour": 40},
                                         webhook_query="token=t0k3n").id

    async def run(policy_id: str) -> PolicyRunOutcome:
        return await run_policy(temporal_client, policy_id, project, keep=True)

    first = await run(spend_pol)
    assert first.acted and first.result.endswith("webhook answered HTTP 204"), first
    assert first.result.startswith("spend over 1h is $10.0")  # 20 min at $30/h (plus the test's seconds)
    assert len(got) == 1
    path, body = got[0]
    assert path == "/hooks/a?token=t0k3n"
    assert body["policy"] == {"id": spend_pol, "name": "spend alarm", "project": project}
    assert body["when"] == {"kind": "spend", "window": "1h", "usd": 5.0}
    assert body["facts"]["spend_rate_per_hour"] == 30.0 and body["facts"]["spend_usd"] >= 10.0

    second = await run(spend_pol)  # within the cooldown
    assert not second.acted and "in cooldown until" in second.result and len(got) == 1

    with Session(db_engine) as s:
        row = s.get(Policy, spend_pol)
        assert row is not None
        assert row.trigger_count == 1 and row.last_triggered_at is not None
        assert row.last_result == second.result


async def run_policy(client: Client, policy_id: str, project: str, *, keep: bool = False) -> PolicyRunOutcome:
    """One run; `keep`: its history replayed, and kept when recording (tests/recorded.py)."""
    workflow_id = f"policy-{policy_id}-{uuid.uuid4().hex[:6]}"
    out: PolicyRunOutcome = await client.execute_workflow(
        wf.POLICY.name, PolicyInput(policy_id=policy_id, project=project), id=workflow_id,
        task_queue=TASK_QUEUE, result_type=PolicyRunOutcome, execution_timeout=timedelta(seconds=120))
    if keep:
        await recorded.replays(client, workflow_id)
    return out


def queued_job(s: Session, project: str, name: str, type_: str, waited_min: float) -> None:
    """A job row as the API leaves it waiting in the queue (no workflow, no machine)."""
    s.add(Job(id=f"{project}-{name}", project=project, name=name, type=type_, command="true",
              requested_by="tests", gpu="a10", gpu_count=1, workflow_id=f"job-{project}-{name}",
              created_at=utcnow() - timedelta(minutes=waited_min)))
    s.commit()


async def test_queue_policies_read_the_waiting_jobs_by_group_and_pause_one_once(
        temporal_client: Client, wf_worker: None, db_engine: sa.Engine, secret_box: SecretBox) -> None:
    """Queue wait of SFT over 5 minutes → pause the grpo queue (a dpo job counts as SFT), then again
    while paused (a no-op, no trigger); at least 2 of GRPO queued → pause eval, before and after a
    ppo job joins a grpo one."""
    project = f"polq-{uuid.uuid4().hex[:6]}"
    with Session(db_engine) as s:
        queued_job(s, project, "dpo", "dpo", waited_min=8)
        queued_job(s, project, "sft", "sft", waited_min=1)
        queued_job(s, project, "grpo", "grpo", waited_min=2)
        wait = policies.save_policy(s, secret_box, policy_id=f"{project}-wait", project=project,
                                    name="sft wait", enabled=True, spec={
                                        "when": {"kind": "queue_wait", "type": "sft", "minutes": 5},
                                        "then": {"kind": "pause_queue", "type": "grpo"}}).id
        depth = policies.save_policy(s, secret_box, policy_id=f"{project}-depth", project=project,
                                     name="grpo depth", enabled=True, spec={
                                         "when": {"kind": "queue_depth", "type": "grpo", "n": 2},
                                         "then": {"kind": "pause_queue", "type": "eval"}}).id

    first = await run_policy(temporal_client, wait, project)
    assert first == PolicyRunOutcome(acted=True, result="the oldest queued sft job has waited 8 min, "
                                                        "over 5 min → paused the grpo queue"), first
    with Session(db_engine) as s:
        paused = queue.pauses(s, project)
        assert list(paused) == [(project, "grpo")] and paused[(project, "grpo")].by == wait
        grpo = s.get(Job, f"{project}-grpo")
        assert grpo is not None and not queue.admit(s, grpo.id)  # its admission is held now
    again = await run_policy(temporal_client, wait, project)
    assert not again.acted and "→ no-op: the grpo queue of project" in again.result, again

    shallow = await run_policy(temporal_client, depth, project)
    assert shallow == PolicyRunOutcome(acted=False, result="1 grpo job(s) queued, fewer than 2")
    with Session(db_engine) as s:
        queued_job(s, project, "ppo", "ppo", waited_min=0)
    deep = await run_policy(temporal_client, depth, project)
    assert deep == PolicyRunOutcome(acted=True, result="2 grpo job(s) queued, 2 → paused the eval queue")
    with Session(db_engine) as s:
        rows = {p: s.get(Policy, p) for p in (wait, depth)}
        assert {p: (r.trigger_count, r.last_result) for p, r in rows.items() if r} == {
            wait: (1, again.result), depth: (1, deep.result)}
        assert sorted(t for _, t in queue.pauses(s, project)) == ["eval", "grpo"]

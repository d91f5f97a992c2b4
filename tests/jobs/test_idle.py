"""Idle machines, measured by the watch (activities/idle.py) and acted on by `terminate_idle`
(activities/policy.py), on a simulated cloud with real SSH machines: a ready machine at 0 % GPU with
no session is idle from the watch's sample on; 50 % utilisation, or an interactive SSH session (the
machine's SIMULATED `who` lists it), makes it busy again. A policy idle → terminate_idle leaves a
machine allocated by hand alone until the project opts in (`include_manual` of the built-in idle
policy, PUT /api/compute/idle-policy), then terminates it; its result is recorded on the policy."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import asyncssh
import pytest
from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from activities.idle import parse_sample
from activities.watch import WatchActivities
from messages import workflows as wf
from messages.policy import PolicyInput, PolicyRunOutcome
from messages.watch import WatchInput, WatchReport
from store import idle
from store.models import Instance, MachineIdle, Policy, utcnow
from tests.jobs.conftest import CLOUD, Stack
from tests.processes import until

USER_KEY = asyncssh.generate_private_key("ssh-ed25519")


def test_the_sample_parses_gpus_sessions_and_failures() -> None:
    assert parse_sample("0 0\n3\n1\n--who--\n\n").gpu_max_pct == 3.0
    two = parse_sample("0 0\n0\n--who--\nubuntu pts/0 2026-12-01 02:00\nubuntu pts/1 2026-12-01 02:01\n")
    assert (two.gpu_max_pct, two.sessions, two.error) == (0.0, 2, None)
    no_gpu = parse_sample("127 0\n\n--who--\n\n")
    assert (no_gpu.gpu_max_pct, no_gpu.sessions, no_gpu.error) == (None, 0, None)
    assert parse_sample("9 0\n\n--who--\n").error == "nvidia-smi failed (exit 9)"
    with pytest.raises(ValueError):
        parse_sample("garbage")


async def _sample(stack: Stack, row: Instance) -> tuple[WatchReport, MachineIdle]:
    """One round of the connection's watch, its idle sample of `row`."""
    report: WatchReport = await ActivityEnvironment().run(
        WatchActivities(stack.deps).watch_connection, WatchInput(connection_id=row.connection_id))
    with Session(stack.deps.engine) as s:
        got = idle.get(s, row.id)
    assert got is not None
    return report, got


async def test_the_watch_measures_idleness_and_terminate_idle_needs_the_opt_in(stack: Stack) -> None:
    http = stack.http
    r = await http.post("/api/compute/instances", json={
        "cloud": CLOUD, "gpu": "a10", "ssh_public_keys": [USER_KEY.export_public_key().decode().strip()]})
    assert r.status_code == 202, r.text
    allocation_id = r.json()["id"]

    async def ready() -> dict[str, Any] | None:
        got: dict[str, Any] = (await http.get(f"/api/compute/instances/{allocation_id}")).json()
        assert got["status"] not in ("failed", "terminated"), got
        return got if got["status"] == "ready" else None

    shown = await until(ready, 90, "the allocation ready")
    with Session(stack.deps.engine) as s:
        row = s.get(Instance, allocation_id)
        assert row is not None
    machine = next(m for m in await stack.live_machines() if m["address"] == row.ssh_host)
    util = stack.home_of(machine) / ".simulated-gpu-utilization"

    # Nothing runs, nobody logged in: idle from this sample on, and it stays the same run.
    report, first = await _sample(stack, row)
    assert allocation_id in report.idle and first.idle_since is not None, first
    assert (first.gpu_max_pct, first.sessions, first.job_id, first.error) == (0.0, 0, None, None)
    _, again = await _sample(stack, row)
    assert again.idle_since == first.idle_since and again.sampled_at > first.sampled_at

    util.write_text("50\n")  # a busy GPU
    report, busy = await _sample(stack, row)
    assert allocation_id not in report.idle and busy.idle_since is None and busy.gpu_max_pct == 50.0

    util.write_text("0\n")
    _, idle_again = await _sample(stack, row)
    assert idle_again.idle_since is not None and idle_again.idle_since > first.idle_since

    # An interactive login (a PTY) is a session; a command run without one is not.
    ssh = shown["ssh"]
    async with asyncssh.connect(ssh["host"], port=ssh["port"], username=ssh["user"], client_keys=[USER_KEY],
                                known_hosts=None) as conn:
        shell = await conn.create_process(term_type="xterm")
        _, in_session = await _sample(stack, row)
        assert in_session.idle_since is None and in_session.sessions == 1, in_session
        shell.stdin.write("exit\n")
        await shell.wait()
    _, after = await _sample(stack, row)
    assert after.idle_since is not None and after.sessions == 0, after

    # Idle for 40 minutes (its idle run backdated): the policy's When reads it.
    with Session(stack.deps.engine) as s:
        stored = s.get(MachineIdle, allocation_id)
        assert stored is not None
        stored.idle_since = utcnow() - timedelta(minutes=40)
        s.add(stored)
        s.commit()

    policy_id = f"builtin-idle-{row.project}"

    async def run_policy(include_manual: bool) -> PolicyRunOutcome:
        # The built-in policy, set paused (its Schedule would run it meanwhile): this test runs it.
        r = await http.put("/api/compute/idle-policy", json={"minutes": 30, "include_manual": include_manual,
                                                             "enabled": False})
        assert r.status_code == 200, r.text
        assert r.json()["id"] == policy_id and r.json()["then"]["include_manual"] is include_manual
        with Session(stack.deps.engine) as s:  # the card on, its Schedule left paused: no run races ours
            card = s.get(Policy, policy_id)
            assert card is not None
            card.enabled = True
            s.add(card)
            s.commit()
        out: PolicyRunOutcome = await stack.client.execute_workflow(
            wf.POLICY.name, PolicyInput(policy_id=policy_id, project=row.project),
            id=f"policy-{policy_id}-{uuid.uuid4().hex[:6]}", task_queue=stack.queue,
            result_type=PolicyRunOutcome, execution_timeout=timedelta(seconds=120))
        return out

    left = await run_policy(include_manual=False)
    assert not left.acted and "left 1 machine(s) allocated by hand (not opted in)" in left.result, left
    assert (await http.get(f"/api/compute/instances/{allocation_id}")).json()["status"] == "ready"

    acted = await run_policy(include_manual=True)
    assert acted.acted and f"terminating 1 idle machine(s): {allocation_id}" in acted.result, acted

    async def gone() -> bool:
        got = (await http.get(f"/api/compute/instances/{allocation_id}")).json()
        return bool(got["status"] == "terminated")

    await until(gone, 90, "the idle machine terminated")
    card = (await http.get("/api/compute/idle-policy")).json()
    assert card["trigger_count"] == 1 and card["last_result"] == acted.result, card
    assert (await http.delete(f"/api/compute/policies/{policy_id}")).status_code == 200
    assert (await http.get("/api/compute/idle-policy")).status_code == 404  # off again

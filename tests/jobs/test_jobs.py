"""Managed jobs end to end: the API starts a JobWorkflow, which allocates a simulated machine, runs
the command over SSH with its output copied into the app database, and terminates the machine."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import Any

import pytest
from sqlmodel import Session
from temporalio.worker import Replayer

from store.models import Instance
from tests import recorded
from tests.jobs.conftest import CLOUD, Stack
from tests.processes import until
from tests.unread import collecting, unread_outcomes
from worker import WORKFLOWS, workflow_runner

# jobs-v1/ (committed) was recorded here; a new recording goes to the current round's folder.
JOB_HISTORIES = recorded.BATCH


async def replays(stack: Stack, job_id: str) -> None:
    """The job's history replays against the current code; GPUPROV_RECORD_HISTORIES=1 keeps it
    with the committed histories (tests/workflows/histories/README.md), replayed on every run."""
    history = await stack.client.get_workflow_handle(f"job-{job_id}").fetch_history()
    await Replayer(workflows=WORKFLOWS, workflow_runner=workflow_runner(),
                   data_converter=stack.client.data_converter).replay_workflow(history)
    if os.environ.get("GPUPROV_RECORD_HISTORIES"):
        JOB_HISTORIES.mkdir(exist_ok=True)
        (JOB_HISTORIES / f"{history.workflow_id}.json").write_text(history.to_json())


async def machine_gone(stack: Stack, job: dict[str, Any]) -> None:
    """The job's allocation ended terminated, and the cloud holds nothing of this test's."""
    with Session(stack.deps.engine) as s:
        inst = s.get(Instance, job["allocation_id"])
        assert inst is not None and inst.status == "terminated", inst
    assert not [m for m in await stack.live_machines() if job["allocation_id"] in (m.get("name") or "")]


async def test_a_job_prints_lines_succeeds_and_its_machine_is_gone(stack: Stack) -> None:
    job_id = await stack.run("for i in 1 2 3; do echo line $i; done; echo warn >&2; echo done")
    job = await stack.until_status(job_id, "succeeded")
    assert job["exit_code"] == 0 and job["error"] is None and job["started_at"] is not None
    assert await stack.logs(job_id) == b"line 1\nline 2\nline 3\nwarn\ndone\n"
    assert await stack.logs(job_id, offset=7) == b"line 2\nline 3\nwarn\ndone\n"  # restartable
    await machine_gone(stack, job)
    await replays(stack, job_id)


async def test_a_failing_command_fails_with_its_exit_code_and_last_lines(stack: Stack) -> None:
    job_id = await stack.run("echo first; echo 'it broke' >&2; exit 3")
    job = await stack.until_status(job_id, "failed")
    assert job["exit_code"] == 3 and "exit code 3" in job["error"] and "it broke" in job["error"], job
    await machine_gone(stack, job)


async def test_cancel_while_running_stops_it_and_removes_the_machine(stack: Stack) -> None:
    job_id = await stack.run("echo started; sleep 600")
    await stack.until_status(job_id, "running")
    await until(lambda: _has(stack, job_id, b"started\n"), 60, "the job's first line")
    r = await stack.http.post(f"/api/compute/jobs/{job_id}/cancel")
    assert r.status_code == 202, r.text
    job = await stack.until_status(job_id, "cancelled")
    assert job["exit_code"] is None
    await machine_gone(stack, job)
    await replays(stack, job_id)
    r = await stack.http.post(f"/api/compute/jobs/{job_id}/cancel")  # again: stays as it ended
    assert r.status_code == 202 and r.json()["status"] == "cancelled"


async def _has(stack: Stack, job_id: str, data: bytes) -> bool:
    return await stack.logs(job_id) == data


async def test_100k_lines_stream_complete_and_in_order_across_a_worker_restart(stack: Stack) -> None:
    """The worker stops while the command runs: the job is neither lost nor started again (the
    command counts its starts in a file on the host), and the followed log is complete."""
    # Half the output, then wait for the test's go-ahead (after the restart), then the rest.
    job_id = await stack.run('echo start >> "$HOME/starts"; seq 1 50000; '
                             'while [ ! -e "$HOME/go" ]; do sleep 0.1; done; seq 50001 100000')
    expected = "".join(f"{i}\n" for i in range(1, 100001)).encode()
    half = len("".join(f"{i}\n" for i in range(1, 50001)))

    async def follow() -> bytes:
        async with stack.http.stream("GET", f"/api/compute/jobs/{job_id}/logs",
                                     params={"follow": "true"}) as r:
            assert r.status_code == 200
            return b"".join([chunk async for chunk in r.aiter_bytes()])

    followed = asyncio.create_task(follow())

    async def first_half_stored() -> bool:
        r = await stack.http.get(f"/api/compute/jobs/{job_id}/logs", params={"offset": half - 1})
        return r.headers["X-Log-Offset"] == str(half)  # the 50000th line's newline is stored

    await until(first_half_stored, 90, "the first 50k lines in the log")
    await stack.stop_worker()
    job = await stack.job(job_id)
    assert job["status"] == "running"
    [machine] = [m for m in await stack.live_machines() if job["allocation_id"] in (m.get("name") or "")]
    home = stack.home_of(machine)
    (home / "go").touch()
    await stack.start_worker()

    job = await stack.until_status(job_id, "succeeded", within_s=120)
    assert await asyncio.wait_for(followed, 60) == expected  # every line once, in order
    assert await stack.logs(job_id) == expected
    assert (home / "starts").read_text() == "start\n"  # the command ran once
    await machine_gone(stack, job)


FAKE_DOCKER = """#!/bin/sh
# FAKE docker (a test double): records its arguments, then runs what follows the image directly.
echo "$@" >> "$HOME/docker-calls"
while [ "$#" -gt 0 ] && [ "$1" != "fake/image:1" ]; do shift; done
shift
exec "$@"
"""


async def test_an_image_runs_with_docker_where_the_host_has_it(stack: Stack,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    facade = stack.sim.engine.facades[CLOUD]
    with_docker = dataclasses.replace(facade, preinstalled={**facade.preinstalled, "docker": FAKE_DOCKER})
    monkeypatch.setitem(stack.sim.engine.facades, CLOUD, with_docker)
    job_id = await stack.run("echo inside", image="fake/image:1")
    job = await stack.until_status(job_id, "running", "succeeded")
    [machine] = [m for m in stack.sim.admin.machines() if job["allocation_id"] in (m.get("name") or "")]
    job = await stack.until_status(job_id, "succeeded")
    assert await stack.logs(job_id) == b"inside\n"
    calls = (stack.home_of(machine) / "docker-calls").read_text()
    assert calls.startswith(f"run --rm --name gpuprov-job-{job_id} --gpus all "), calls
    assert " fake/image:1 bash " in calls
    await machine_gone(stack, job)


async def test_no_offer_under_the_max_price_fails_the_job_without_a_machine(stack: Stack) -> None:
    job_id = await stack.run("true", max_price_per_hour=0.1)  # the simulated A10 costs $0.75/h
    job = await stack.until_status(job_id, "failed")
    assert "no offer at or under $0.1/h" in job["error"], job
    assert not [m for m in stack.sim.admin.machines() if job["allocation_id"] in (m.get("name") or "")]


async def test_cancel_while_provisioning_ends_cancelled_and_no_error_is_logged(stack: Stack) -> None:
    """The job waits for its machine in a task (the allocation's `ready`) that the cancel cancels:
    that task's failure — the cancelled activity's — is read, not logged as an ERROR traceback
    ("Task exception was never retrieved", twice in one `make fuzz`). The machine is held booting
    (and its create slowed): the job stays provisioning however slow this host is to look."""
    await stack.sim.admin.aio.add_fault(CLOUD, "create", "latency", when="before", seconds=3)
    await stack.sim.admin.aio.configure(hold_boots=True)
    try:
        with unread_outcomes() as unread:
            async with collecting():
                job_id = await stack.run("echo never")
                await stack.until_status(job_id, "provisioning")
                r = await stack.http.post(f"/api/compute/jobs/{job_id}/cancel")
                assert r.status_code == 202, r.text
                job = await stack.until_status(job_id, "cancelled")
                await until(lambda: _gone(stack, job), 60, "the job's machine terminated")
    finally:
        await stack.sim.admin.aio.configure(hold_boots=False)
        await stack.sim.admin.aio.clear_faults()
    assert job["exit_code"] is None and job["started_at"] is None, job
    assert unread.seen == []


async def _gone(stack: Stack, job: dict[str, Any]) -> bool:
    return not [m for m in await stack.live_machines() if job["allocation_id"] in (m.get("name") or "")]

"""Jobs that survive their machine (issue 25, part 1): a job's `retry` policy restarts it on a new
machine when an attempt ends by a cause it names, with GPUPROV_JOB_ATTEMPT in the command's
environment and one log with a marker line between attempts; a preemption notice sends the running
command SIGTERM.

HOW A MACHINE IS PREEMPTED HERE: the simulated cloud takes it back (the fake cloud's admin
`preempt`: its SSH server and processes stop, Lambda lists it `preempted`), and the test sends the
allocation the watch's report itself — `machine_lost` with `MachineLost(preempted=True)`, exactly
what the watch sends — since this stack runs no watch (its connections are added without one)."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlmodel import Session, select

from activities.watch import start_watch
from messages import workflows as wf
from messages.allocation import MachineLost
from messages.ids import allocation_of_key, allocation_workflow_id, job_workflow_id, watch_workflow_id
from messages.job import JobState, PreemptionNotice
from providers.naming import prefix
from store.models import Instance, SpendInterval
from tests import recorded
from tests.eventually import eventually
from tests.jobs.conftest import INSTALLATION, Stack
from workflows import client_calls

# Prints its attempt and the previous one's end, then (before the third attempt) waits to be preempted.
PREEMPT_ME = ('echo "attempt $GPUPROV_JOB_ATTEMPT after ${GPUPROV_JOB_PREVIOUS_END:-nothing}"; '
              'if [ "$GPUPROV_JOB_ATTEMPT" -lt 3 ]; then sleep 600; fi; echo finished')


def allocation_of(machine: dict[str, Any]) -> str | None:
    """The allocation a simulated machine was made for (its name: the installation's prefix, then the
    attempt's key)."""
    return allocation_of_key(str(machine.get("name") or "").removeprefix(prefix(INSTALLATION)))


async def machines_of(stack: Stack, allocation_id: str) -> list[dict[str, Any]]:
    """Every machine the simulated cloud ever made for the allocation (terminated ones too)."""
    return [m for m in await stack.sim.admin.aio.machines() if allocation_of(m) == allocation_id]


async def running_attempt(stack: Stack, job_id: str, n: int) -> dict[str, Any]:
    """The job once attempt `n`'s command runs (its first line is in the log)."""
    async def there() -> dict[str, Any] | None:
        job = await stack.job(job_id)
        if job["status"] in ("succeeded", "failed", "cancelled"):
            raise AssertionError(f"job ended before attempt {n} ran: {job}")
        if job["attempts"] == n and job["status"] == "running" \
                and f"attempt {n} after".encode() in await stack.logs(job_id):
            return job
        return None

    got: dict[str, Any] = await eventually(there, within=90, what=f"attempt {n} of job {job_id} running")
    return got


async def preempt(stack: Stack, allocation_id: str) -> None:
    """The cloud takes the machine back, and the watch's report of it reaches the allocation."""
    [machine] = [m for m in await machines_of(stack, allocation_id) if m["status"] != "terminated"]
    await stack.sim.admin.aio.preempt(machine["id"])
    lost = MachineLost(reason=f"the cloud preempted machine {machine['id']}", preempted=True)
    await client_calls.signal(stack.client, allocation_workflow_id(allocation_id), wf.ALLOCATION.machine_lost,
                              lost)


async def job_state(stack: Stack, job_id: str) -> JobState:
    return await client_calls.query(stack.client, job_workflow_id(job_id), wf.JOB.state)


async def test_a_job_preempted_twice_finishes_on_its_third_machine_with_one_log(stack: Stack) -> None:
    job_id = await stack.run(PREEMPT_ME, retry={"on": ["preempted"], "restarts": 2, "where": "same_offer"})
    allocations = []
    for n in (1, 2):
        job = await running_attempt(stack, job_id, n)
        allocations.append(job["allocation_id"])
        await preempt(stack, job["allocation_id"])
    job = await stack.until_status(job_id, "succeeded", within_s=120)
    allocations.append(job["allocation_id"])
    assert allocations == [f"{job_id}-m", f"{job_id}-m-2", f"{job_id}-m-3"], allocations
    assert job["attempts"] == 3 and job["exit_code"] == 0 and job["error"] is None, job
    assert job["retry"] == {"on": ["preempted"], "restarts": 2, "where": "same_offer"}
    assert (await stack.logs(job_id)).decode() == (
        "attempt 1 after nothing\n"
        "--- gpuprov: attempt 2 of 3 (previous ended: preempted) ---\n"
        "attempt 2 after preempted\n"
        "--- gpuprov: attempt 3 of 3 (previous ended: preempted) ---\n"
        "attempt 3 after preempted\n"
        "finished\n")
    history = job["attempt_history"]
    assert [(a["attempt"], a["allocation_id"], a["ended"]) for a in history] == [
        (1, allocations[0], "preempted"), (2, allocations[1], "preempted"), (3, allocations[2], None)]
    assert "the cloud preempted machine" in history[0]["reason"]

    # One machine per attempt, none left; each its own instance row and its own spend, counted under
    # the job's type; same_offer: the same instance type, region and connection each time.
    for a in allocations:
        assert len(await machines_of(stack, a)) == 1, a
    assert not [m for m in await stack.live_machines() if allocation_of(m) in allocations]
    with Session(stack.deps.engine) as s:
        rows = [s.get(Instance, a) for a in allocations]
        assert [r.status if r else None for r in rows] == ["lost", "lost", "terminated"]
        assert len({(r.connection_id, r.offer_region, r.instance_type) for r in rows if r}) == 1
        for a in allocations:
            spend = s.exec(select(SpendInterval).where(SpendInterval.instance_id == a)).all()
            assert spend and all(iv.job_type == "task" and iv.ended_at is not None for iv in spend), a

    state = await job_state(stack, job_id)
    assert state.attempt == 3 and [e.cause.value for e in state.ends] == ["preempted", "preempted"]
    # The Workload Queue's row and detail show the attempts (and the detail the policy).
    r = await stack.http.get("/api/compute/workloads")
    [row] = [w for w in r.json()["items"] if w["id"] == f"job:{job_id}"]
    assert row["attempts"] == 3
    detail = (await stack.http.get(f"/api/compute/workloads/job:{job_id}")).json()
    assert detail["attempts"] == 3 and detail["retry"]["restarts"] == 2
    assert [a["ended"] for a in detail["attempt_history"]] == ["preempted", "preempted", None]
    assert "--- gpuprov: attempt 3 of 3 (previous ended: preempted) ---" in detail["log_lines"]
    await recorded.replays(stack.client, job_workflow_id(job_id))


async def test_out_of_restarts_the_job_fails_naming_the_last_preemption(stack: Stack) -> None:
    job_id = await stack.run(PREEMPT_ME, retry={"on": ["preempted"], "restarts": 1})
    for n in (1, 2):
        job = await running_attempt(stack, job_id, n)
        await preempt(stack, job["allocation_id"])
    job = await stack.until_status(job_id, "failed", within_s=120)
    assert job["attempts"] == 2 and job["exit_code"] is None, job
    assert job["error"].startswith(
        "its machine was preempted (attempt 2 of 2): the cloud preempted machine"), job
    assert [a["ended"] for a in job["attempt_history"]] == ["preempted", "preempted"]
    assert (await stack.logs(job_id)).decode() == (
        "attempt 1 after nothing\n"
        "--- gpuprov: attempt 2 of 2 (previous ended: preempted) ---\n"
        "attempt 2 after preempted\n")
    assert not [m for m in await stack.live_machines() if job_id in str(m.get("name") or "")]
    await recorded.replays(stack.client, job_workflow_id(job_id))


async def test_a_failed_attempt_restarts_only_when_failed_is_named(stack: Stack) -> None:
    """`failed` (a non-zero exit) restarts when named; a cause not named ends the job with why."""
    flaky = 'echo "try $GPUPROV_JOB_ATTEMPT"; [ "$GPUPROV_JOB_ATTEMPT" -ge 2 ]'
    job_id = await stack.run(flaky, retry={"on": ["failed"], "restarts": 1, "where": "same_cloud"})
    job = await stack.until_status(job_id, "succeeded", within_s=120)
    assert [(a["ended"], a["exit_code"]) for a in job["attempt_history"]] == [("failed", 1), (None, None)]
    assert job["attempts"] == 2 and job["attempt_history"][0]["reason"].startswith("exit code 1; last lines:")
    assert (await stack.logs(job_id)).decode() == (
        "try 1\n--- gpuprov: attempt 2 of 2 (previous ended: failed) ---\ntry 2\n")

    job_id = await stack.run("echo no; exit 4", retry={"on": ["preempted"], "restarts": 3})
    job = await stack.until_status(job_id, "failed")
    assert job["attempts"] == 1 and job["exit_code"] == 4, job
    assert job["error"].startswith(
        "the command failed (attempt 1 of 4; not restarted on failed): exit code 4"), job


async def test_a_preemption_notice_sends_the_command_sigterm_once(stack: Stack) -> None:
    """The watch's notice (the signal it sends while the cloud's interruption notice is out) reaches
    the running command as SIGTERM, once however often it is sent; the machine's end then takes the
    usual path: preempted, restarted."""
    command = ('trap \'echo "SIGTERM on attempt $GPUPROV_JOB_ATTEMPT"\' TERM; '
               'echo "attempt $GPUPROV_JOB_ATTEMPT after ${GPUPROV_JOB_PREVIOUS_END:-nothing}"; '
               'if [ "$GPUPROV_JOB_ATTEMPT" -lt 2 ]; then while true; do sleep 0.2; done; fi; echo finished')
    job_id = await stack.run(command, retry={"on": ["preempted"], "restarts": 1})
    job = await running_attempt(stack, job_id, 1)
    first = job["allocation_id"]
    notice = PreemptionNotice(allocation_id=first, reason="spot interruption notice: two minutes")
    # A notice for a machine not the running attempt's changes nothing.
    await client_calls.signal(stack.client, job_workflow_id(job_id), wf.JOB.preemption_notice,
                              PreemptionNotice(allocation_id="someone-else", reason="not ours"))
    for _ in range(3):  # the watch sends it every round while the notice is out
        await client_calls.signal(stack.client, job_workflow_id(job_id), wf.JOB.preemption_notice, notice)

    async def termed() -> bool:
        return b"SIGTERM on attempt 1\n" in await stack.logs(job_id)

    await eventually(termed, within=30, what="the command's TERM trap")
    await asyncio.sleep(1.5)  # time for a second SIGTERM, were one sent
    assert (await stack.logs(job_id)).count(b"SIGTERM") == 1
    assert (await job_state(stack, job_id)).noticed == [first]

    await preempt(stack, first)
    job = await stack.until_status(job_id, "succeeded", within_s=120)
    # (bash says "Terminated" of the `sleep` the signal ended: the whole group got it, not only bash)
    assert (await stack.logs(job_id)).decode().replace("Terminated\n", "") == (
        "attempt 1 after nothing\n"
        "SIGTERM on attempt 1\n"
        "--- gpuprov: attempt 2 of 2 (previous ended: preempted) ---\n"
        "attempt 2 after preempted\n"
        "finished\n")
    await recorded.replays(stack.client, job_workflow_id(job_id))


async def test_the_retry_policy_is_checked(stack: Stack) -> None:
    async def refused(retry: Any, *expected: str, **fields: Any) -> None:
        body = {"name": "t", "type": "task", "command": "true", "cloud": "lambda", "requested_by": "tests",
                "retry": retry, **fields}
        r = await stack.http.post("/api/compute/jobs", json=body)
        assert r.status_code == 422, r.text
        for text in expected:
            assert text in r.text, r.text

    await refused({"on": ["preempted", "eaten"], "restarts": 1}, "on", "'preempted', 'machine_lost'")
    await refused({"on": ["preempted", "preempted"], "restarts": 1}, "preempted given more than once")
    await refused({"on": [], "restarts": 1}, "at least 1")
    await refused({"on": ["failed"], "restarts": 11}, "less than or equal to 10")
    await refused({"on": ["failed"], "restarts": -1}, "greater than or equal to 0")
    await refused({"on": ["failed"]}, "restarts", "Field required")
    await refused({"on": ["failed"], "restarts": 1, "where": "anywhere"}, "same_offer", "any_allowed")
    await refused({"on": ["failed"], "restarts": 1, "when": "now"}, "Extra inputs are not permitted")
    await refused({"on": ["failed"], "restarts": 1}, "retry is for a job with a machine of its own",
                  pool="some-pool", cloud=None)
    # None: no policy, as before (one attempt, nothing about retries shown but the count).
    job_id = await stack.run("true")
    job = await stack.until_status(job_id, "succeeded")
    assert job["retry"] is None and job["attempts"] == 1 and job["attempt_history"] == []


async def test_a_command_that_ends_on_the_notices_sigterm_restarts_as_preempted(stack: Stack) -> None:
    """A command that saves its state and exits on SIGTERM (non-zero) ends its attempt as a
    preemption — the cloud said it takes the machine — not as a failure: the old machine is released
    without waiting for the cloud, and the job restarts where `preempted` is in `on`."""
    command = ('trap \'echo "checkpoint saved"; exit 143\' TERM; '
               'echo "attempt $GPUPROV_JOB_ATTEMPT after ${GPUPROV_JOB_PREVIOUS_END:-nothing}"; '
               'if [ "$GPUPROV_JOB_ATTEMPT" -lt 2 ]; then while true; do sleep 0.2; done; fi; echo finished')
    job_id = await stack.run(command, retry={"on": ["preempted"], "restarts": 1})
    first = (await running_attempt(stack, job_id, 1))["allocation_id"]
    await client_calls.signal(stack.client, job_workflow_id(job_id), wf.JOB.preemption_notice,
                              PreemptionNotice(allocation_id=first, reason="spot interruption notice"))
    job = await stack.until_status(job_id, "succeeded", within_s=120)
    assert [(a["ended"], (a["reason"] or "")[:44]) for a in job["attempt_history"]] == [
        ("preempted", "the cloud's preemption notice; exit code 143"), (None, "")]
    assert (await stack.logs(job_id)).decode().replace("Terminated\n", "") == (
        "attempt 1 after nothing\n"
        "checkpoint saved\n"
        "--- gpuprov: attempt 2 of 2 (previous ended: preempted) ---\n"
        "attempt 2 after preempted\n"
        "finished\n")
    with Session(stack.deps.engine) as s:
        row = s.get(Instance, first)
        assert row is not None and row.status == "terminated"  # released by the job, not lost


async def test_the_watch_finds_the_preemption_and_the_job_restarts(stack: Stack) -> None:
    """End to end, nothing sent by hand: the simulated cloud takes the machine back (Lambda lists it
    `preempted`), the connection's real WatchWorkflow reads that in its listing and reports the
    allocation lost *preempted*, and the job's policy restarts it on a new machine."""
    job_id = await stack.run(PREEMPT_ME, retry={"on": ["preempted"], "restarts": 1})
    job = await running_attempt(stack, job_id, 1)
    first = job["allocation_id"]
    with Session(stack.deps.engine) as s:
        row = s.get(Instance, first)
        assert row is not None
        connection_id = row.connection_id
    await start_watch(stack.client, stack.queue, connection_id, interval_s=0.5)
    try:
        [machine] = [m for m in await machines_of(stack, first) if m["status"] != "terminated"]
        await stack.sim.admin.aio.preempt(machine["id"])
        await running_attempt(stack, job_id, 2)
        with Session(stack.deps.engine) as s:
            lost = s.get(Instance, first)
            assert lost is not None and lost.status == "lost" and "preempted" in (lost.error or ""), lost
        state = await job_state(stack, job_id)
        assert [e.cause.value for e in state.ends] == ["preempted"]
        # The second attempt waits (only a third one finishes): cancelled, its machine goes with it.
        await client_calls.update(stack.client, job_workflow_id(job_id), wf.JOB.cancel)
    finally:
        await client_calls.signal(stack.client, watch_workflow_id(connection_id), wf.WATCH.stop)

"""A job's restart survives its worker: SIGKILL the worker process while a job restarts on a new
machine (its machine was preempted) and start it again — the job finishes on exactly one new
machine, not two (the restart's allocation id is derived from the first: the same child workflow,
whose create is idempotent by its attempt key).

The job is made by the real API (in this process, on the worker's database and task queue); the
worker is `python worker.py` (tests/crash/conftest.py). As in tests/jobs/test_job_retry.py, the
machine is preempted by the simulated cloud's admin `preempt` and the allocation told so with the
watch's own report (`machine_lost`, `MachineLost(preempted=True)`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client
from temporalio.service import RPCError

from api.app import create_app
from api.deps import AppDeps
from api.temporal import TemporalGateway
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.allocation import MachineLost, Timing
from messages.ids import allocation_of_key, allocation_workflow_id
from providers.naming import prefix
from store.models import Instance
from store.secrets import SecretBox
from tests.api.conftest import TOKEN
from tests.crash.conftest import TASK_QUEUE, WorkerProcess
from tests.eventually import eventually
from workflows import client_calls

# A 2 s heartbeat timeout: the server notices the dead worker's activities within seconds.
TIMING = Timing(heartbeat_timeout_s=2, poll_interval_s=0.2, call_timeout_s=60, boot_timeout_s=60,
                ssh_timeout_s=20, k3s_timeout_s=30, max_retry_interval_s=1)
COMMAND = ('echo "attempt $GPUPROV_JOB_ATTEMPT after ${GPUPROV_JOB_PREVIOUS_END:-nothing}"; '
           'if [ "$GPUPROV_JOB_ATTEMPT" -lt 2 ]; then sleep 600; fi; echo finished')


@pytest.fixture
async def api(temporal_client: Client, db_engine: sa.Engine, secret_box: SecretBox, installation: str,
              local_connection: str) -> AsyncIterator[httpx.AsyncClient]:
    gateway = TemporalGateway("unused", "default", TASK_QUEUE, keys=secret_box.keys)
    gateway._client = temporal_client  # the session's dev server, already connected
    deps = AppDeps(engine=db_engine, box=secret_box, api_token=TOKEN, installation_id=installation,
                   workflows=gateway, job_timing=TIMING, job_log_poll_s=0.1, job_queue_poll_s=0.3)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(deps)), base_url="http://api",
                                 timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        yield http


def machines_for(sim: FakeCloudServer, installation: str, allocation_id: str) -> list[dict[str, Any]]:
    def allocation(m: dict[str, Any]) -> str | None:
        return allocation_of_key(str(m.get("name") or "").removeprefix(prefix(installation)))

    return [m for m in sim.admin.machines() if allocation(m) == allocation_id]


async def exists(client: Client, workflow_id: str) -> bool:
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError:
        return False
    return True


@pytest.mark.parametrize("moment", ["child started", "create accepted"])
async def test_a_worker_killed_during_a_restart_leaves_one_new_machine(
        moment: str, temporal_client: Client, sim: FakeCloudServer, worker_process: WorkerProcess,
        api: httpx.AsyncClient, installation: str, db_engine: sa.Engine) -> None:
    r = await api.post("/api/compute/jobs", json={
        "name": "crash", "type": "task", "command": COMMAND, "cloud": "local", "requested_by": "tests",
        "retry": {"on": ["preempted", "machine_lost"], "restarts": 1}})
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    first, second = f"{job_id}-m", f"{job_id}-m-2"

    async def job() -> dict[str, Any]:
        got = await api.get(f"/api/compute/jobs/{job_id}")
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        return body

    async def log() -> bytes:
        return (await api.get(f"/api/compute/jobs/{job_id}/logs")).content

    async def first_runs() -> bool:
        return b"attempt 1 after nothing\n" in await log()

    await eventually(first_runs, within=90, what="attempt 1 running")
    await sim.admin.aio.configure(boot_delay=4)  # the new machine boots slowly: the moment to kill in
    try:
        [machine] = machines_for(sim, installation, first)
        await sim.admin.aio.preempt(machine["id"])
        await client_calls.signal(temporal_client, allocation_workflow_id(first), wf.ALLOCATION.machine_lost,
                                  MachineLost(reason=f"the cloud preempted machine {machine['id']}",
                                              preempted=True))

        async def the_moment() -> bool:
            if moment == "child started":
                return await exists(temporal_client, allocation_workflow_id(second))
            return len(machines_for(sim, installation, second)) == 1

        await eventually(the_moment, within=60, what=f"the restart's {moment}")
        worker_process.kill()
        worker_process.start()
    finally:
        await sim.admin.aio.configure(boot_delay=0.3)

    async def ended() -> dict[str, Any] | None:
        j = await job()
        return j if j["status"] in ("succeeded", "failed", "cancelled") else None

    done = await eventually(ended, within=120, what="the job's end")
    assert done["status"] == "succeeded" and done["attempts"] == 2, done
    assert (await log()).decode() == (
        "attempt 1 after nothing\n"
        "--- gpuprov: attempt 2 of 2 (previous ended: preempted) ---\n"
        "attempt 2 after preempted\n"
        "finished\n")
    made = machines_for(sim, installation, second)
    assert len(made) == 1, made  # one new machine, not two
    assert [m["status"] for m in made] == ["terminated"]
    assert not [m for m in sim.admin.machines() if m["status"] != "terminated"
                and job_id in str(m.get("name") or "")]
    with Session(db_engine) as s:
        assert [(i.id, i.status) for i in (s.get(Instance, first), s.get(Instance, second)) if i] == [
            (first, "lost"), (second, "terminated")]

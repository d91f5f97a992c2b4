"""The acceptance suite against every simulated cloud: each passes every step — the worker-killed
one on the runner's own private worker process, SIGKILLed while the create is in flight — leaves
nothing billable, and reads `simulated` (never `supported`). A fault that leaves a side resource
behind fails `nothing_billable` naming it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client

from api.routers.acceptance import SIMULATED_TIMING, workflow_id
from cli.acceptance import PrivateWorker
from messages import workflows as wf
from messages.acceptance import PASSING, STEPS, AcceptanceRequest, AcceptanceState, WorkerKilled
from providers import support
from store import acceptance_runs
from store.identity import ssh_identity
from store.secrets import SecretBox
from tests import recorded
from tests.acceptance.conftest import TASK_QUEUE
from tests.conformance.clouds import production_clouds


def request(db_engine: sa.Engine, secret_box: SecretBox, connection_id: str, cloud: str,
            **kw: Any) -> AcceptanceRequest:
    """The request the API makes for a simulated account (api/routers/acceptance.py)."""
    with Session(db_engine) as s:
        public, _ = ssh_identity(s, secret_box)
    fields: dict[str, Any] = dict(run_id=f"acc-{uuid.uuid4().hex[:12]}", connection_id=connection_id,
                                  cloud=cloud, max_usd=50.0, max_minutes=10.0, ssh_public_keys=[public],
                                  timing=SIMULATED_TIMING, settle_s=5.0)
    fields.update(kw)
    return AcceptanceRequest(**fields)


class KillDriverFake:
    """What `gpuprov acceptance run` does for the worker-killed step (cli/acceptance.py `_follow`),
    for every run at once sharing one private worker: once each run still going shows `kill_now`
    (its create in flight on that worker), SIGKILL the worker, start a fresh one, and tell them all.
    One kill for all: each run's create is cut off by it, and each recovers on the fresh worker."""

    def __init__(self, client: Client, worker: PrivateWorker) -> None:
        self.client, self.worker = client, worker
        self.runs: set[str] = set()  # the runs still going
        self.kills = 0

    async def drive(self) -> None:
        told: set[tuple[str, str]] = set()
        while True:
            cues = {}
            for run_id in list(self.runs):
                st = await self.client.get_workflow_handle(workflow_id(run_id)).query(
                    wf.ACCEPTANCE.state.name, result_type=AcceptanceState)
                if st.kill_now is not None and (run_id, st.kill_now) not in told:
                    cues[run_id] = st.kill_now
            if cues and set(cues) >= self.runs:
                self.worker.kill()
                self.kills += 1
                self.worker.start()
                for run_id, allocation in cues.items():
                    told.add((run_id, allocation))
                    await self.client.get_workflow_handle(workflow_id(run_id)).signal(
                        wf.ACCEPTANCE.worker_killed.name, WorkerKilled(phase="create"))
            await asyncio.sleep(0.2)


async def accept(client: Client, req: AcceptanceRequest) -> AcceptanceState:
    return await client.execute_workflow(wf.ACCEPTANCE.name, req, id=workflow_id(req.run_id),
                                         task_queue=TASK_QUEUE, result_type=AcceptanceState)


async def test_every_simulated_cloud_passes_every_step_and_reads_simulated(
        acceptance_worker: None, private_worker: PrivateWorker, temporal_client: Client, connect: Any,
        db_engine: sa.Engine, secret_box: SecretBox) -> None:
    clouds = production_clouds()
    driver = KillDriverFake(temporal_client, private_worker)

    async def one(cloud: str) -> AcceptanceState:
        req = request(db_engine, secret_box, connect(cloud), cloud, kill_task_queue=private_worker.queue)
        driver.runs.add(req.run_id)
        try:
            return await accept(temporal_client, req)
        finally:
            driver.runs.discard(req.run_id)

    driving = asyncio.create_task(driver.drive())
    try:
        states = await asyncio.gather(*(one(c) for c in clouds))
    finally:
        driving.cancel()

    failures = {st.cloud: [f"{s.name}: {s.outcome} ({s.detail})"
                           for s in st.steps if s.outcome not in PASSING] for st in states}
    assert {c: f for c, f in failures.items() if f} == {}
    assert driver.kills == 1
    for st in states:
        assert st.result is not None and st.result.outcome == "passed", st.cloud
        assert [s.name for s in st.steps] == list(STEPS), st.cloud
        assert st.leftovers == [], st.cloud
        assert st.result.account == "simulated" and st.result.account_fingerprint is not None
        killed = next(s for s in st.steps if s.name == "interrupt_worker_killed")
        assert killed.detail is not None, st.cloud
        assert "worker killed in phase create, then terminated" in killed.detail, st.cloud
    # One run's history, committed and replayed on every run (tests/workflows/test_replay.py).
    lambda_run = next(st.run_id for st in states if st.cloud == "lambda")
    await recorded.replays(temporal_client, workflow_id(lambda_run))
    # What the deployment recorded is what a cloud's status is read from: simulated, never supported.
    with Session(db_engine) as s:
        results = acceptance_runs.results(s, clouds=clouds)
    for cloud in clouds:
        assert support.status(cloud, results).status == "simulated", cloud

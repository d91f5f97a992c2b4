"""The acceptance suite against every simulated cloud: each passes every step — the worker-killed
one on the runner's own private worker process, SIGKILLed while the create is in flight — leaves
nothing billable, and reads `simulated` (never `supported`). A fault that leaves a side resource
behind fails `nothing_billable` naming it."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError

from activities.deps import ActivityDeps
from api.routers.acceptance import SIMULATED_TIMING, workflow_id
from cli.acceptance import PrivateWorker
from fakeclouds.server import FakeCloudServer
from messages import workflows as wf
from messages.acceptance import PASSING, STEPS, AcceptanceRequest, AcceptanceState, Approval, WorkerKilled
from providers import support
from store import acceptance_runs, connections
from store.identity import ssh_identity
from store.secrets import SecretBox
from tests import recorded, simclouds
from tests.acceptance.conftest import TASK_QUEUE
from tests.conformance.clouds import production_clouds
from tests.eventually import eventually
from tests.unread import collecting, unread_outcomes
from tests.workflows import patch_branches
from worker import build_worker
from workflows.acceptance import APPROVAL_DEADLINE_PATCH


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
                try:
                    st = await self.client.get_workflow_handle(workflow_id(run_id)).query(
                        wf.ACCEPTANCE.state.name, result_type=AcceptanceState)
                except (RPCError, WorkflowQueryFailedError):
                    # A query the loaded server or worker did not answer in time: asked again next
                    # round. Before, it ended this task unseen, and every run waited for a kill
                    # that never came until the test's timeout (a fresh-clone run under load).
                    continue
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
    runs = asyncio.ensure_future(asyncio.gather(*(one(c) for c in clouds)))
    try:
        # The driver never ends by itself: if it does (it raised), say so now rather than leave
        # every run waiting for its kill until the test's timeout.
        await asyncio.wait({runs, driving}, return_when=asyncio.FIRST_COMPLETED)
        if driving.done():
            raise AssertionError(f"the kill driver stopped: {driving.exception()!r}")
        states = runs.result()
    finally:
        driving.cancel()
        runs.cancel()

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


def machines_of(sim: FakeCloudServer, run_id: str) -> list[dict[str, Any]]:
    return [m for m in sim.admin.machines() if run_id in str(m.get("name") or "")]


async def test_a_ceiling_below_the_offers_price_stops_the_run_before_any_create(
        acceptance_worker: None, acceptance_sim: FakeCloudServer, temporal_client: Client, connect: Any,
        db_engine: sa.Engine, secret_box: SecretBox) -> None:
    before = len(acceptance_sim.admin.machines())
    req = request(db_engine, secret_box, connect("lambda"), "lambda", max_usd=0.5)
    st = await accept(temporal_client, req)
    offer = next(s for s in st.steps if s.name == "offer")
    assert offer.outcome == "failed" and offer.detail is not None
    assert "costs more than the run's ceiling of $0.5: nothing was created" in offer.detail
    assert st.allocations == [] and len(acceptance_sim.admin.machines()) == before
    assert {s.name for s in st.steps if s.outcome == "not_run"} == set(STEPS) - {"connect", "offer"}
    assert st.result is not None and st.result.outcome == "failed"


async def held(client: Client, req: AcceptanceRequest, task_queue: str = TASK_QUEUE) -> Any:
    """Start `req` (held for approval) and wait for its plan: the handle and the held state."""
    handle = await client.start_workflow(wf.ACCEPTANCE.name, req, id=workflow_id(req.run_id),
                                         task_queue=task_queue, result_type=AcceptanceState)
    st = await eventually(lambda: handle.query(wf.ACCEPTANCE.state.name, result_type=AcceptanceState),
                          until=lambda s: s.awaiting_approval, within=30, what="the plan, held")
    return handle, st


def created_nothing(sim: FakeCloudServer, req: AcceptanceRequest, st: AcceptanceState, why: str) -> None:
    assert st.allocations == [] and machines_of(sim, req.run_id) == []
    assert not st.awaiting_approval and st.approve_by is None
    skipped = [s for s in st.steps if s.name not in ("connect", "offer")]
    assert skipped and all(s.outcome == "not_run" and why in (s.detail or "") for s in skipped), skipped
    assert st.result is not None and st.result.outcome == "incomplete"


async def test_a_declined_plan_creates_nothing(acceptance_worker: None, acceptance_sim: FakeCloudServer,
                                               temporal_client: Client, connect: Any, db_engine: sa.Engine,
                                               secret_box: SecretBox) -> None:
    req = request(db_engine, secret_box, connect("lambda"), "lambda", hold_for_approval=True)
    handle, st = await held(temporal_client, req)
    assert st.plan is not None and st.plan.price_per_hour == 0.75 and st.allocations == []
    assert st.approve_by is not None and st.approve_by > datetime.now(UTC) + timedelta(minutes=14)
    await handle.signal(wf.ACCEPTANCE.approve.name, Approval(spend=False))
    ended = await handle.result()
    created_nothing(acceptance_sim, req, ended, "the plan was declined")
    assert not ended.unanswered  # answered: no
    # Committed, and replayed on every run: APPROVAL_DEADLINE_PATCH's marker, its timer cancelled.
    await recorded.replays(temporal_client, workflow_id(req.run_id))


async def test_a_plan_not_answered_in_time_declines_itself(
        acceptance_worker: None, acceptance_sim: FakeCloudServer, temporal_client: Client, connect: Any,
        db_engine: sa.Engine, secret_box: SecretBox) -> None:
    """A caller that went away (a killed CLI) leaves the run to its deadline, not its time ceiling."""
    req = request(db_engine, secret_box, connect("lambda"), "lambda", hold_for_approval=True,
                  approve_within_minutes=0.05, max_minutes=10.0)
    handle, st = await held(temporal_client, req)
    assert st.approve_by is not None and not st.unanswered
    ended = await handle.result()
    created_nothing(acceptance_sim, req, ended, "the plan was not answered within 0.05 min")
    assert ended.unanswered
    with Session(db_engine) as s:  # recorded as ended: its account's lane is free for the next run
        assert acceptance_runs.has_ended(s, req.run_id)
    await recorded.replays(temporal_client, workflow_id(req.run_id))


async def test_a_run_held_before_the_deadline_patch_waits_without_one(
        acceptance_sim: FakeCloudServer, temporal_client: Client, acceptance_deps: ActivityDeps,
        connect: Any, db_engine: sa.Engine, secret_box: SecretBox) -> None:
    """APPROVAL_DEADLINE_PATCH's old branch (a run held when the patched worker arrived): no
    deadline in its state, and answered it ends as before. Its history is committed and replayed on
    every run (tests/workflows/patch_branches.py)."""
    queue = f"{TASK_QUEUE}-pre-deadline"
    req = request(db_engine, secret_box, connect("lambda"), "lambda", hold_for_approval=True,
                  approve_within_minutes=0.01)
    before = patch_branches.fake_worker_before(APPROVAL_DEADLINE_PATCH)  # FAKE: no deadline, no marker
    async with build_worker(temporal_client, acceptance_deps, task_queue=queue,
                            patch_activation_callback=before):
        handle, st = await held(temporal_client, req, task_queue=queue)
        assert st.approve_by is None
        await handle.signal(wf.ACCEPTANCE.approve.name, Approval(spend=False))
        created_nothing(acceptance_sim, req, await handle.result(), "the plan was declined")
        [history] = await recorded.replays(temporal_client, workflow_id(req.run_id))
    assert patch_branches.approval_deadline_old_branch(history)
    deadline = timedelta(minutes=req.approve_within_minutes)
    assert not any(e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta() == deadline
                   for e in history.events if e.HasField("timer_started_event_attributes"))


async def test_a_side_resource_the_cloud_kept_fails_nothing_billable_naming_it(
        acceptance_worker: None, acceptance_sim: FakeCloudServer, temporal_client: Client, connect: Any,
        db_engine: sa.Engine, secret_box: SecretBox) -> None:
    # DigitalOcean answers the machine's firewall delete as done, and keeps it: a leak only the
    # listing shows.
    acceptance_sim.admin.add_fault("digitalocean", "side_resources", "ignore_delete", times=-1)
    try:
        # settle 1 s: the firewall stays for good, waiting longer shows nothing more
        st = await accept(temporal_client, request(db_engine, secret_box, connect("digitalocean"),
                                                   "digitalocean", settle_s=1.0))
    finally:
        acceptance_sim.admin.clear_faults()
    step = next(s for s in st.steps if s.name == "nothing_billable")
    key = f"gp-{st.run_id}-m-a1"
    assert step.outcome == "failed" and step.detail is not None
    assert "firewall" in step.detail and f"(key {key})" in step.detail, step.detail
    assert any(left.key == key and left.kind == "firewall" for left in st.leftovers)  # reported, with its id
    assert st.result is not None and st.result.failed_step == "nothing_billable"
    assert support.status("digitalocean", [st.result]).status == "failing"


async def test_refused_credentials_fail_connect_and_nothing_else_runs(
        acceptance_worker: None, acceptance_sim: FakeCloudServer, temporal_client: Client,
        db_engine: sa.Engine, secret_box: SecretBox) -> None:
    with Session(db_engine) as s:
        conn = connections.add_connection(
            s, secret_box, provider="lambda", name="lambda-wrong-key",
            credentials=simclouds.credentials(acceptance_sim, "lambda", token="not-the-token"),
            endpoint=simclouds.endpoint(acceptance_sim, "lambda")).id
    st = await accept(temporal_client, request(db_engine, secret_box, conn, "lambda"))
    connect = st.steps[0]
    assert connect.name == "connect" and connect.outcome == "failed" and connect.detail is not None
    assert connect.detail.startswith("AuthError: "), connect.detail
    assert st.allocations == [] and all(s.outcome == "not_run" for s in st.steps[1:])
    assert st.result is not None and st.result.failed_step == "connect"




async def test_a_machine_that_never_comes_up_fails_its_step_and_no_error_is_logged(
        acceptance_deps: ActivityDeps, acceptance_sim: FakeCloudServer, temporal_client: Client, connect: Any,
        db_engine: sa.Engine, secret_box: SecretBox) -> None:
    """Each machine is a child AllocationWorkflow, whose failure the run reads through the
    allocation. The child's handle must be read too: one dropped unread is logged by the SDK as an
    ERROR traceback ("exception was never retrieved") for a machine that merely did not come up —
    22 in one `make fuzz` (tests/unread.py: when that shows)."""
    queue = f"{TASK_QUEUE}-unread-{uuid.uuid4().hex[:8]}"
    acceptance_sim.admin.add_fault("lambda", "create", "capacity", times=-1)
    try:
        req = request(db_engine, secret_box, connect("lambda"), "lambda")
        with unread_outcomes() as unread:
            async with collecting(), build_worker(temporal_client, acceptance_deps, task_queue=queue):
                st = await temporal_client.execute_workflow(
                    wf.ACCEPTANCE.name, req, id=workflow_id(req.run_id), task_queue=queue,
                    result_type=AcceptanceState)
    finally:
        acceptance_sim.admin.clear_faults()
    assert st.result is not None and st.result.failed_step == "allocate"
    assert "no offer could be launched" in (next(s for s in st.steps if s.name == "allocate").detail or "")
    assert unread.seen == []

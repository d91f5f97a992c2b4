"""The acceptance runs' API: a run is started held or approved, read live while it runs and as recorded
once it ended, answered, and exported in the committed results file's format (the workflow itself runs
against every simulation in tests/acceptance/)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlmodel import Session

from api.routers.acceptance import STARTING_S, workflow_id
from api.temporal import WorkflowUnavailable
from messages import workflows as wf
from messages.acceptance import (
    STEPS,
    AcceptancePlan,
    AcceptanceRequest,
    AcceptanceResult,
    AcceptanceState,
    AcceptanceStep,
    RecordAcceptanceInput,
)
from providers import support
from store import acceptance_runs, connections
from tests.api.conftest import OTHER_KEY, FakeWorkflows, all_items, connect_fake, make_project

RUNS = "/api/compute/acceptance-runs"


async def test_a_run_starts_held_for_approval_with_the_installations_key(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    conn = await connect_fake(client)
    body = {"connection_id": conn["id"], "gpu": "A10", "max_usd": 3, "spend": False}
    r = await client.post(RUNS, json=body)
    assert r.status_code == 202, r.text
    run = r.json()
    assert run["cloud"] == "fakecloud" and run["done"] is False and run["steps"] == []
    [start] = workflows.starts_of(wf.ACCEPTANCE.name)
    req = start.arg
    assert isinstance(req, AcceptanceRequest) and start.workflow_id == workflow_id(run["id"])
    assert req.hold_for_approval and req.max_usd == 3 and req.gpu == "A10" and req.kill_task_queue is None
    assert req.approve_within_minutes == 15  # unanswered that long, it declines itself
    assert req.ssh_public_keys[0].startswith("ssh-ed25519 ")  # the installation's: the run logs in with it
    # connected without an endpoint to its documented API host: a real account, with real timings
    assert support.account_kind_of("fakecloud", None) == "real" and req.timing.heartbeat_timeout_s == 30.0
    assert [i["id"] for i in await all_items(client, RUNS)] == [run["id"]]

    # Live while it runs: the workflow's query answers.
    by = datetime(2026, 12, 8, 3, 0, tzinfo=UTC)
    workflows.answers[workflow_id(run["id"])] = AcceptanceState(
        run_id=run["id"], cloud="fakecloud", awaiting_approval=True, approve_by=by,
        plan=AcceptancePlan(adapter_version="v1", account="simulated", instance_type="gpu.a10", region="r1",
                            gpu="A10", gpu_count=1, price_per_hour=0.75))
    live = (await client.get(f"{RUNS}/{run['id']}")).json()
    assert live["awaiting_approval"] and live["plan"]["price_per_hour"] == 0.75
    assert datetime.fromisoformat(live["approve_by"]) == by
    r = await client.post(f"{RUNS}/{run['id']}/approve", json={"spend": True})
    assert r.status_code == 202, r.text
    assert [(w, name, a.spend) for w, name, a in workflows.signals] == [  # type: ignore[attr-defined]
        (workflow_id(run["id"]), "approve", True)]


async def test_the_answers_deadline_is_the_callers_within_bounds(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    conn = await connect_fake(client)
    body = {"connection_id": conn["id"], "max_usd": 3, "spend": False}
    for bad in (0, 0.5, -1, 24 * 60 + 1, 1e308):
        r = await client.post(RUNS, json={**body, "approve_within_minutes": bad})
        assert r.status_code == 422 and "approve_within_minutes" in r.text, r.text
    assert workflows.starts_of(wf.ACCEPTANCE.name) == [] and await all_items(client, RUNS) == []
    r = await client.post(RUNS, json={**body, "approve_within_minutes": 2.5})
    assert r.status_code == 202, r.text
    [start] = workflows.starts_of(wf.ACCEPTANCE.name)
    assert start.arg.approve_within_minutes == 2.5 and start.arg.hold_for_approval


async def test_a_late_answer_to_a_plan_that_declined_itself_is_refused(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    """Its deadline passed while the run still cleans up (its workflow open): a "yes" then would
    read as taken (202) and change nothing."""
    conn = await connect_fake(client)
    run = (await client.post(RUNS, json={"connection_id": conn["id"], "max_usd": 3, "spend": False})).json()
    workflows.answers[workflow_id(run["id"])] = AcceptanceState(run_id=run["id"], cloud="fakecloud",
                                                                unanswered=True)
    assert (await client.get(f"{RUNS}/{run['id']}")).json()["unanswered"] is True
    r = await client.post(f"{RUNS}/{run['id']}/approve", json={"spend": True})
    assert r.status_code == 409 and "declined itself" in r.json()["detail"], r.text
    assert workflows.signals == []
    workflows.answers[workflow_id(run["id"])] = AcceptanceState(run_id=run["id"], cloud="fakecloud",
                                                                awaiting_approval=True)
    r = await client.post(f"{RUNS}/{run['id']}/approve", json={"spend": True})
    assert r.status_code == 202 and len(workflows.signals) == 1, r.text


async def test_unknown_connection_404_and_temporal_down_503_leave_no_run(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    r = await client.post(RUNS, json={"connection_id": "c-nope", "max_usd": 3, "spend": True})
    assert r.status_code == 404 and "no connection" in r.json()["detail"]
    conn = await connect_fake(client)
    workflows.fail_with = WorkflowUnavailable("Temporal at 127.0.0.1:7233 is not reachable")
    r = await client.post(RUNS, json={"connection_id": conn["id"], "max_usd": 3, "spend": True})
    assert r.status_code == 503
    workflows.fail_with = None
    assert await all_items(client, RUNS) == []
    r = await client.post(RUNS, json={"connection_id": conn["id"], "max_usd": 0, "spend": True})
    assert r.status_code == 422  # a ceiling must be above zero
    r = await client.post(RUNS, json={"connection_id": conn["id"], "max_usd": 3, "spend": True})
    assert r.status_code == 202, r.text  # the failed start let the connection's lane go


async def test_an_ended_run_reads_as_recorded_refuses_answers_and_exports_its_result(
        client: httpx.AsyncClient, engine: sa.Engine) -> None:
    steps = [AcceptanceStep(name=n, outcome="passed", seconds=1.5) for n in STEPS]
    result = AcceptanceResult(cloud="fakecloud", adapter_version="v1", account="simulated", steps=steps,
                              started_at=datetime(2030, 1, 1, tzinfo=UTC),
                              account_fingerprint="0123456789abcdef")
    state = AcceptanceState(run_id="acc-000000000001", cloud="fakecloud", done=True, steps=steps,
                            result=result)
    with Session(engine) as s:
        acceptance_runs.save(s, RecordAcceptanceInput(run_id=state.run_id, project="default",
                                                      connection_id="c1", result=result, state=state))
    run = (await client.get(f"{RUNS}/{state.run_id}")).json()
    assert run["done"] and run["outcome"] == "passed" and run["finished_at"] is not None
    r = await client.post(f"{RUNS}/{state.run_id}/approve", json={"spend": True})
    assert r.status_code == 409 and "has ended" in r.json()["detail"]
    exported = await client.get(f"{RUNS}/results", params={"cloud": "fakecloud"})
    assert exported.status_code == 200
    # the committed file's format: parsed by the same code that reads providers/acceptance_results.json
    assert support.parse_results(exported.text) == [result]
    assert "api_key" not in exported.text and "credentials" not in exported.text


def _ended(engine: sa.Engine, run_id: str, connection_id: str) -> None:
    """The run's workflow records its result (its last record)."""
    steps = [AcceptanceStep(name=n, outcome="passed", seconds=1.0) for n in STEPS]
    result = AcceptanceResult(cloud="fakecloud", adapter_version="v1", account="simulated", steps=steps,
                              started_at=datetime(2030, 1, 1, tzinfo=UTC))
    with Session(engine) as s:
        acceptance_runs.save(s, RecordAcceptanceInput(
            run_id=run_id, project="default", connection_id=connection_id, result=result,
            state=AcceptanceState(run_id=run_id, cloud="fakecloud", done=True, steps=steps, result=result)))


async def test_one_run_at_a_time_per_account(
        client: httpx.AsyncClient, workflows: FakeWorkflows, engine: sa.Engine) -> None:
    """`make fuzz` started 22 runs at once on one account: they took each other's capacity (one failed
    on a zone the others had emptied) and would have doubled a real account's spend. One key
    connected twice is one account."""
    conn, twice = await connect_fake(client), await connect_fake(client)
    other = await connect_fake(client, key=OTHER_KEY)
    body = {"connection_id": conn["id"], "max_usd": 3, "spend": True}
    first = await client.post(RUNS, json=body)
    assert first.status_code == 202, first.text
    for refused in (body, {**body, "connection_id": twice["id"]}):
        second = await client.post(RUNS, json=refused)
        assert second.status_code == 409, second.text
        detail = second.json()["detail"]
        assert first.json()["id"] in detail and f"connection {conn['id']}" in detail and "under way" in detail
    listed = [i["id"] for i in await all_items(client, RUNS)]
    assert listed == [first.json()["id"]], "the refused run left a row"
    assert len(workflows.starts_of(wf.ACCEPTANCE.name)) == 1
    beside = await client.post(RUNS, json={**body, "connection_id": other["id"]})
    assert beside.status_code == 202, "another account's runs are not held"

    _ended(engine, first.json()["id"], conn["id"])
    after = await client.post(RUNS, json={**body, "connection_id": twice["id"]})
    assert after.status_code == 202, after.text


async def test_the_same_key_in_another_project_is_held_without_naming_the_run(
        client: httpx.AsyncClient) -> None:
    """Two projects that connected one cloud key share its account: the second's run is refused, and
    the 409 does not name the first project's run (its id, its connection) to the other."""
    body, first = await one_run(client)
    await make_project(client, "p2")
    theirs = await connect_fake(client, "p2")
    r = await client.post(RUNS, headers={"X-Project": "p2"}, json={**body, "connection_id": theirs["id"]})
    assert r.status_code == 409, r.text
    detail = r.json()["detail"]
    assert "another acceptance run is under way on this cloud account" in detail
    assert first["id"] not in detail and body["connection_id"] not in detail


async def one_run(client: httpx.AsyncClient) -> tuple[dict[str, Any], dict[str, Any]]:
    """A new connection with a run started on it: (the body that starts a run there, the run)."""
    conn = await connect_fake(client)
    body = {"connection_id": conn["id"], "max_usd": 3, "spend": True}
    first = await client.post(RUNS, json=body)
    assert first.status_code == 202, first.text
    return body, first.json()


async def test_a_run_closed_without_recording_its_end_gives_the_account_up(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    body, first = await one_run(client)
    workflows.closed.add(workflow_id(first["id"]))  # terminated from the Web UI: no result recorded
    second = await client.post(RUNS, json=body)
    assert second.status_code == 202, second.text
    third = await client.post(RUNS, json=body)
    assert third.status_code == 409 and second.json()["id"] in third.json()["detail"]


async def test_a_run_whose_workflow_never_started_holds_the_account_only_briefly(
        client: httpx.AsyncClient, workflows: FakeWorkflows, engine: sa.Engine) -> None:
    """Its lane taken, the API stopped before the run's row and start: while that start may still be
    on its way the lane is held, then the next run takes it over."""
    conn = await connect_fake(client)
    with Session(engine) as s:
        row = connections.get_connection(s, conn["id"])
        assert row is not None
        assert acceptance_runs.take_lane(s, acceptance_runs.lane_key(row), "acc-000000000009") is None
    body = {"connection_id": conn["id"], "max_usd": 3, "spend": True}
    r = await client.post(RUNS, json=body)
    # Its row not made, its project unknown: the 409 does not name it.
    assert r.status_code == 409 and "another acceptance run is under way" in r.json()["detail"]
    assert await all_items(client, RUNS) == [], "a refused run leaves no row"
    with engine.begin() as c:
        c.execute(sa.text("UPDATE acceptance_lane SET taken_at = :at WHERE run_id = 'acc-000000000009'"),
                  {"at": datetime.now(UTC) - timedelta(seconds=STARTING_S + 1)})
    r = await client.post(RUNS, json=body)
    assert r.status_code == 202, r.text


async def test_temporal_down_at_the_check_refuses_and_keeps_the_holder(
        client: httpx.AsyncClient, workflows: FakeWorkflows) -> None:
    body, first = await one_run(client)
    workflows.fail_with = WorkflowUnavailable("Temporal at 127.0.0.1:7233 is not reachable")
    r = await client.post(RUNS, json=body)
    assert r.status_code == 503
    workflows.fail_with = None
    assert [i["id"] for i in await all_items(client, RUNS)] == [first["id"]]
    r = await client.post(RUNS, json=body)
    assert r.status_code == 409 and first["id"] in r.json()["detail"]


async def test_a_row_that_could_not_be_saved_lets_the_account_go(
        client: httpx.AsyncClient, workflows: FakeWorkflows, monkeypatch: pytest.MonkeyPatch) -> None:
    """The database refused the run's row (nothing started): the caller's retry is not refused for
    the STARTING_S a never-started holder keeps the lane."""
    conn = await connect_fake(client)
    saving = acceptance_runs.save

    def refused_once(session: Session, record: RecordAcceptanceInput) -> None:
        monkeypatch.setattr(acceptance_runs, "save", saving)
        raise sa.exc.OperationalError("INSERT INTO acceptance_runs", {}, Exception("disk I/O error"))

    monkeypatch.setattr(acceptance_runs, "save", refused_once)
    body = {"connection_id": conn["id"], "max_usd": 3, "spend": True}
    r = await client.post(RUNS, json=body)
    assert r.status_code == 500 and workflows.starts_of(wf.ACCEPTANCE.name) == []
    r = await client.post(RUNS, json=body)
    assert r.status_code == 202, r.text

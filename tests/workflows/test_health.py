"""HealthWorkflow on the dev server with the in-process worker: every named connection verified at
once, each answer recorded on its row — a failing cloud degraded with its reason, the others healthy."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client
from temporalio.worker import Replayer

from messages import workflows as wf
from messages.health import HealthInput, HealthRecheckInput, HealthSummary
from messages.ids import connection_health_workflow_id, health_recheck_child_id
from store import connections
from store.models import Connection
from store.secrets import SecretBox
from tests import recorded
from tests.fakes import FakeCloud
from tests.workflows.conftest import TASK_QUEUE
from tests.workflows.test_terminate_connect import connect, connect_request
from worker import WORKFLOWS, workflow_runner

# health-v1/ (committed) was recorded here; a new recording goes to the current round's folder.
HEALTH_HISTORIES = recorded.BATCH


async def replays(client: Client, *workflow_ids: str) -> None:
    """Each run's history replays against the current code; GPUPROV_RECORD_HISTORIES=1 keeps it
    with the committed histories (histories/README.md), replayed on every run."""
    for workflow_id in workflow_ids:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        await Replayer(workflows=WORKFLOWS, workflow_runner=workflow_runner(),
                       data_converter=client.data_converter).replay_workflow(history)
        if os.environ.get("GPUPROV_RECORD_HISTORIES"):
            HEALTH_HISTORIES.mkdir(exist_ok=True)
            (HEALTH_HISTORIES / f"{history.workflow_id}.json").write_text(history.to_json())


async def test_health_check_records_healthy_and_degraded_with_the_reason(
        temporal_client: Client, fake_cloud: FakeCloud, db_engine: sa.Engine, secret_box: SecretBox) -> None:
    with Session(db_engine) as s:
        good, bad = (connections.add_connection(s, secret_box, provider="fake", name=key,
                                                credentials={"api_key": key}).id for key in ("good", "nope"))
    workflow_id = f"health-test-{uuid.uuid4().hex[:8]}"
    summary = await temporal_client.execute_workflow(
        wf.HEALTH.name, HealthInput(connection_ids=[good, bad], verify_timeout_s=10),
        id=workflow_id, task_queue=TASK_QUEUE, result_type=HealthSummary)
    await recorded.replays(temporal_client, workflow_id)

    assert {c.connection_id: c.ok for c in summary.checked} == {good: True, bad: False}
    with Session(db_engine) as s:
        g, b = s.get(Connection, good), s.get(Connection, bad)
        assert g is not None and b is not None
        assert (g.health_status, g.health_reason) == ("healthy", None)
        assert g.health_latency_ms is not None and g.health_checked_at is not None
        assert (b.health_status, b.health_reason) == ("degraded", "fake: invalid api key")
        assert b.health_checked_at is not None
        assert g.status == b.status == "connected"  # health never changes whether it takes allocations


async def test_a_saved_connection_is_checked_at_once_not_after_an_interval(
        temporal_client: Client, fake_cloud: FakeCloud, db_engine: sa.Engine, secret_box: SecretBox) -> None:
    req = connect_request(secret_box, "good")
    assert (await connect(temporal_client, req)).ok
    # ConnectWorkflow started the connection's own health run: its answer, waited for (no Schedule).
    handle = temporal_client.get_workflow_handle(connection_health_workflow_id(req.connection_id),
                                                 result_type=HealthSummary)
    summary = await handle.result(rpc_timeout=timedelta(seconds=60))
    assert [(c.connection_id, c.ok) for c in summary.checked] == [(req.connection_id, True)]
    assert summary.probed == []  # that one connection only: no fleet re-probed
    with Session(db_engine) as s:
        row = s.get(Connection, req.connection_id)
        assert row is not None and (row.health_status, row.health_reason) == ("healthy", None)
        assert row.health_checked_at is not None


async def test_the_recheck_verifies_only_the_degraded_connections(
        temporal_client: Client, fake_cloud: FakeCloud, db_engine: sa.Engine, secret_box: SecretBox) -> None:
    with Session(db_engine) as s:
        recovered, healthy, pending = (connections.add_connection(s, secret_box, provider="fake", name=n,
                                                                  credentials={"api_key": "good"}).id
                                       for n in ("recovered", "healthy", "pending"))
        was = datetime.now(UTC) - timedelta(minutes=1)
        connections.record_health(s, recovered, status="degraded", reason="fake: down", checked_at=was,
                                  latency_ms=None)
        connections.record_health(s, healthy, status="healthy", reason=None, checked_at=was, latency_ms=3)
        s.commit()
    handle = await temporal_client.start_workflow(
        wf.HEALTH_RECHECK.name, HealthRecheckInput(verify_timeout_s=10),
        id=f"health-recheck-test-{uuid.uuid4().hex[:8]}", task_queue=TASK_QUEUE, result_type=HealthSummary)
    summary = await handle.result()
    await replays(temporal_client, handle.id, health_recheck_child_id(handle.result_run_id or ""))

    checked = {c.connection_id: c.ok for c in summary.checked}
    assert checked.get(recovered) is True
    assert healthy not in checked and pending not in checked  # only the degraded are asked again
    with Session(db_engine) as s:
        r, h = s.get(Connection, recovered), s.get(Connection, healthy)
        assert r is not None and h is not None
        assert (r.health_status, r.health_reason) == ("healthy", None)
        assert r.health_checked_at is not None and r.health_checked_at.replace(tzinfo=UTC) > was
        assert h.health_latency_ms == 3  # untouched

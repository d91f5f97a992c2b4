"""HealthWorkflow on the dev server with the in-process worker: every named connection verified at
once, each answer recorded on its row — a failing cloud degraded with its reason, the others healthy."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client

from messages.health import HealthInput, HealthSummary
from store import repo
from store.models import Connection
from store.secrets import SecretBox
from tests.fakes import FakeCloud
from tests.workflows.conftest import TASK_QUEUE

pytestmark = pytest.mark.devserver


async def test_health_check_records_healthy_and_degraded_with_the_reason(
        temporal_client: Client, fake_cloud: FakeCloud, db_engine: sa.Engine, secret_box: SecretBox) -> None:
    with Session(db_engine) as s:
        good, bad = (repo.add_connection(s, secret_box, provider="fake", name=key,
                                         credentials={"api_key": key}).id for key in ("good", "nope"))
    summary = await temporal_client.execute_workflow(
        "HealthWorkflow", HealthInput(connection_ids=[good, bad], verify_timeout_s=10),
        id=f"health-test-{uuid.uuid4().hex[:8]}", task_queue=TASK_QUEUE, result_type=HealthSummary)

    assert {c.connection_id: c.ok for c in summary.checked} == {good: True, bad: False}
    with Session(db_engine) as s:
        g, b = s.get(Connection, good), s.get(Connection, bad)
        assert g is not None and b is not None
        assert (g.health_status, g.health_reason) == ("healthy", None)
        assert g.health_latency_ms is not None and g.health_checked_at is not None
        assert (b.health_status, b.health_reason) == ("degraded", "fake: invalid api key")
        assert b.health_checked_at is not None
        assert g.status == b.status == "connected"  # health never changes whether it takes allocations

"""TerminateWorkflow and ConnectWorkflow on the dev server against FakeInMemoryProvider."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowExecutionStatus

from store import repo
from store.models import Connection, Instance
from store.secrets import SecretBox
from tests.fakes import FakeCloud
from tests.workflows.conftest import FAST, TASK_QUEUE, start_allocate, wait_phase
from tests.workflows.test_allocate import owned
from workflows.models import ConnectRequest, ConnectResult, Phase, TerminateRequest, TerminateResult

pytestmark = pytest.mark.devserver


async def terminate(client: Client, allocation_id: str) -> TerminateResult:
    return await client.execute_workflow("TerminateWorkflow", TerminateRequest(allocation_id=allocation_id,
                                                                              timing=FAST),
                                         id=f"terminate-{allocation_id}", task_queue=TASK_QUEUE,
                                         result_type=TerminateResult)


def add(session: Session, box: SecretBox, api_key: str) -> str:
    return repo.add_connection(session, box, provider="fake", name="c", credentials={"api_key": api_key}).id


def instance(engine: sa.Engine, allocation_id: str) -> Instance:
    with Session(engine) as s:
        row = s.get(Instance, allocation_id)
        assert row is not None
        return row


async def test_terminate_a_ready_machine_waits_until_gone(temporal_client: Client, fake_cloud: FakeCloud,
                                                         make_request: Any, db_engine: sa.Engine) -> None:
    req = make_request()
    await (await start_allocate(temporal_client, req)).result()
    assert len(await owned()) == 1

    result = await terminate(temporal_client, req.allocation_id)

    assert result.terminated
    assert await owned() == []
    row = instance(db_engine, req.allocation_id)
    assert (row.status, row.phase) == ("terminated", "terminated") and row.terminated_at is not None


async def test_terminate_while_allocating_cancels_and_compensates(temporal_client: Client,
                                                                  fake_cloud: FakeCloud, make_request: Any,
                                                                  db_engine: sa.Engine) -> None:
    fake_cloud.boot_delay = 30
    req = make_request()
    handle = await start_allocate(temporal_client, req)
    await wait_phase(handle, Phase.WAIT_RUNNING)

    await terminate(temporal_client, req.allocation_id)

    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert await owned() == [] and len(fake_cloud.machines) == 1
    assert instance(db_engine, req.allocation_id).status == "terminated"


async def test_terminate_finds_the_machine_by_key_when_the_ref_was_never_recorded(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    # The create answer is delayed: cancel lands while the cloud already made the machine.
    fake_cloud.add_fault("create", "latency", when="after", seconds=3)
    req = make_request()
    handle = await start_allocate(temporal_client, req)
    await wait_phase(handle, Phase.CREATE)
    await terminate(temporal_client, req.allocation_id)
    assert (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
    assert await owned() == [] and len(fake_cloud.machines) == 1


async def test_connect_records_account_or_reason(temporal_client: Client, fake_cloud: FakeCloud,
                                                 db_engine: sa.Engine, secret_box: SecretBox) -> None:
    with Session(db_engine) as s:
        good = add(s, secret_box, "good")
        bad = add(s, secret_box, "nope")
    results = {}
    for cid in (good, bad):
        results[cid] = await temporal_client.execute_workflow(
            "ConnectWorkflow", ConnectRequest(connection_id=cid), id=f"connect-{cid}", task_queue=TASK_QUEUE,
            result_type=ConnectResult)
    assert results[good].ok and results[good].account == "fake-account"
    assert not results[bad].ok and "invalid api key" in (results[bad].reason or "")
    with Session(db_engine) as s:
        g, b = s.get(Connection, good), s.get(Connection, bad)
        assert g is not None and (g.status, g.account) == ("connected", "fake-account")
        assert b is not None and b.status == "failed" and "invalid api key" in (b.error or "")


async def test_connect_gives_up_on_an_unreachable_cloud(temporal_client: Client, fake_cloud: FakeCloud,
                                                        db_engine: sa.Engine, secret_box: SecretBox) -> None:
    fake_cloud.add_fault("verify", "transient", times=-1)
    with Session(db_engine) as s:
        cid = add(s, secret_box, "good")
    result = await temporal_client.execute_workflow(
        "ConnectWorkflow", ConnectRequest(connection_id=cid), id=f"connect-{cid}", task_queue=TASK_QUEUE,
        result_type=ConnectResult)
    assert not result.ok and "503" in (result.reason or "")

"""TerminateWorkflow, ConnectWorkflow and DisconnectWorkflow on the dev server, FakeInMemoryProvider."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowExecutionStatus

from messages.allocation import TerminateRequest, TerminateResult
from messages.connection import ConnectRequest, ConnectResult, DisconnectRequest, DisconnectResult
from messages.enums import Phase
from store import repo
from store.models import Connection, Instance
from store.secrets import SecretBox
from tests.fakes import FakeCloud
from tests.workflows.conftest import FAST, TASK_QUEUE, start_allocate, wait_phase
from tests.workflows.test_allocate import owned

pytestmark = pytest.mark.devserver


async def terminate(client: Client, allocation_id: str) -> TerminateResult:
    return await client.execute_workflow("TerminateWorkflow", TerminateRequest(allocation_id=allocation_id,
                                                                              timing=FAST),
                                         id=f"terminate-{allocation_id}", task_queue=TASK_QUEUE,
                                         result_type=TerminateResult)


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


def connect_request(box: SecretBox, api_key: str) -> ConnectRequest:
    cid = repo.new_id()
    return ConnectRequest(connection_id=cid, provider="fake", name=f"c-{cid}",
                          sealed_credentials=box.seal({"api_key": api_key}).decode())


async def connect(client: Client, req: ConnectRequest) -> ConnectResult:
    return await client.execute_workflow("ConnectWorkflow", req, id=f"connect-{req.connection_id}",
                                         task_queue=TASK_QUEUE, result_type=ConnectResult)


async def test_connect_saves_only_verified_credentials(temporal_client: Client, fake_cloud: FakeCloud,
                                                       db_engine: sa.Engine, secret_box: SecretBox) -> None:
    good, bad = connect_request(secret_box, "good"), connect_request(secret_box, "nope")
    ok, refused = await connect(temporal_client, good), await connect(temporal_client, bad)

    assert ok.ok and ok.account == "fake-account"
    assert not refused.ok and "invalid api key" in (refused.reason or "")
    with Session(db_engine) as s:
        g = s.get(Connection, good.connection_id)
        assert g is not None and (g.status, g.account) == ("connected", "fake-account")
        assert secret_box.open(g.secret) == {"api_key": "good"}  # stored sealed, as it came
        assert s.get(Connection, bad.connection_id) is None  # nothing half-verified is stored


async def test_connect_gives_up_on_an_unreachable_cloud(temporal_client: Client, fake_cloud: FakeCloud,
                                                        db_engine: sa.Engine, secret_box: SecretBox) -> None:
    fake_cloud.add_fault("verify", "transient", times=-1)
    req = connect_request(secret_box, "good")
    result = await connect(temporal_client, req)
    assert not result.ok and "503" in (result.reason or "")
    with Session(db_engine) as s:
        assert s.get(Connection, req.connection_id) is None


async def test_connect_history_holds_no_credential_in_clear(temporal_client: Client, fake_cloud: FakeCloud,
                                                            secret_box: SecretBox) -> None:
    req = connect_request(secret_box, "good")
    await connect(temporal_client, req)
    history = await temporal_client.get_workflow_handle(f"connect-{req.connection_id}").fetch_history()
    text = history.to_json()
    assert "api_key" not in text and '"good"' not in text


async def test_disconnect_terminates_live_instances_then_deletes_the_connection(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, fake_connection: str,
        db_engine: sa.Engine) -> None:
    req = make_request()
    await (await start_allocate(temporal_client, req)).result()
    assert len(await owned()) == 1

    result = await temporal_client.execute_workflow(
        "DisconnectWorkflow", DisconnectRequest(connection_id=fake_connection, timing=FAST),
        id=f"disconnect-{fake_connection}", task_queue=TASK_QUEUE, result_type=DisconnectResult)

    assert result.terminated == [req.allocation_id]
    assert await owned() == []
    assert instance(db_engine, req.allocation_id).status == "terminated"
    with Session(db_engine) as s:
        assert s.get(Connection, fake_connection) is None

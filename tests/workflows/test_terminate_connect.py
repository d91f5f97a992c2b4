"""TerminateWorkflow, ConnectWorkflow and DisconnectWorkflow on the dev server, FakeInMemoryProvider."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from messages import workflows as wf
from messages.allocation import AllocationState, MachineLost
from messages.connection import ConnectRequest, ConnectResult, DisconnectRequest, DisconnectResult
from messages.enums import Phase
from store import ids
from store.models import Connection, Instance
from store.secrets import SecretBox
from tests import recorded
from tests.eventually import eventually
from tests.fakes import FakeCloud
from tests.workflows.conftest import FAST, TASK_QUEUE, settled, start_allocate, terminate, wait_phase
from tests.workflows.test_allocate import owned


def instance(engine: sa.Engine, allocation_id: str) -> Instance:
    with Session(engine) as s:
        row = s.get(Instance, allocation_id)
        assert row is not None
        return row


async def test_terminate_a_ready_machine_waits_until_gone(temporal_client: Client, fake_cloud: FakeCloud,
                                                         make_request: Any, db_engine: sa.Engine) -> None:
    req = make_request()
    handle = await start_allocate(temporal_client, req)
    await settled(handle)
    assert len(await owned()) == 1

    first, second = await asyncio.gather(terminate(temporal_client, req.allocation_id),
                                         terminate(temporal_client, req.allocation_id))

    assert first.phase == second.phase == Phase.TERMINATED  # both callers waited for the one teardown
    assert await owned() == []
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    row = instance(db_engine, req.allocation_id)
    assert (row.status, row.phase) == ("terminated", "terminated") and row.terminated_at is not None
    with pytest.raises(RPCError):  # closed: the API treats this as "nothing left to terminate"
        await terminate(temporal_client, req.allocation_id)


async def test_terminate_while_allocating_stops_and_compensates(temporal_client: Client,
                                                                fake_cloud: FakeCloud, make_request: Any,
                                                                db_engine: sa.Engine) -> None:
    fake_cloud.boot_delay = 30
    req = make_request()
    handle = await start_allocate(temporal_client, req)
    await wait_phase(handle, Phase.WAIT_RUNNING)

    st = await terminate(temporal_client, req.allocation_id)

    assert st.phase == Phase.TERMINATED and st.attempts[-1].outcome == "cancelled" and st.error is None
    assert (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED
    assert await owned() == [] and len(fake_cloud.machines) == 1
    assert instance(db_engine, req.allocation_id).status == "terminated"


async def test_terminate_finds_the_machine_by_key_when_the_ref_was_never_recorded(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    # The create answer is delayed: the terminate lands while the cloud already made the machine.
    fake_cloud.add_fault("create", "latency", when="after", seconds=3)
    req = make_request()
    handle = await start_allocate(temporal_client, req)
    await wait_phase(handle, Phase.CREATE)
    # the cloud has made it; its answer is still held back
    await eventually(lambda: fake_cloud.machines, within=30, what="the cloud to make the machine")
    st = await terminate(temporal_client, req.allocation_id)
    assert st.phase == Phase.TERMINATED and st.ref is None
    assert await owned() == [] and len(fake_cloud.machines) == 1


async def test_a_lost_machine_is_recorded_with_the_reason_and_cleaned_up(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    req = make_request()
    handle = await start_allocate(temporal_client, req)
    await settled(handle)
    await handle.signal(wf.ALLOCATION.machine_lost.name, MachineLost(reason="preempted by the cloud"))
    st = await handle.result()
    assert st.phase == Phase.LOST and st.error == "preempted by the cloud"
    assert await owned() == []  # a broken machine still bills: it is terminated too
    row = instance(db_engine, req.allocation_id)
    assert (row.status, row.error) == ("lost", "preempted by the cloud")


async def test_a_long_lived_machine_continues_as_new_and_keeps_its_state(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any) -> None:
    req = make_request(timing=FAST.model_copy(update={"continue_as_new_after_s": 0.5}))
    handle = await start_allocate(temporal_client, req)
    ready = await settled(handle)
    first_run = (await handle.describe()).run_id
    async def next_run() -> bool:
        return (await handle.describe()).run_id != first_run

    await eventually(next_run, within=30, what=f"{handle.id} to continue as new")
    latest = temporal_client.get_workflow_handle(handle.id, result_type=AllocationState)
    carried = await latest.query(wf.ALLOCATION.state.name, result_type=AllocationState)
    assert carried.ref == ready.ref and carried.phase == Phase.READY and carried.attempts == ready.attempts
    st = await terminate(temporal_client, req.allocation_id)  # the fresh run still owns the machine
    assert st.phase == Phase.TERMINATED and await owned() == []



def connect_request(box: SecretBox, api_key: str) -> ConnectRequest:
    cid = ids.new_id()
    return ConnectRequest(connection_id=cid, provider="fake", name=f"c-{cid}",
                          sealed_credentials=box.seal({"api_key": api_key}).decode())


async def connect(client: Client, req: ConnectRequest) -> ConnectResult:
    return await client.execute_workflow(wf.CONNECT.name, req, id=f"connect-{req.connection_id}",
                                         task_queue=TASK_QUEUE, result_type=ConnectResult)


async def test_connect_saves_only_verified_credentials(temporal_client: Client, fake_cloud: FakeCloud,
                                                       db_engine: sa.Engine, secret_box: SecretBox) -> None:
    good, bad = connect_request(secret_box, "good"), connect_request(secret_box, "nope")
    ok, refused = await connect(temporal_client, good), await connect(temporal_client, bad)
    await recorded.replays(temporal_client, f"connect-{good.connection_id}", f"connect-{bad.connection_id}")

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
    await recorded.replays(temporal_client, f"connect-{req.connection_id}")
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
    await settled(await start_allocate(temporal_client, req))
    assert len(await owned()) == 1

    result = await temporal_client.execute_workflow(
        wf.DISCONNECT.name, DisconnectRequest(connection_id=fake_connection, timing=FAST),
        id=f"disconnect-{fake_connection}", task_queue=TASK_QUEUE, result_type=DisconnectResult)

    assert result.terminated == [req.allocation_id]
    await recorded.replays(temporal_client, f"disconnect-{fake_connection}")
    assert await owned() == []
    assert instance(db_engine, req.allocation_id).status == "terminated"
    with Session(db_engine) as s:
        assert s.get(Connection, fake_connection) is None

"""POST /connections through a real Temporal dev server and the real worker (in-process):
ConnectWorkflow's activities verify the sealed credentials and save the connection only if they work."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from pydantic import BaseModel
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from activities.deps import ActivityDeps
from api.app import create_app
from api.deps import AppDeps
from api.temporal import TemporalGateway
from messages.workflows import WorkflowRef
from store.secrets import SecretBox
from tests.api.conftest import GOOD_KEY, TOKEN
from tests.eventually import eventually
from worker import build_worker


@pytest.fixture
async def real_client(engine: sa.Engine, box: SecretBox,
                      temporal_client: Client) -> AsyncIterator[httpx.AsyncClient]:
    queue = f"api-test-{uuid.uuid4().hex[:8]}"
    gateway = TemporalGateway("unused", "default", queue, keys=box.keys)
    gateway._client = temporal_client  # the session's dev server, already connected
    deps = AppDeps(engine=engine, box=box, api_token=TOKEN, installation_id="inst0001", workflows=gateway,
                   connect_timeout_s=30)
    worker = build_worker(temporal_client, ActivityDeps(engine=engine, box=box, installation_id="inst0001"),
                          task_queue=queue)
    async with worker, httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(deps)),
                                         base_url="http://api",
                                         headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


async def test_connect_through_temporal(real_client: httpx.AsyncClient) -> None:
    r = await real_client.post("/api/compute/connections",
                               json={"provider": "fakecloud", "credentials": {"api_key": GOOD_KEY}})
    assert r.status_code == 201, r.text
    assert r.json()["status"] == "connected" and r.json()["account"] == "fake-account-7"
    r = await real_client.post("/api/compute/connections",
                               json={"provider": "fakecloud", "credentials": {"api_key": "bad"}})
    assert r.status_code == 400 and "refused the API key" in r.json()["detail"], r.text
    listed = (await real_client.get("/api/compute/connections")).json()["items"]
    assert [c["status"] for c in listed] == ["connected"]  # the failed one was removed


# --------------------------------------------------------------------------- the gateway's id rules


class Note(BaseModel):
    text: str


@workflow.defn(name="HoldWorkflow", sandboxed=False)
class HoldWorkflow:
    """Runs until signalled, then returns its input's text: which run answered is visible."""

    def __init__(self) -> None:
        self._go = False

    @workflow.run
    async def run(self, note: Note) -> str:
        await workflow.wait_condition(lambda: self._go)
        return note.text

    @workflow.signal
    def go(self) -> None:
        self._go = True


FAKE_HOLD: WorkflowRef[Note, str] = WorkflowRef("HoldWorkflow", Note, str)  # a test's own workflow


@pytest.fixture
async def hold(temporal_client: Client, box: SecretBox) -> AsyncIterator[TemporalGateway]:
    queue = f"gateway-test-{uuid.uuid4().hex[:8]}"
    gateway = TemporalGateway("unused", "default", queue, keys=box.keys)
    gateway._client = temporal_client
    async with Worker(temporal_client, task_queue=queue, workflows=[HoldWorkflow]):
        yield gateway


async def test_start_once_joins_a_running_run_and_never_reruns_a_closed_one(
        hold: TemporalGateway, temporal_client: Client) -> None:
    wid = f"hold-{uuid.uuid4().hex[:8]}"
    assert await hold.start(FAKE_HOLD, Note(text="first"), workflow_id=wid, once=True)
    first_run = (await temporal_client.get_workflow_handle(wid).describe()).run_id
    assert await hold.start(FAKE_HOLD, Note(text="second"), workflow_id=wid, once=True)  # joined
    handle = temporal_client.get_workflow_handle(wid)
    assert (await handle.describe()).run_id == first_run
    await handle.signal(HoldWorkflow.go)
    assert await handle.result() == "first"  # the retry's input did not replace the first one
    # Closed: a start with `once` starts nothing (an allocation id never provisions twice).
    assert await hold.start(FAKE_HOLD, Note(text="third"), workflow_id=wid, once=True) is False
    assert (await handle.describe()).run_id == first_run


async def test_execute_attach_answers_with_the_running_runs_result(
        hold: TemporalGateway, temporal_client: Client) -> None:
    wid = f"hold-{uuid.uuid4().hex[:8]}"
    assert await hold.start(FAKE_HOLD, Note(text="first attempt"), workflow_id=wid)
    attached = asyncio.Event()

    class Spy:
        """The client, telling when execute's start has answered (the retry then waits on a run)."""

        def __getattr__(self, name: str) -> Any:
            return getattr(temporal_client, name)

        async def execute_workflow(self, *args: Any, **kwargs: Any) -> Any:
            handle = await temporal_client.start_workflow(*args, **kwargs)
            attached.set()
            return await handle.result()

    hold._client = Spy()
    waiting = asyncio.create_task(hold.execute(FAKE_HOLD, Note(text="retry"), workflow_id=wid,
                                               execution_timeout_s=30, attach=True))
    await asyncio.wait_for(attached.wait(), 30)
    await temporal_client.get_workflow_handle(wid).signal(HoldWorkflow.go)
    assert await asyncio.wait_for(waiting, 30) == "first attempt"


async def test_open_runs_lists_the_running_runs_of_the_types_asked_for(
        hold: TemporalGateway, temporal_client: Client) -> None:
    """What the drain check (GET /retired-workflows) asks Temporal's visibility."""
    wid = f"hold-{uuid.uuid4().hex[:8]}"
    assert await hold.start(FAKE_HOLD, Note(text="open"), workflow_id=wid)

    async def listed() -> list[str]:
        return [r.workflow_id for r in await hold.open_runs([FAKE_HOLD.name]) if r.workflow_id == wid]

    assert await eventually(listed, within=30, what="the open run listed")  # visibility follows the start
    assert [r for r in await hold.open_runs(["NoSuchWorkflow"]) if r.workflow_id == wid] == []
    await temporal_client.get_workflow_handle(wid).signal(HoldWorkflow.go)
    await eventually(listed, within=30, until=lambda ids: ids == [], what="the closed run gone from the list")

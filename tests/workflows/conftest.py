"""Workflow tests: an in-process worker (real activities) against FakeInMemoryProvider."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncssh
import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from activities.deps import ActivityDeps
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, AllocationState, Timing
from messages.enums import Phase
from messages.ids import allocation_workflow_id
from providers import registry
from settings import get_settings
from store import connections
from store.secrets import SecretBox
from tests.eventually import eventually
from tests.fakes import FakeCloud, FakeInMemoryProvider
from worker import build_worker

TASK_QUEUE = "gpuprov-workflow-tests"
INSTALLATION = "wftest01"
USER_KEY = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()

# Fast enough for tests, slow enough for a loaded 2-core machine.
FAST = Timing(heartbeat_timeout_s=3, poll_interval_s=0.2, call_timeout_s=30, boot_timeout_s=60,
              ssh_timeout_s=20, k3s_timeout_s=30, max_retry_interval_s=1)
UNREACHABLE_K3S_INSTALLER = "http://127.0.0.1:9/k3s-install.sh"  # port 9 (discard): nothing listens


@pytest.fixture(scope="session")
def activity_deps(db_engine: sa.Engine, secret_box: SecretBox, temporal_client: Client) -> ActivityDeps:
    # A machine without k3s downloads the installer from here: a loopback port nothing listens on, so a
    # test never reaches for get.k3s.io (traffic stays on loopback) and the download fails at once.
    return ActivityDeps(engine=db_engine, box=secret_box, installation_id=INSTALLATION,
                        client=temporal_client, k3s_install_url=UNREACHABLE_K3S_INSTALLER)


@pytest.fixture(scope="session")
def fake_registered() -> Iterator[None]:
    registry.register_for_tests(FakeInMemoryProvider)
    yield
    registry.unregister_for_tests(FakeInMemoryProvider.id)


@pytest.fixture(scope="session")
async def wf_worker(temporal_client: Client, activity_deps: ActivityDeps,
                    fake_registered: None) -> AsyncIterator[None]:
    worker = build_worker(temporal_client, activity_deps, task_queue=TASK_QUEUE)
    async with worker:
        yield


@pytest.fixture
async def fake_cloud(wf_worker: None) -> AsyncIterator[FakeCloud]:
    cloud = FakeInMemoryProvider.cloud
    await cloud.reset()
    yield cloud
    await cloud.reset()


@pytest.fixture
def fake_connection(db_engine: sa.Engine, secret_box: SecretBox) -> str:
    with Session(db_engine) as s:
        conn = connections.add_connection(s, secret_box, provider="fake", name="fake",
                                          credentials={"api_key": "good"})
        return conn.id


@pytest.fixture
def make_request(fake_connection: str) -> Any:
    def make(**kw: Any) -> AllocateRequest:
        fields: dict[str, Any] = dict(
            allocation_id=f"al-{uuid.uuid4().hex[:8]}", connection_id=fake_connection, cloud="fake",
            ssh_public_keys=[USER_KEY], k3s=False, timing=FAST)
        fields.update(kw)
        return AllocateRequest(**fields)
    return make


async def start_allocate(client: Client, req: AllocateRequest) -> WorkflowHandle[Any, AllocationState]:
    return await client.start_workflow(wf.ALLOCATION.name, AllocationInput(request=req),
                                       id=allocation_workflow_id(req.allocation_id), task_queue=TASK_QUEUE,
                                       result_type=AllocationState)


async def settled(handle: WorkflowHandle[Any, AllocationState], within: float = 60) -> AllocationState:
    """The state once the allocation is ready; if the workflow closes instead, its result (which
    raises WorkflowFailureError when it failed)."""
    async def ready_or_closed() -> AllocationState | None:
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            return await handle.result()
        st = await handle.query(wf.ALLOCATION.state.name, result_type=AllocationState)
        return st if st.phase == Phase.READY else None

    return await eventually(ready_or_closed, within=within, what=f"allocation {handle.id} ready (or closed)")


def setting_for_the_test(monkeypatch: pytest.MonkeyPatch, env: str, value: str) -> Iterator[None]:
    """A fixture's body: the GPUPROV_* setting `env` at `value` while the test runs (get_settings
    reads it afresh), then as it was."""
    monkeypatch.setenv(env, value)
    get_settings.cache_clear()
    yield
    monkeypatch.delenv(env)
    get_settings.cache_clear()


Handles = list[WorkflowHandle[Any, AllocationState]]


async def ready_fake_allocations(client: Client, connection_id: str, *, queue: str, count: int,
                                 prefix: str) -> tuple[Handles, list[AllocationState]]:
    """`count` allocations on the fake cloud (no k3s, FAST timing), started one after another on `queue`
    and each settled ready (asserted): their handles and their ready states."""
    handles = []
    for _ in range(count):
        aid = f"{prefix}-{uuid.uuid4().hex[:8]}"
        handles.append(await client.start_workflow(
            wf.ALLOCATION.name, AllocationInput(request=AllocateRequest(
                allocation_id=aid, connection_id=connection_id, cloud="fake", ssh_public_keys=[USER_KEY],
                k3s=False, timing=FAST)),
            id=allocation_workflow_id(aid), task_queue=queue, result_type=AllocationState))
    states = list(await asyncio.gather(*(settled(h) for h in handles)))
    assert [s.phase for s in states] == [Phase.READY] * count, states
    return handles, states


async def terminate_all(client: Client, states: list[AllocationState]) -> None:
    """Each allocation's `terminate` update at once; every one ends terminated (asserted)."""
    ended = await asyncio.gather(*(terminate(client, s.allocation_id) for s in states))
    assert [s.phase for s in ended] == [Phase.TERMINATED] * len(states)


async def terminate(client: Client, allocation_id: str) -> AllocationState:
    """The allocation's `terminate` update: returns once the cloud shows the machine gone."""
    handle = client.get_workflow_handle(allocation_workflow_id(allocation_id))
    return await handle.execute_update(wf.ALLOCATION.terminate.name, result_type=AllocationState)


async def wait_phase(handle: WorkflowHandle[Any, Any], phase: Phase) -> AllocationState:
    """Poll the `state` query until the workflow reaches `phase`."""
    return await eventually(lambda: handle.query(wf.ALLOCATION.state.name, result_type=AllocationState),
                            until=lambda st: st.phase == phase, within=30,
                            what=f"{handle.id} in phase {phase}")

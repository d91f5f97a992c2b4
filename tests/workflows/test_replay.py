"""Replay real histories (happy path, failover, compensation, cancel, terminate) against the
current workflow code, so a change that breaks determinism fails here, not in production."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.worker import Replayer

from messages.enums import Phase
from tests.conftest import TEST_SECRET_KEY
from tests.fakes import FakeCloud
from tests.workflows.conftest import TASK_QUEUE, settled, start_allocate, terminate, wait_phase
from worker import WORKFLOWS, workflow_runner
from workflows.converter import data_converter

HISTORIES = Path(__file__).resolve().parent / "histories"
CURRENT = HISTORIES / "v3"  # what GPUPROV_RECORD_HISTORIES=1 rewrites; older versions stay as they are


async def test_histories_replay_deterministically(temporal_client: Client, fake_cloud: FakeCloud,
                                                  make_request: Any) -> None:
    ready = make_request(gpu="a10")
    fake_cloud.add_fault("create", "capacity", scope="fake/r1")
    await settled(await start_allocate(temporal_client, ready))

    fake_cloud.add_fault("create", "die_at_boot")
    with pytest.raises(WorkflowFailureError):
        await settled(await start_allocate(temporal_client, make_request()))

    fake_cloud.boot_delay = 30
    cancelled = await start_allocate(temporal_client, make_request())
    await wait_phase(cancelled, Phase.WAIT_RUNNING)
    await terminate(temporal_client, cancelled.id.removeprefix("allocation-"))
    await terminate(temporal_client, ready.allocation_id)

    listed = temporal_client.list_workflows(f"TaskQueue = '{TASK_QUEUE}'")
    histories = [await temporal_client.get_workflow_handle(w.id, run_id=w.run_id).fetch_history()
                 async for w in listed]
    types = {h.events[0].workflow_execution_started_event_attributes.workflow_type.name for h in histories}
    assert "AllocationWorkflow" in types and len(histories) >= 3

    assert await replay_failures(histories) == {}
    if os.environ.get("GPUPROV_RECORD_HISTORIES"):
        # Refresh the committed histories (only when a change is *meant* to alter workflow code paths).
        CURRENT.mkdir(exist_ok=True)
        for old in CURRENT.glob("*.json"):
            old.unlink()
        for h in histories:
            (CURRENT / f"{h.workflow_id}.json").write_text(h.to_json())


async def replay_failures(histories: list[WorkflowHistory],
                          workflows: list[type] = WORKFLOWS) -> dict[str, str]:
    # The codec's converter, as the worker's: encrypted histories decode, older plain ones pass through.
    replayer = Replayer(workflows=workflows, data_converter=data_converter([TEST_SECRET_KEY]),
                        workflow_runner=workflow_runner())
    failures = {}
    for history in histories:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failures[history.workflow_id] = repr(result.replay_failure)
    return failures


def committed_histories() -> list[WorkflowHistory]:
    return [WorkflowHistory.from_json(p.stem, p.read_text()) for p in sorted(HISTORIES.glob("*/*.json"))]


async def test_committed_histories_replay_against_current_code() -> None:
    """Histories recorded by an earlier version: a change that breaks running workflows fails here."""
    histories = committed_histories()
    types = {h.events[0].workflow_execution_started_event_attributes.workflow_type.name for h in histories}
    assert {"AllocateWorkflow", "TerminateWorkflow", "AllocationWorkflow"} <= types
    assert await replay_failures(histories) == {}


@workflow.defn(name="AllocateWorkflow", sandboxed=False)
class NondeterministicFakeAllocateWorkflow:
    """A deliberately incompatible 'new version': it sleeps before doing what the old one did."""

    @workflow.run
    async def run(self, req: Any) -> None:
        await workflow.sleep(1)


async def test_replay_guard_catches_an_incompatible_change() -> None:
    allocate = [h for h in committed_histories()
                if h.events[0].workflow_execution_started_event_attributes.workflow_type.name
                == "AllocateWorkflow"]
    failures = await replay_failures(allocate[:1], workflows=[NondeterministicFakeAllocateWorkflow])
    assert len(failures) == 1 and "Nondeterminism" in next(iter(failures.values()))

"""Replay real histories (happy path, failover, compensation, cancel, terminate) against the
current workflow code, so a change that breaks determinism fails here, not in production."""

from __future__ import annotations

from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Replayer

from tests.fakes import FakeCloud
from tests.workflows.conftest import TASK_QUEUE, start_allocate, wait_phase
from tests.workflows.test_terminate_connect import terminate
from worker import WORKFLOWS, workflow_runner
from workflows.converter import DATA_CONVERTER
from workflows.models import Phase

pytestmark = pytest.mark.devserver


async def test_histories_replay_deterministically(temporal_client: Client, fake_cloud: FakeCloud,
                                                  make_request: Any) -> None:
    ready = make_request(gpu="a10")
    fake_cloud.add_fault("create", "capacity", scope="fake/r1")
    await (await start_allocate(temporal_client, ready)).result()

    fake_cloud.add_fault("create", "die_at_boot")
    with pytest.raises(WorkflowFailureError):
        await (await start_allocate(temporal_client, make_request())).result()

    fake_cloud.boot_delay = 30
    cancelled = await start_allocate(temporal_client, make_request())
    await wait_phase(cancelled, Phase.WAIT_RUNNING)
    await terminate(temporal_client, cancelled.id.removeprefix("allocate-"))
    await terminate(temporal_client, ready.allocation_id)

    listed = temporal_client.list_workflows(f"TaskQueue = '{TASK_QUEUE}'")
    histories = [await temporal_client.get_workflow_handle(w.id, run_id=w.run_id).fetch_history()
                 async for w in listed]
    types = {h.events[0].workflow_execution_started_event_attributes.workflow_type.name for h in histories}
    assert {"AllocateWorkflow", "TerminateWorkflow"} <= types and len(histories) >= 5

    replayer = Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER, workflow_runner=workflow_runner())
    failures = {}
    for history in histories:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
        if result.replay_failure is not None:
            failures[history.workflow_id] = repr(result.replay_failure)
    assert failures == {}

"""Committed workflow histories (tests/workflows/histories/README.md), recorded from tests' real runs.

A test that runs a workflow passes its ids to `replays`: each run's history is replayed against the
current code, and with GPUPROV_RECORD_HISTORIES=1 it is also kept in `BATCH`, the folder of the
current round of recordings, which tests/workflows/test_replay.py replays on every run. A later
round records into a new folder (named for its date): a folder once committed is never rewritten.
The histories hold the tests' payloads as the worker wrote them, encrypted by the codec."""

from __future__ import annotations

import os
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from tests.eventually import eventually
from worker import WORKFLOWS, workflow_runner

HISTORIES = Path(__file__).resolve().parent / "workflows" / "histories"
# The current round (2026-12-02 -r2 to -r4 and 2026-12-03 -r5 to -r7 are committed: never rewritten).
BATCH = HISTORIES / "2026-12-08-r8"
# The old branch of LAUNCH_QUEUE_PATCH (workflows/allocation.py), recorded by a FAKE pre-patch worker
# (tests/workflows/test_end_to_end.py::test_a_run_from_before_the_launch_queue_patch_…): one round of
# its own, beside BATCH, since BATCH is committed.
PREPATCH = HISTORIES / "2026-12-02-prepatch"

CLOSED = {EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
          EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
          EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW}


async def closed_history(client: Client, workflow_id: str, within_s: float = 30) -> WorkflowHistory:
    """The latest run's history once it has closed. Callers see a run's end through the store, which
    its last activity writes a moment before the workflow closes (a fresh-clone run fetched a job's
    history between the two: "has not closed")."""
    async def fetched() -> WorkflowHistory:
        return await client.get_workflow_handle(workflow_id).fetch_history()

    history: WorkflowHistory = await eventually(
        fetched, until=lambda h: h.events[-1].event_type in CLOSED, within=within_s,
        what=f"{workflow_id} closed")
    return history


def recording() -> bool:
    return bool(os.environ.get("GPUPROV_RECORD_HISTORIES"))


async def replays(client: Client, *workflow_ids: str, into: Path | None = None) -> list[WorkflowHistory]:
    """The latest run of each workflow, closed, replayed against the current code (a replay failure
    raises); kept in `into` (default BATCH) when recording."""
    histories = [await closed_history(client, w) for w in workflow_ids]
    replayer = Replayer(workflows=WORKFLOWS, workflow_runner=workflow_runner(client.data_converter),
                        data_converter=client.data_converter)
    for history in histories:
        await replayer.replay_workflow(history)
    if recording():
        folder = into or BATCH
        folder.mkdir(exist_ok=True)
        for history in histories:
            (folder / f"{history.workflow_id}.json").write_text(history.to_json())
    return histories

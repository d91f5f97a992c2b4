"""The worker's sandboxed runner compiles the sandbox's glue code once (workflows/sandbox_runner.py):
it is the runner in use with this SDK, committed histories replay through it, and a second replay of
the same history compiles nothing more."""

from __future__ import annotations

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from tests import recorded
from tests.conftest import TEST_SECRET_KEY
from worker import WORKFLOWS, workflow_runner
from workflows import sandbox_runner
from workflows.converter import data_converter


def test_the_worker_runs_workflows_compiling_once() -> None:
    """Fails if a temporalio upgrade moved the private `_Instance._run_code` this relies on: the
    worker would then run the SDK's runner as it is (compiling each snippet each time)."""
    assert type(workflow_runner()) is sandbox_runner.CompiledOnceRunner


async def test_a_second_replay_compiles_nothing() -> None:
    path = sorted(recorded.HISTORIES.glob("2026-12-03-r7/allocation-*.json"))[0]
    history = WorkflowHistory.from_json(path.stem, path.read_text())
    replayer = Replayer(workflows=WORKFLOWS, data_converter=data_converter([TEST_SECRET_KEY]),
                        workflow_runner=workflow_runner())
    await replayer.replay_workflow(history)
    first = sandbox_runner.compiled.cache_info()
    await replayer.replay_workflow(history)
    second = sandbox_runner.compiled.cache_info()
    assert first.misses > 0 and first.currsize > 0  # the runs went through it
    assert second.misses == first.misses  # nothing compiled again
    assert second.hits - first.hits >= 3  # the run's creation, its activations, its payloads' contexts

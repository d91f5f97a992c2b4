"""A worker takes at most `GPUPROV_WORKFLOW_TASK_SLOTS` workflow tasks at once (settings.workflow_task_slots):
the rest wait on the server, not in the worker, and every allocation still ends as it would."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from activities.deps import ActivityDeps
from tests.fakes import FakeInMemoryProvider
from tests.workflows.conftest import ready_fake_allocations, setting_for_the_test, terminate_all
from worker import build_worker
from workflows.sandbox_runner import CompiledOnceRunner as WorkerRunner  # worker.workflow_runner's

SLOTS = 2
STARTED = 5
HOLD_S = 0.5  # well inside the SDK's 2 s deadlock detector, which times each activation


@pytest.fixture
def two_slots(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield from setting_for_the_test(monkeypatch, "GPUPROV_WORKFLOW_TASK_SLOTS", str(SLOTS))


class ActivationsAtOnce:
    """The most workflow activations the worker ran at the same moment. Each run's first one holds
    until more than SLOTS run at once or HOLD_S passes: a worker that took more tasks than its slots
    would run them side by side within that hold (five are started back to back)."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.changed = threading.Condition()

    def wrap(self, instance: Any) -> Any:
        activate, first = instance.activate, [True]

        def counted(act: Any) -> Any:
            with self.changed:
                self.running += 1
                self.peak = max(self.peak, self.running)
                self.changed.notify_all()
                if first[0]:
                    first[0] = False
                    self.changed.wait_for(lambda: self.running > SLOTS, timeout=HOLD_S)
            try:
                return activate(act)
            finally:
                with self.changed:
                    self.running -= 1

        instance.activate = counted
        return instance


@pytest.fixture
def at_once(monkeypatch: pytest.MonkeyPatch) -> ActivationsAtOnce:
    seen = ActivationsAtOnce()
    original = WorkerRunner.create_instance
    monkeypatch.setattr(WorkerRunner, "create_instance",
                        lambda self, det: seen.wrap(original(self, det)))
    return seen


async def test_a_worker_runs_no_more_workflow_tasks_at_once_than_its_slots_and_every_allocation_ends(
        temporal_client: Client, activity_deps: ActivityDeps, fake_registered: None, fake_connection: str,
        two_slots: None, at_once: ActivationsAtOnce) -> None:
    cloud = FakeInMemoryProvider.cloud
    await cloud.reset()
    queue = f"wf-slots-{uuid.uuid4().hex[:8]}"
    worker = build_worker(temporal_client, activity_deps, task_queue=queue)
    assert worker.config()["max_concurrent_workflow_tasks"] == SLOTS
    try:
        async with worker:
            _, states = await ready_fake_allocations(temporal_client, fake_connection, queue=queue,
                                                     count=STARTED, prefix="ws")
            # The slots were used side by side, and never more of them than the setting allows.
            assert at_once.peak == SLOTS

            await terminate_all(temporal_client, states)
            assert cloud.live() == []
    finally:
        await cloud.reset()

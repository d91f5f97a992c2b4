"""The worker's sandboxed runner compiles the sandbox's glue code once (workflows/sandbox_runner.py):
it is the runner in use with this SDK, committed histories replay through it, and a second replay of
the same history compiles nothing more. Given a converter that ignores serialization contexts (the
project's), it answers them without entering the sandbox; given one bound to contexts, each payload
still gets its own."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import lru_cache
from types import CodeType

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHistory
from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    SerializationContext,
    WithSerializationContext,
)
from temporalio.worker import Replayer

from tests import recorded
from tests.conftest import TEST_SECRET_KEY
from worker import WORKFLOWS, workflow_runner
from workflows import sandbox_runner
from workflows.codec import EncryptionCodec
from workflows.converter import data_converter


def test_the_worker_runs_workflows_compiling_once() -> None:
    """Fails if a temporalio upgrade moved the private `_Instance._run_code` this relies on: the
    worker would then run the SDK's runner as it is (compiling each snippet each time)."""
    assert type(workflow_runner()) is sandbox_runner.CompiledOnceRunner


async def test_a_second_replay_compiles_nothing() -> None:
    history = allocation_history()
    replayer = Replayer(workflows=WORKFLOWS, data_converter=data_converter([TEST_SECRET_KEY]),
                        workflow_runner=workflow_runner())
    await replayer.replay_workflow(history)
    first = sandbox_runner.compiled.cache_info()
    await replayer.replay_workflow(history)
    second = sandbox_runner.compiled.cache_info()
    assert first.misses > 0 and first.currsize > 0  # the runs went through it
    assert second.misses == first.misses  # nothing compiled again
    assert second.hits - first.hits >= 3  # the run's creation, its activations, its payloads' contexts


def allocation_history() -> WorkflowHistory:
    path = sorted(recorded.HISTORIES.glob("2026-12-03-r7/allocation-*.json"))[0]
    return WorkflowHistory.from_json(path.stem, path.read_text())


class ContextBoundCodecFake(EncryptionCodec, WithSerializationContext):
    """The project's codec, but bound to a context as a context-aware codec is: `with_context` gives
    a new instance, and each one notes the context its payloads were decoded under."""

    def __init__(self, keys: Sequence[bytes], seen: list[SerializationContext | None],
                 context: SerializationContext | None = None) -> None:
        super().__init__(keys)
        self.keys, self.seen, self.context = keys, seen, context

    def with_context(self, context: SerializationContext) -> ContextBoundCodecFake:
        return ContextBoundCodecFake(self.keys, self.seen, context)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        self.seen.append(self.context)
        return await super().decode(payloads)


def test_the_projects_converter_ignores_context_and_a_bound_one_does_not() -> None:
    assert sandbox_runner.ignores_context(data_converter([TEST_SECRET_KEY]))
    bound = dataclasses.replace(data_converter([TEST_SECRET_KEY]),
                                payload_codec=ContextBoundCodecFake([TEST_SECRET_KEY], []))
    assert not sandbox_runner.ignores_context(bound)
    assert workflow_runner(data_converter([TEST_SECRET_KEY])).context_free  # type: ignore[attr-defined]
    assert not workflow_runner(bound).context_free  # type: ignore[attr-defined]
    assert not workflow_runner().context_free  # type: ignore[attr-defined]  # a Replayer's own converter


@pytest.mark.parametrize("given_the_converter", [True, False])
async def test_contexts_are_answered_outside_the_sandbox_only_when_the_converter_ignores_them(
        monkeypatch: pytest.MonkeyPatch, given_the_converter: bool) -> None:
    ran: list[str] = []

    @lru_cache(maxsize=128)
    def compiled(code: str) -> CodeType:
        return compile(code, "<string>", "exec")

    def noting(code: str) -> CodeType:
        ran.append(code)
        return compiled(code)

    monkeypatch.setattr(sandbox_runner, "compiled", noting)
    converter = data_converter([TEST_SECRET_KEY])
    replayer = Replayer(workflows=WORKFLOWS, data_converter=converter,
                        workflow_runner=workflow_runner(converter if given_the_converter else None))
    await replayer.replay_workflow(allocation_history())  # replays either way
    asked = sum("get_serialization_context" in code for code in ran)
    assert any("activate" in code for code in ran)  # the run went through this runner
    if given_the_converter:
        assert asked == 0
    else:
        assert asked >= 8  # one per payload sequence at least: the history's eight activities' results


async def test_a_converter_bound_to_contexts_gets_each_activitys_context() -> None:
    seen: list[SerializationContext | None] = []
    bound: DataConverter = dataclasses.replace(
        data_converter([TEST_SECRET_KEY]), payload_codec=ContextBoundCodecFake([TEST_SECRET_KEY], seen))
    replayer = Replayer(workflows=WORKFLOWS, data_converter=bound, workflow_runner=workflow_runner(bound))
    await replayer.replay_workflow(allocation_history())
    activities = {c.activity_type for c in seen if isinstance(c, ActivitySerializationContext)}
    assert {"plan_allocation", "create_instance", "wait_running"} <= activities

"""Temporal's sandboxed workflow runner, with the sandbox's glue code compiled once.

The sandbox runs each step into a workflow's sandbox — creating the run, every activation, each
payload sequence's serialization context — as a short source string through `exec`, which compiles
it anew every time: under bench (b)'s load that compiling was 5.8 % of the gpuprov worker's CPU
(py-spy, `_Instance._run_code`'s self time: the most of any one line but the cloud listings' JSON
decoding). The strings are the SDK's own fixed snippets, plus one import line per workflow class;
each is compiled once here and the code object is run, exactly as the string was (`exec` takes
either). Nothing a workflow runs, or the sandbox restricts, changes.

Before it encodes or decodes a payload sequence — three passes over each activation and each
completion (codec, external storage, storage references) — the SDK also asks the run, inside its
sandbox, which serialization context applies, to hand the matching converter to that sequence.
Entering the sandbox for that answer was 7.8 % of the worker's CPU under (b) (py-spy). When the
worker's data converter is the same object whatever the context (`ignores_context`: no component
bound to a context, no external storage — the project's own converter), every answer selects that
same converter, so the runner answers at once, outside the sandbox. A converter that does bind a
context (another deployment's codec, say) is asked through the sandbox as before.

It reaches into the SDK's private `_Instance` (temporalio 1.35). Should a later SDK change that,
`runner()` falls back to the SDK's runner as it is (tests/workflows/test_sandbox_runner.py fails
first, so the fallback is never silent in CI).
"""

from __future__ import annotations

import functools
from types import CodeType
from typing import Any

from temporalio.converter import (
    ActivitySerializationContext,
    DataConverter,
    SerializationContext,
    WorkflowSerializationContext,
)
from temporalio.converter._extstore import StorageDriverStoreContext
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox import _runner as sdk_runner


@functools.lru_cache(maxsize=128)  # the SDK's snippets and an import line per workflow class
def compiled(code: str) -> CodeType:
    return compile(code, "<string>", "exec")


def _supported() -> bool:
    instance = getattr(sdk_runner, "_Instance", None)
    return instance is not None and callable(getattr(instance, "_run_code", None))


if _supported():
    class _CompiledOnce(sdk_runner._Instance):
        def _run_code(self, code: str, **extra_globals: Any) -> None:
            super()._run_code(compiled(code), **extra_globals)  # type: ignore[arg-type]

    class _ContextFree(_CompiledOnce):
        """For a data converter that `ignores_context`: the SDK picks the context-free converter
        on None, which is then the very converter any context would have picked."""

        def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
            return None

        def get_external_store_context(self, command_info: Any) -> StorageDriverStoreContext:
            return StorageDriverStoreContext(target=None)  # the SDK's own answer when none is set


def ignores_context(converter: DataConverter) -> bool:
    """True when `converter` is the one the SDK would use under any serialization context: none of
    its components returns another instance for a context (`DataConverter.with_context` then
    returns the converter itself), and no external storage takes a store context."""
    if converter.external_storage is not None:
        return False
    samples = (WorkflowSerializationContext(namespace="default", workflow_id="w"),
               ActivitySerializationContext(namespace="default", workflow_id="w", workflow_type="W",
                                            activity_type="a", activity_task_queue="q", is_local=False,
                                            activity_id="1"))
    return all(converter.with_context(context) is converter for context in samples)


class CompiledOnceRunner(SandboxedWorkflowRunner):
    """SandboxedWorkflowRunner whose instances exec each glue snippet's code object, and answer
    the serialization context outside the sandbox when the converter ignores it."""

    def __init__(self, *, restrictions: SandboxRestrictions, context_free: bool = False) -> None:
        super().__init__(restrictions=restrictions)
        self.context_free = context_free

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        cls = _ContextFree if self.context_free else _CompiledOnce
        return cls(det, self.runner_class, self.restrictions)


def runner(restrictions: SandboxRestrictions,
           converter: DataConverter | None = None) -> SandboxedWorkflowRunner:
    """The sandboxed runner with these restrictions: compiling once where this SDK allows it, and
    answering contexts outside the sandbox when `converter` (the worker's) ignores them. Without a
    converter (a Replayer given its own), every context is asked of the sandbox."""
    if not _supported():
        return SandboxedWorkflowRunner(restrictions=restrictions)
    return CompiledOnceRunner(restrictions=restrictions,
                              context_free=converter is not None and ignores_context(converter))

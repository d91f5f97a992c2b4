"""Temporal's sandboxed workflow runner, with the sandbox's glue code compiled once.

The sandbox runs each step into a workflow's sandbox — creating the run, every activation, each
payload sequence's serialization context — as a short source string through `exec`, which compiles
it anew every time: under bench (b)'s load that compiling was 5.8 % of the gpuprov worker's CPU
(py-spy, `_Instance._run_code`'s self time: the most of any one line but the cloud listings' JSON
decoding). The strings are the SDK's own fixed snippets, plus one import line per workflow class;
each is compiled once here and the code object is run, exactly as the string was (`exec` takes
either). Nothing a workflow runs, or the sandbox restricts, changes.

It reaches into the SDK's private `_Instance` (temporalio 1.35). Should a later SDK change that,
`runner()` falls back to the SDK's runner as it is (tests/workflows/test_sandbox_runner.py fails
first, so the fallback is never silent in CI).
"""

from __future__ import annotations

import functools
from types import CodeType
from typing import Any

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


class CompiledOnceRunner(SandboxedWorkflowRunner):
    """SandboxedWorkflowRunner whose instances exec each glue snippet's code object."""

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _CompiledOnce(det, self.runner_class, self.restrictions)


def runner(restrictions: SandboxRestrictions) -> SandboxedWorkflowRunner:
    """The sandboxed runner with these restrictions: compiling once where this SDK allows it."""
    cls = CompiledOnceRunner if _supported() else SandboxedWorkflowRunner
    return cls(restrictions=restrictions)

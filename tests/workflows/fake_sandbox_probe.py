"""A FAKE workflow for tests/workflows/test_shared_code.py: what a sandboxed run sees of its module."""

from __future__ import annotations

import datetime

from temporalio import workflow
from temporalio.worker.workflow_sandbox import RestrictedWorkflowAccessError

RUNS = 0  # module state: each run's fresh import of this module starts it at 0


@workflow.defn(name="FakeSandboxProbeWorkflow")
class FakeSandboxProbeWorkflow:
    def __init__(self) -> None:
        self._go = False

    @workflow.signal
    def go(self) -> None:
        self._go = True

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: self._go)  # the test keeps two runs open at once
        global RUNS
        RUNS += 1
        try:
            datetime.datetime.now()  # the sandbox refuses it: not deterministic
            clock = "allowed"
        except RestrictedWorkflowAccessError:
            clock = "refused"
        return [str(RUNS), clock, str(id(FakeSandboxProbeWorkflow.run.__code__))]

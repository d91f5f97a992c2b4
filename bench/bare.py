"""The bare baseline for (b)/(c): a workflow that only runs N trivial activities in sequence.

Its own small module because a sandboxed workflow's module is re-imported for every run:
defined next to the bench harness, each run would re-import that (and its imports) too."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn(name="bench_trivial")
async def trivial(i: int) -> int:
    return i


@workflow.defn(name="BenchBareWorkflow")
class BareWorkflow:
    @workflow.run
    async def run(self, activities: int) -> int:
        for i in range(activities):
            await workflow.execute_activity(trivial, i, start_to_close_timeout=timedelta(seconds=30))
        return activities

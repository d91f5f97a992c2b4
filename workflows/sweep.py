"""SweepWorkflow: one sweep for what slipped through — started by the Temporal Schedule
`gpuprov-sweep` that the worker keeps (worker.py), or by hand.

    connections ─► list what each holds under our ownership tag (an activity each, at once)
                ─► one entry per machine (two connections to one account list it twice)
                ─► judge each against the database: kept, orphan or duplicate (activities/sweep.py)
                ─► remove the orphans and duplicates first seen longer than the grace period ago
                   (terminate by ref, verify gone, release), each judged again just before
                ─► a summary of what was seen, what waits, what was removed

A connection that does not answer is reported, not fatal: the others are still swept. A machine
of another installation is never listed (the ownership tag), so never touched.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from messages import activities as acts
from messages import workflows as wf
from messages.allocation import CloudTarget
from messages.sweep import (
    JudgeInput,
    Judgement,
    ListOwnedInput,
    OwnedMachines,
    RemoveInput,
    RemoveResult,
    SeenMachine,
    SweepInput,
    SweepSummary,
    SweepTargetsInput,
    Verdict,
)
from workflows import retries
from workflows.calls import call
from workflows.failures import failure_reason


@workflow.defn(name=wf.SWEEP.name)
class SweepWorkflow:
    @workflow.run
    async def run(self, inp: SweepInput) -> SweepSummary:
        info = workflow.info()
        summary = SweepSummary(sweep_id=f"{info.workflow_id}/{info.run_id}", listed=[])
        self._inp = inp
        self._hb = timedelta(seconds=inp.heartbeat_timeout_s)
        self._hb_every = max(0.2, inp.heartbeat_timeout_s / 4)

        found = await call(acts.SWEEP_TARGETS, SweepTargetsInput(connection_ids=inp.connection_ids),
                           start_to_close_timeout=timedelta(seconds=30), retry_policy=self._retry(5))
        listings = await asyncio.gather(*(self._list(t) for t in found.targets), return_exceptions=True)

        machines: dict[tuple[str, str], SeenMachine] = {}
        for target, listing in zip(found.targets, listings, strict=True):
            if isinstance(listing, ActivityError):
                summary.failures.append(f"{target.cloud} ({target.connection_id}): {failure_reason(listing)}")
                continue
            if isinstance(listing, BaseException):
                raise listing  # a cancel
            summary.listed.append(target.connection_id)
            for ref in listing.refs:
                seen = machines.get((ref.provider, ref.instance_id))
                if seen is None:
                    machines[(ref.provider, ref.instance_id)] = SeenMachine(ref=ref, target=target)
                elif target.connection_id not in seen.also_via:
                    seen.also_via.append(target.connection_id)  # one account, two connections: judged once
        summary.seen = len(machines)

        judged = await call(acts.JUDGE_MACHINES,
                            JudgeInput(machines=list(machines.values()), listed=summary.listed,
                                       grace_s=inp.grace_s),
                            start_to_close_timeout=timedelta(seconds=60), retry_policy=self._retry(5))
        due: list[Judgement] = []
        for j in judged.items:
            if j.verdict == Verdict.KEEP:
                summary.kept += 1
            elif j.due:
                due.append(j)
            else:
                summary.waiting.append(j)

        removals = await asyncio.gather(*(self._remove(j, summary.sweep_id) for j in due),
                                        return_exceptions=True)
        for j, outcome in zip(due, removals, strict=True):
            if isinstance(outcome, RemoveResult):
                (summary.removed if outcome.removed else summary.spared).append(outcome)
            elif isinstance(outcome, ActivityError):
                ref = j.machine.ref
                summary.errors.append(f"{ref.provider} machine {ref.instance_id} ({j.verdict.value}): "
                                      f"{failure_reason(outcome)}")
            else:
                raise outcome
        return summary

    def _retry(self, attempts: int) -> RetryPolicy:
        return retries.backoff(self._inp.max_retry_interval_s, attempts)

    async def _list(self, target: CloudTarget) -> OwnedMachines:
        return await call(acts.LIST_OWNED, ListOwnedInput(target=target, heartbeat_every_s=self._hb_every),
                          start_to_close_timeout=timedelta(seconds=self._inp.list_timeout_s),
                          heartbeat_timeout=self._hb, retry_policy=self._retry(3))

    async def _remove(self, j: Judgement, sweep_id: str) -> RemoveResult:
        return await call(acts.SWEEP_REMOVE,
                          RemoveInput(judgement=j, sweep_id=sweep_id, grace_s=self._inp.grace_s,
                                      poll_interval_s=self._inp.poll_interval_s,
                                      heartbeat_every_s=self._hb_every),
                          start_to_close_timeout=timedelta(seconds=self._inp.terminate_timeout_s),
                          heartbeat_timeout=self._hb, retry_policy=self._retry(5))

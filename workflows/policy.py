"""PolicyWorkflow: one evaluation of a policy. Started by the policy's Temporal Schedule
(`gpuprov-policy-<project>-<id>`, kept by the API: every GPUPROV_POLICY_INTERVAL_S for a condition,
on its cron expression for `cron`), or by hand.

    facts    ─► the policy as stored, its last trigger, the project's running $/hr, and what its
                When needs (one activity)
    decide   ─► pure code (messages/policy_eval.py): the When's reading, then the cooldown, then the
                max spend — a policy in its cooldown, or whose action would take the project over its
                max $/hr, does not act and says why
    act      ─► the Then (one activity), only when decided
    record   ─► the result, and when it acted one more trigger (one activity, idempotent per run)

The cooldown and the max spend are decided here, on the workflow's clock, so every run of the
Schedule applies them the same way whatever worker runs it.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from messages import activities as acts
from messages import workflows as wf
from messages.policy import ActInput, PolicyInput, PolicyRunOutcome, RecordPolicyRun
from messages.policy_eval import decide
from workflows import retries
from workflows.calls import call
from workflows.failures import failure_reason


@workflow.defn(name=wf.POLICY.name)
class PolicyWorkflow:
    @workflow.run
    async def run(self, inp: PolicyInput) -> PolicyRunOutcome:
        facts = await call(acts.POLICY_FACTS, inp, start_to_close_timeout=timedelta(seconds=60),
                           retry_policy=retries.DATABASE)
        if not facts.exists:
            return PolicyRunOutcome(acted=False, result="the policy was deleted")
        decision = decide(facts, workflow.now())
        acted, result = False, decision.reason
        if decision.act:
            try:
                done = await call(acts.POLICY_ACT, ActInput(policy_id=inp.policy_id, project=inp.project,
                                                            facts=facts, reason=decision.reason),
                                  start_to_close_timeout=timedelta(seconds=120),
                                  retry_policy=retries.ONCE_MORE)
                # An action that changed nothing (it needs pools; already paused) is no trigger.
                acted = done.ran
                result = f"{decision.reason} → {done.result}"
            except ActivityError as e:
                acted, result = True, f"{decision.reason} → failed: {failure_reason(e)}"
        await call(acts.RECORD_POLICY_RUN,
                   RecordPolicyRun(policy_id=inp.policy_id, run_id=workflow.info().run_id, acted=acted,
                                   result=result, at=workflow.now().isoformat()),
                   start_to_close_timeout=timedelta(seconds=30), retry_policy=retries.DATABASE)
        return PolicyRunOutcome(acted=acted, result=result)

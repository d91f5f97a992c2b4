"""PolicyWorkflow's evaluation under the time-skipping test server, its activities FAKE: a policy
"spend over $5 in 1h → webhook, cooldown 10 min, max spend $20/h" run every simulated minute acts
once per cooldown, and not while the project runs over its max spend — each run records why."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError
from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from messages import workflows as wf
from messages.policy import (
    ActInput,
    ActResult,
    Decision,
    Facts,
    PolicyFacts,
    PolicyInput,
    PolicyRunOutcome,
    PolicySpec,
    RecordPolicyRun,
)
from messages.policy_eval import decide
from worker import workflow_runner
from workflows.policy import PolicyWorkflow

QUEUE = "policy-eval-tests"
SPEC = PolicySpec.model_validate({
    "when": {"kind": "spend", "window": "1h", "usd": 5},
    "then": {"kind": "webhook", "url": "https://hooks.example/x"},
    "cooldown_minutes": 10, "max_spend_per_hour": 20})


@dataclass
class FakePolicyStore:
    """FAKE activities over an in-memory policy: the facts they report are set by the test."""

    spend_usd: float = 8.0  # over the policy's $5: the When holds
    rate_per_hour: float = 12.0  # under its $20/h max
    spec: PolicySpec = SPEC
    oldest_wait_minutes: float | None = None  # a queue_wait policy's reading
    added_cost_per_hour: float | None = 0.0  # what the Then would add (scale_pool: machines × price)
    last_triggered_at: str | None = None
    trigger_count: int = 0
    webhooks: list[ActInput] = field(default_factory=list)
    results: list[str] = field(default_factory=list)

    def activities(self) -> list[object]:
        @activity.defn(name="policy_facts")
        async def fake_policy_facts(inp: PolicyInput) -> PolicyFacts:
            facts = Facts(spend_usd=self.spend_usd, oldest_wait_minutes=self.oldest_wait_minutes)
            return PolicyFacts(policy_id=inp.policy_id, project=inp.project, name="a policy",
                               spec=self.spec, last_triggered_at=self.last_triggered_at,
                               spend_rate_per_hour=self.rate_per_hour,
                               added_cost_per_hour=self.added_cost_per_hour, facts=facts)

        @activity.defn(name="policy_act")
        async def fake_policy_act(inp: ActInput) -> ActResult:
            self.webhooks.append(inp)
            return ActResult(ok=True, result="webhook answered HTTP 204")

        @activity.defn(name="record_policy_run")
        async def fake_record_policy_run(inp: RecordPolicyRun) -> None:
            self.results.append(inp.result)
            if inp.acted:
                self.trigger_count += 1
                self.last_triggered_at = inp.at

        return [fake_policy_facts, fake_policy_act, fake_record_policy_run]


async def every_minute(env: WorkflowEnvironment, n: int) -> list[bool]:
    """Run the policy once a simulated minute, `n` times, as its Schedule would; whether each acted."""
    acted = []
    for _ in range(n):
        # Time moves only by env.sleep: awaiting a result would otherwise skip ahead to the
        # next timer (the run's timeout, years away).
        with env.auto_time_skipping_disabled():
            out = await env.client.execute_workflow(
                wf.POLICY.name, PolicyInput(policy_id="pol1", project="default"),
                id=f"policy-test-{uuid.uuid4().hex[:8]}", task_queue=QUEUE, result_type=PolicyRunOutcome)
        acted.append(out.acted)
        await env.sleep(timedelta(minutes=1))
    return acted


@pytest.fixture
def env(time_skipping_env: WorkflowEnvironment) -> WorkflowEnvironment:
    return time_skipping_env


async def test_spend_policy_acts_once_per_cooldown_and_never_over_the_max_spend(
        env: WorkflowEnvironment) -> None:
    store = FakePolicyStore()
    async with Worker(env.client, task_queue=QUEUE, workflows=[PolicyWorkflow],
                      activities=store.activities(), workflow_runner=workflow_runner()):

        async def minutes(n: int) -> list[bool]:
            return await every_minute(env, n)

        # 25 minutes with the spend over $5: it acts at minute 0, 10 and 20 only.
        assert [i for i, a in enumerate(await minutes(25)) if a] == [0, 10, 20]
        assert store.trigger_count == len(store.webhooks) == 3
        assert "in cooldown until" in store.results[1] and "spend over 1h is $8.00" in store.results[1]
        assert store.webhooks[0].reason == "spend over 1h is $8.00, over $5.00"

        # The project now runs at $25/h, over the $20/h max: past the cooldown it still does not act.
        store.rate_per_hour = 25.0
        assert not any(await minutes(12))
        assert "and exceed the max spend of $20.00/h" in store.results[-1]
        assert store.trigger_count == 3

        # Back under the max (and past the cooldown): it acts again, once.
        store.rate_per_hour = 19.0
        assert await minutes(2) == [True, False]
        # The spend falls under $5: the When no longer holds, whatever the cooldown.
        store.spend_usd = 4.0
        assert not any(await minutes(11))
        assert store.results[-1] == "spend over 1h is $4.00, not over $5.00"
        assert store.trigger_count == len(store.webhooks) == 4


async def test_the_issues_policy_scales_once_per_cooldown_within_the_max_spend(
        env: WorkflowEnvironment) -> None:
    """ "Queue wait of SFT over 5 minutes -> scale pool +2, cooldown 10 min, max spend $20/h": adding
    two machines at $4/h each ($8/h) is allowed while the project runs at $10/h, not at $13/h."""
    spec = PolicySpec.model_validate({
        "when": {"kind": "queue_wait", "type": "sft", "minutes": 5},
        "then": {"kind": "scale_pool", "pool": "train", "by": 2}, "cooldown_minutes": 10,
        "max_spend_per_hour": 20})
    store = FakePolicyStore(spec=spec, rate_per_hour=10.0, oldest_wait_minutes=3.0, added_cost_per_hour=8.0)
    async with Worker(env.client, task_queue=QUEUE, workflows=[PolicyWorkflow],
                      activities=store.activities(), workflow_runner=workflow_runner()):
        assert not any(await every_minute(env, 2))  # the oldest SFT job waits 3 min: not over 5
        store.oldest_wait_minutes = 7.0
        assert [i for i, a in enumerate(await every_minute(env, 21)) if a] == [0, 10, 20]
        assert "in cooldown until" in store.results[-2]
        store.rate_per_hour = 13.0  # 13 + 8 > 20: past the cooldown, it still does not scale
        assert not any(await every_minute(env, 12))
        assert "and exceed the max spend of $20.00/h" in store.results[-1]
        store.added_cost_per_hour = None  # a price not known yet: it does not guess
        store.rate_per_hour = 0.0
        assert not any(await every_minute(env, 1))
        assert store.trigger_count == 3 and "not known" in store.results[-1]


# --------------------------------------------------------------------------- the pure readings

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def facts_for(when: dict[str, Any], then: dict[str, Any] | None = None, **fields: Any) -> PolicyFacts:
    spec = PolicySpec.model_validate({"when": when, "then": then or {"kind": "pause_queue", "type": "sft"},
                                      "max_spend_per_hour": 20})
    return PolicyFacts(policy_id="p", project="default", spec=spec, spend_rate_per_hour=5.0,
                       facts=Facts(**fields))


@pytest.mark.parametrize(("when", "fields", "act", "reason"), [
    ({"kind": "queue_wait", "type": "sft", "minutes": 5}, {"oldest_wait_minutes": 6}, True,
     "the oldest queued sft job has waited 6 min, over 5 min"),
    ({"kind": "queue_wait", "type": "sft", "minutes": 5}, {"oldest_wait_minutes": 5}, False,
     "the oldest queued sft job has waited 5 min, not over 5 min"),
    ({"kind": "queue_depth", "type": "eval", "n": 3}, {"queued": 3}, True, "3 eval job(s) queued, 3"),
    ({"kind": "pool_utilisation", "pool": "p", "percent": 80, "direction": "below"},
     {"utilisation_percent": 85}, False, "pool p is at 85% utilisation, not below 80%"),
    ({"kind": "idle", "minutes": 30}, {"idle_machines": ["a1"]}, True, "1 machine(s) idle over 30 min"),
    ({"kind": "queue_wait", "type": "sft", "minutes": 5}, {"not_evaluated": "needs the job queue"}, False,
     "not evaluated: needs the job queue"),
    ({"kind": "queue_depth", "type": "sft", "n": 1}, {}, False,
     "not evaluated: the queue depth was not measured"),
])
def test_each_when_reads_its_facts_and_says_why(when: dict[str, Any], fields: dict[str, Any], act: bool,
                                                reason: str) -> None:
    assert decide(facts_for(when, **fields), NOW) == Decision(act=act, reason=reason)


def test_an_action_of_unknown_cost_under_a_max_spend_does_not_run() -> None:
    facts = facts_for({"kind": "cron", "expression": "@hourly"}, {"kind": "scale_pool", "pool": "p", "by": 2})
    facts.added_cost_per_hour = None
    d = decide(facts, NOW)
    assert not d.act and "what the action would cost is not known" in d.reason


@pytest.mark.parametrize("expression", ["0 3 * * *", "*/5 9-17 * jan-jun mon-fri", "@daily", "0,30 * 1 * 7"])
def test_cron_expressions_that_temporal_reads_are_accepted(expression: str) -> None:
    PolicySpec.model_validate({"when": {"kind": "cron", "expression": expression},
                               "then": {"kind": "pause_queue", "type": "sft"}})


@pytest.mark.parametrize("expression", ["* * * *", "60 * * * *", "* 24 * * *", "5-1 * * * *", "*/0 * * * *",
                                        "* * * foo *", "@sometimes"])
def test_bad_cron_expressions_are_refused(expression: str) -> None:
    with pytest.raises(ValidationError, match="cron|5 fields"):
        PolicySpec.model_validate({"when": {"kind": "cron", "expression": expression},
                                   "then": {"kind": "pause_queue", "type": "sft"}})

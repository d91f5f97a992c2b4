"""The pure part of a policy run: does the When hold, may the Then run (cooldown, max spend)?
No I/O and no clock of its own (`now` is the workflow's), so PolicyWorkflow calls it inside the
sandbox and replays it exactly.

Each When kind has its own small function; those whose facts do not exist yet (the job queue,
pools, GPU utilisation) answer "not evaluated: ..." through `Facts.not_evaluated` — never a silent
true or false — so wiring one later is filling in its facts function (activities/policy.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from messages.policy import (
    CronWhen,
    Decision,
    PolicyFacts,
    PolicySpec,
    SpendWhen,
)

# The $/hr an action adds to the project's running cost. Only scaling a pool up adds machines; its
# price needs pools (issue 11 step 2), and a scale_pool action is not run before then.
NO_ADDED_COST = 0.0


def condition(spec: PolicySpec, facts: PolicyFacts) -> Decision:
    """Whether the When holds, with its reading as the reason."""
    when = spec.when
    if facts.facts.not_evaluated is not None:
        return Decision(act=False, reason=f"not evaluated: {facts.facts.not_evaluated}")
    if isinstance(when, CronWhen):
        return Decision(act=True, reason=f"cron {when.expression} fired")
    if isinstance(when, SpendWhen):
        spent = facts.facts.spend_usd
        if spent is None:
            return Decision(act=False, reason="not evaluated: the spend was not measured")
        if spent > when.usd:
            return Decision(act=True, reason=f"spend over {when.window} is ${spent:.2f}, "
                                             f"over ${when.usd:.2f}")
        return Decision(act=False, reason=f"spend over {when.window} is ${spent:.2f}, "
                                          f"not over ${when.usd:.2f}")
    return Decision(act=False, reason=f"not evaluated: no facts for {when.kind}")


def added_cost(spec: PolicySpec) -> float:
    """$/hr the Then would add (see NO_ADDED_COST)."""
    del spec  # every action that runs today adds none; scale_pool's price comes with pools
    return NO_ADDED_COST


def decide(facts: PolicyFacts, now: datetime) -> Decision:
    """The run's decision: the When's reading, then the cooldown, then the max spend."""
    if not facts.exists:
        return Decision(act=False, reason="the policy was deleted")
    if not facts.enabled:
        return Decision(act=False, reason="the policy is disabled")
    spec = facts.spec
    assert spec is not None
    reading = condition(spec, facts)
    if not reading.act:
        return reading
    if spec.cooldown_minutes is not None and facts.last_triggered_at is not None:
        until = datetime.fromisoformat(facts.last_triggered_at) + timedelta(minutes=spec.cooldown_minutes)
        if now < until:
            return Decision(act=False, reason=f"{reading.reason}; in cooldown until {until.isoformat()}")
    if spec.max_spend_per_hour is not None:
        projected = facts.spend_rate_per_hour + added_cost(spec)
        if projected > spec.max_spend_per_hour:
            return Decision(act=False, reason=f"{reading.reason}; not acting: the project runs at "
                                              f"${facts.spend_rate_per_hour:.2f}/h, the action would "
                                              f"exceed the max spend of ${spec.max_spend_per_hour:.2f}/h")
    return reading

"""The pure part of a policy run: does the When hold, may the Then run (cooldown, max spend)?
No I/O and no clock of its own (`now` is the workflow's), so PolicyWorkflow calls it inside the
sandbox and replays it exactly.

Every When kind reads its own fields of `Facts`. The facts of the pool and idle kinds do not
exist yet: their facts functions (activities/policy.py) answer "not evaluated: ..." — never a
silent true or false — so wiring one later is filling in that one function; the reading here is
already written."""

from __future__ import annotations

from datetime import datetime, timedelta

from messages.policy import (
    CronWhen,
    Decision,
    Facts,
    IdleWhen,
    PolicyFacts,
    PolicySpec,
    PoolUtilisationWhen,
    QueueDepthWhen,
    QueueWaitWhen,
    SpendWhen,
)


def _unmeasured(what: str) -> Decision:
    return Decision(act=False, reason=f"not evaluated: {what} was not measured")


def condition(spec: PolicySpec, facts: Facts) -> Decision:
    """Whether the When holds, with its reading as the reason."""
    when = spec.when
    if facts.not_evaluated is not None:
        return Decision(act=False, reason=f"not evaluated: {facts.not_evaluated}")
    if isinstance(when, CronWhen):
        return Decision(act=True, reason=f"cron {when.expression} fired")
    if isinstance(when, SpendWhen):
        if facts.spend_usd is None:
            return _unmeasured("the spend")
        over = facts.spend_usd > when.usd
        return Decision(act=over, reason=f"spend over {when.window} is ${facts.spend_usd:.2f}, "
                                         f"{'' if over else 'not '}over ${when.usd:.2f}")
    if isinstance(when, QueueWaitWhen):
        if facts.oldest_wait_minutes is None:
            return _unmeasured("the queue wait")
        if facts.queued == 0:
            return Decision(act=False, reason=f"no {when.type} job is queued")
        over = facts.oldest_wait_minutes > when.minutes
        return Decision(act=over, reason=f"the oldest queued {when.type} job has waited "
                                         f"{facts.oldest_wait_minutes:.0f} min, {'' if over else 'not '}"
                                         f"over {when.minutes} min")
    if isinstance(when, QueueDepthWhen):
        if facts.queued is None:
            return _unmeasured("the queue depth")
        deep = facts.queued >= when.n
        return Decision(act=deep, reason=f"{facts.queued} {when.type} job(s) queued, "
                                         f"{'' if deep else 'fewer than '}{when.n}")
    if isinstance(when, PoolUtilisationWhen):
        if facts.utilisation_percent is None:
            return _unmeasured(f"pool {when.pool}'s utilisation")
        u = facts.utilisation_percent
        holds = u > when.percent if when.direction == "above" else u < when.percent
        return Decision(act=holds, reason=f"pool {when.pool} is at {u:.0f}% utilisation, "
                                          f"{'' if holds else 'not '}{when.direction} {when.percent:g}%")
    if isinstance(when, IdleWhen):
        if facts.idle_machines is None:
            return _unmeasured("idleness")
        idle = len(facts.idle_machines)
        return Decision(act=idle > 0, reason=f"{idle} machine(s) idle over {when.minutes} min")
    raise AssertionError(f"a When kind without a reading: {when.kind}")


def decide(facts: PolicyFacts, now: datetime) -> Decision:
    """The run's decision: the When's reading, then the cooldown, then the max spend."""
    if not facts.exists:
        return Decision(act=False, reason="the policy was deleted")
    if not facts.enabled:
        return Decision(act=False, reason="the policy is disabled")
    spec = facts.spec
    assert spec is not None
    reading = condition(spec, facts.facts)
    if not reading.act:
        return reading
    if spec.cooldown_minutes is not None and facts.last_triggered_at is not None:
        until = datetime.fromisoformat(facts.last_triggered_at) + timedelta(minutes=spec.cooldown_minutes)
        if now < until:
            return Decision(act=False, reason=f"{reading.reason}; in cooldown until {until.isoformat()}")
    if spec.max_spend_per_hour is not None:
        cap = spec.max_spend_per_hour
        if facts.added_cost_per_hour is None:
            return Decision(act=False, reason=f"{reading.reason}; not acting: what the action would cost is "
                                              f"not known, so the max spend of ${cap:.2f}/h cannot be kept")
        if facts.spend_rate_per_hour + facts.added_cost_per_hour > cap:
            return Decision(act=False, reason=f"{reading.reason}; not acting: the project runs at "
                                              f"${facts.spend_rate_per_hour:.2f}/h, the action would add "
                                              f"${facts.added_cost_per_hour:.2f}/h and exceed the max spend "
                                              f"of ${cap:.2f}/h")
    return reading

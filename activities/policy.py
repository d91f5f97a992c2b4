"""Policy activities (workflows/policy.py): gather the facts a policy's When needs, run its Then,
record how the run went.

One small function per When kind (`FACTS`) and per Then kind (`ACTIONS`). A reading that cannot be
made (a pool with no ready machine, a queue with nothing waiting) says so ("not evaluated: ...")
instead of pretending to a true or false; an action that has nothing to do records a no-op.

The queue's kinds read the project's waiting jobs (queued, not yet granted) of the group the policy
names (messages/queue_groups.py: sft covers sft and dpo jobs, grpo covers grpo and ppo). Jobs held
by a pause or the budget still wait, so they count.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlmodel import Session, col, func, select
from temporalio import activity
from temporalio.service import RPCError, RPCStatusCode

from activities import policy_pools
from activities.deps import ActivityDeps
from messages import activities as acts
from messages import workflows as wf
from messages.policy import (
    ActInput,
    ActResult,
    Facts,
    IdleWhen,
    PauseQueueThen,
    PolicyFacts,
    PolicyInput,
    PolicySpec,
    PoolUtilisationWhen,
    QueueDepthWhen,
    QueueWaitWhen,
    RecordPolicyRun,
    SpendWhen,
    TerminateIdleThen,
    WebhookThen,
    window_seconds,
)
from messages.pool import slot_of_allocation
from messages.queue_groups import QUEUE_GROUPS
from providers.endpoints import EndpointError, check_webhook, webhook_shown
from providers.rest import AcyclicClient
from store import idle, policies, pool_claims, pools, queue, spend
from store.db import session_scope
from store.models import Instance, Job, Pool, utcnow
from workflows import client_calls

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- facts, per When kind

FactsFn = Callable[[Session, str, Any, datetime], Facts]


def spend_facts(session: Session, project: str, when: SpendWhen, now: datetime) -> Facts:
    since = now - timedelta(seconds=window_seconds(when.window))
    return Facts(spend_usd=spend.spent_since(session, project, since, now))


def cron_facts(session: Session, project: str, when: Any, now: datetime) -> Facts:
    return Facts()  # its Schedule fired: nothing to measure


def _waiting(project: str, group: str) -> Any:
    """The project's jobs of the group that wait in the queue (not granted yet)."""
    return (col(Job.project) == project, col(Job.type).in_(QUEUE_GROUPS[group]),
            col(Job.status) == "queued", col(Job.granted_at).is_(None))


def queue_wait_facts(session: Session, project: str, when: QueueWaitWhen, now: datetime) -> Facts:
    """How long the oldest waiting job of the group has waited (0 with none waiting), and how many wait."""
    oldest, n = session.exec(select(func.min(Job.created_at), func.count())
                             .where(*_waiting(project, when.type))).one()
    waited = (now - spend.aware(oldest)).total_seconds() / 60 if oldest is not None else 0.0
    return Facts(oldest_wait_minutes=max(0.0, waited), queued=n)


def queue_depth_facts(session: Session, project: str, when: QueueDepthWhen, now: datetime) -> Facts:
    n = session.exec(select(func.count()).select_from(Job).where(*_waiting(project, when.type))).one()
    return Facts(queued=n)


def pool_utilisation_facts(session: Session, project: str, when: PoolUtilisationWhen, now: datetime) -> Facts:
    """The pool's utilisation now: busy machines / ready machines, in percent — a ready machine is
    busy while a job that has not ended has claimed it (store/pool_claims.py). With no ready machine
    there is nothing to divide: not evaluated, said so."""
    pool = pools.get_pool(session, project, when.pool)
    if pool is None:
        return Facts(not_evaluated=f"the project has no pool named {when.pool}")
    ready = [m.id for m in pool_claims.ready_machines(session, pool)]
    if not ready:
        return Facts(not_evaluated="the pool has no ready machine")
    return Facts(utilisation_percent=100.0 * len(pool_claims.busy(session, ready)) / len(ready))


def idle_facts(session: Session, project: str, when: IdleWhen, now: datetime) -> Facts:
    """The project's ready allocations the watch has sampled idle for longer than the When's minutes
    (activities/idle.py: every GPU under 5 %, no login session, no running job)."""
    return Facts(idle_machines=[r.id for r in idle.idle_longer_than(session, project, when.minutes, now)])


FACTS: dict[str, FactsFn] = {
    "spend": spend_facts, "cron": cron_facts, "queue_wait": queue_wait_facts,
    "queue_depth": queue_depth_facts, "pool_utilisation": pool_utilisation_facts, "idle": idle_facts,
}


# --------------------------------------------------------------------------- action costs, per Then kind

CostFn = Callable[[Session, str, Any], float | None]


def no_cost(session: Session, project: str, then: Any) -> float | None:
    return 0.0  # a webhook, a pause or a termination adds no machine


COSTS: dict[str, CostFn] = {"scale_pool": policy_pools.scale_pool_cost, "webhook": no_cost,
                            "pause_queue": no_cost, "terminate_idle": no_cost}


# --------------------------------------------------------------------------- actions, per Then kind

ActionFn = Callable[[ActivityDeps, ActInput, Any], Awaitable[ActResult]]


async def webhook_action(deps: ActivityDeps, inp: ActInput, then: WebhookThen) -> ActResult:
    """POST the policy and its facts as JSON. The URL is checked against the allowlist again (the
    setting may have changed since it was saved); redirects are not followed (they could leave it).
    Logs and the result show the URL without its query."""
    shown = webhook_shown(then.url)
    try:
        check_webhook(then.url, deps.webhook_allowlist)
    except EndpointError as e:
        return ActResult(ran=False, ok=False, result=f"not run: the webhook URL {e}")
    facts = inp.facts
    body = {"policy": {"id": inp.policy_id, "name": facts.name, "project": inp.project},
            "reason": inp.reason,
            "when": facts.spec.when.model_dump(mode="json") if facts.spec else None,
            "facts": {**facts.facts.model_dump(mode="json", exclude_none=True),
                      "spend_rate_per_hour": facts.spend_rate_per_hour, "measured_at": facts.measured_at}}
    try:
        # Acyclic: httpx's own client keeps each answer in a reference cycle (providers/rest.py)
        async with AcyclicClient(timeout=deps.webhook_timeout_s, follow_redirects=False) as client:
            r = await client.post(then.url, json=body)
    except httpx.TimeoutException:
        log.info("policy %s: webhook %s timed out", inp.policy_id, shown)
        return ActResult(ok=False, result=f"webhook did not answer within {deps.webhook_timeout_s:g}s")
    except (httpx.HTTPError, httpx.InvalidURL) as e:  # its text may quote the URL: the type only
        # (InvalidURL is no HTTPError: a query with CR/LF or NUL, saved before the API refused it)
        log.info("policy %s: webhook %s failed (%s)", inp.policy_id, shown, type(e).__name__)
        return ActResult(ok=False, result=f"webhook failed ({type(e).__name__})")
    if 200 <= r.status_code < 300:
        return ActResult(ok=True, result=f"webhook answered HTTP {r.status_code}")
    log.info("policy %s: webhook %s answered HTTP %d", inp.policy_id, shown, r.status_code)
    return ActResult(ok=False, result=f"webhook answered HTTP {r.status_code}")


async def pause_queue_action(deps: ActivityDeps, inp: ActInput, then: PauseQueueThen) -> ActResult:
    """Pause the project's queue group (store/queue.py: its jobs are passed over by admission).
    A group already paused is a no-op (not a trigger), unless this same policy run paused it — a
    retried action answers as its first attempt did."""
    run_id = activity.info().workflow_run_id

    def pause() -> tuple[bool, str]:
        with session_scope(deps.engine) as session:
            row, made = queue.pause(session, inp.project, then.type, by=inp.policy_id, run_id=run_id)
            return made or row.run_id == run_id, queue.pause_reason(row)

    made, why = await deps.blocking(pause)
    if made:
        return ActResult(ok=True, result=f"paused the {then.type} queue")
    return ActResult(ran=False, ok=True, result=f"no-op: {why}")


def _kind_of(session: Session, row: Instance) -> str:
    """pool (its id names a pool slot), job (a job's allocation) or manual (allocated by hand)."""
    if slot_of_allocation(row.id) is not None:
        return "pool"
    job = session.exec(select(Job.id).where(col(Job.allocation_id) == row.id)).first()
    return "job" if job is not None else "manual"


async def terminate_idle_action(deps: ActivityDeps, inp: ActInput, then: TerminateIdleThen) -> ActResult:
    """Terminate the project's machines idle longer than the Then's minutes, as measured now (the
    allocation's `terminate` update, accepted: the allocation workflow terminates and verifies).
    Job machines always; machines allocated by hand only when `include_manual` (the project's
    opt-in); pool machines by shrinking their pool (a pool would replace a machine terminated under
    it): its size drops by its idle machines, never under its min, and its ScaleWorkflow removes idle
    machines first. Retry-safe: an allocation already terminating takes the update again, a closed
    one is passed over, and a pool's new size is counted from its machines."""
    assert deps.client is not None, "ActivityDeps.client is set by build_worker"
    now = utcnow()

    def pick() -> tuple[list[tuple[str, str]], dict[str, int], list[tuple[Pool, int]]]:
        with session_scope(deps.engine) as session:
            chosen, left, by_pool = [], {"pool": 0, "manual": 0}, Counter[str]()
            for row in idle.idle_longer_than(session, inp.project, then.minutes, now):
                kind = _kind_of(session, row)
                if kind == "job" or (kind == "manual" and then.include_manual):
                    chosen.append((row.id, row.workflow_id))
                elif kind == "pool" and (slot := slot_of_allocation(row.id)) is not None:
                    by_pool[slot.pool_id] += 1
                else:
                    left[kind] += 1
            shrunk = [s for pool_id, n in by_pool.items()
                      if (s := policy_pools.shrink_by_idle(session, pool_id, n)) is not None]
            left["pool"] += sum(by_pool.values()) - sum(before - p.size for p, before in shrunk)
            return chosen, left, shrunk

    chosen, left, shrunk = await deps.blocking(pick)
    done: list[str] = []
    failed: list[str] = []
    for pool, _ in shrunk:
        await policy_pools.wake(deps, pool)
    for allocation_id, workflow_id in chosen:
        try:
            await client_calls.request_update(deps.client, workflow_id, wf.ALLOCATION.terminate)
            done.append(allocation_id)
        except RPCError as e:
            if e.status != RPCStatusCode.NOT_FOUND:  # NOT_FOUND: closed already, nothing to do
                log.info("policy %s: terminate %s failed (%s)", inp.policy_id, allocation_id, e.message)
                failed.append(allocation_id)
    notes = []
    if left["pool"] > 0:
        notes.append(f"left {left['pool']} idle pool machine(s): their pool cannot shrink "
                     "(at its min, or gone)")
    if left["manual"]:
        notes.append(f"left {left['manual']} machine(s) allocated by hand (not opted in)")
    if failed:
        notes.append(f"could not terminate {', '.join(failed)}")
    shrinks = [f"pool {p.name!r} from {before} to {p.size}" for p, before in shrunk]
    tail = f" ({'; '.join(notes)})" if notes else ""
    if not done and not shrinks:
        return ActResult(ran=False, ok=not failed,
                         result=f"no-op: no machine idle over {then.minutes} min to terminate{tail}")
    acts = ([f"terminating {len(done)} idle machine(s): {', '.join(done)}"] if done else []) + (
        [f"shrinking {', '.join(shrinks)} (idle machines first)"] if shrinks else [])
    return ActResult(ok=not failed, result="; ".join(acts) + tail)


ACTIONS: dict[str, ActionFn] = {
    "webhook": webhook_action, "scale_pool": policy_pools.scale_pool_action,
    "pause_queue": pause_queue_action, "terminate_idle": terminate_idle_action,
}


# --------------------------------------------------------------------------- the activities


class PolicyActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=acts.POLICY_FACTS.name)
    def policy_facts(self, inp: PolicyInput) -> PolicyFacts:
        """The policy as stored (a webhook's URL without its sealed query), its last trigger, the project's
        running $/hr, and what its When needs, measured now."""
        now = utcnow()
        with session_scope(self.deps.engine) as session:
            row = policies.get_policy(session, inp.project, inp.policy_id)
            if row is None:
                return PolicyFacts(policy_id=inp.policy_id, project=inp.project, exists=False,
                                   measured_at=now.isoformat())
            spec = PolicySpec.model_validate(row.spec)
            facts = FACTS[spec.when.kind](session, inp.project, spec.when, now)
            rate = spend.running_rate(session, inp.project)
            cost = COSTS[spec.then.kind](session, inp.project, spec.then)
            pool_size = policy_pools.size_of(session, inp.project, spec.then)
        last = spend.aware(row.last_triggered_at).isoformat() if row.last_triggered_at else None
        return PolicyFacts(policy_id=row.id, project=row.project, enabled=row.enabled, name=row.name,
                           spec=spec, last_triggered_at=last, spend_rate_per_hour=rate,
                           added_cost_per_hour=cost, pool_size=pool_size, facts=facts,
                           measured_at=now.isoformat())

    @activity.defn(name=acts.POLICY_ACT.name)
    async def policy_act(self, inp: ActInput) -> ActResult:
        """Run the policy's Then as stored now (the webhook's full URL is read here, never carried)."""
        def load() -> PolicySpec | None:
            with session_scope(self.deps.engine) as session:
                row = policies.get_policy(session, inp.project, inp.policy_id)
                if row is None:
                    return None
                spec = PolicySpec.model_validate(row.spec)
                if isinstance(spec.then, WebhookThen):  # its sealed query opened here, for this call only
                    url = policies.webhook_url(self.deps.box, row, spec.then.url)
                    spec = spec.model_copy(update={"then": WebhookThen(url=url)})
                return spec

        spec = await self.deps.blocking(load)
        if spec is None:
            return ActResult(ran=False, ok=False, result="not run: the policy was deleted")
        return await ACTIONS[spec.then.kind](self.deps, inp, spec.then)

    @activity.defn(name=acts.RECORD_POLICY_RUN.name)
    def record_policy_run(self, inp: RecordPolicyRun) -> None:
        with session_scope(self.deps.engine) as session:
            policies.record_run(session, inp.policy_id, run_id=inp.run_id, acted=inp.acted, result=inp.result,
                                at=datetime.fromisoformat(inp.at))

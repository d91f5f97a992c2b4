"""The pool side of policies (activities/policy.py dispatches here): what scaling a pool would add
to the project's $/hr, and the `scale_pool` action itself — the pool's new size saved, then its
ScaleWorkflow woken to reconcile, exactly as `PUT /api/compute/pools/{name}` does."""

from __future__ import annotations

import logging
from typing import Any

from sqlmodel import Session, col, select
from temporalio import activity

from activities.deps import ActivityDeps
from messages import workflows as wf
from messages.policy import ActInput, ActResult, ScalePoolThen
from messages.pool import PoolStatus, ScaleInput
from store import pool_claims, pools
from store.db import session_scope
from store.models import Instance, Pool
from workflows import client_calls

log = logging.getLogger(__name__)


def size_of(session: Session, project: str, then: Any) -> int | None:
    """The Then's pool's size now (scale_pool), None for other actions or a pool that does not exist."""
    if not isinstance(then, ScalePoolThen):
        return None
    pool = pools.get_pool(session, project, then.pool)
    return pool.size if pool is not None else None


def target_size(pool: Pool, then: ScalePoolThen, base: int | None = None) -> int:
    """The size the action asks for — `to`, or `by` from `base` (the size when the facts were measured;
    the pool's own size when not given) — kept within the pool's min..max."""
    wanted = then.to if then.to is not None else (pool.size if base is None else base) + (then.by or 0)
    return max(pool.min_size, min(pool.max_size, wanted))


def machine_price(session: Session, pool: Pool) -> float | None:
    """One machine's $/hr: the price the pool's machines were launched at (the latest known), None
    while none has a price yet (nothing launched: the cost of the next one is not known)."""
    allocation_ids = [str(m["allocation_id"]) for m in pool.machines or [] if m.get("allocation_id")]
    if not allocation_ids:
        return None
    priced = col(Instance.price_per_hour).is_not(None)
    prices = session.exec(select(Instance.price_per_hour).where(col(Instance.id).in_(allocation_ids), priced)
                          .order_by(col(Instance.created_at).desc())).all()
    return float(prices[0]) if prices and prices[0] is not None else None


def scale_pool_cost(session: Session, project: str, then: ScalePoolThen) -> float | None:
    """$/hr the scaling would add: machines added × one machine's price (0 when it shrinks or stays);
    None when a machine's price is not known yet — a policy with a max spend then does not act."""
    pool = pools.get_pool(session, project, then.pool)
    if pool is None:
        return 0.0  # the action will not run ("no pool"): it adds nothing
    added = target_size(pool, then) - pool.size
    if added <= 0:
        return 0.0
    price = machine_price(session, pool)
    return None if price is None else added * price


async def wake(deps: ActivityDeps, pool: Pool) -> None:
    """Start the pool's ScaleWorkflow unless it runs, and have it reconcile to the saved size now."""
    assert deps.client is not None, "the worker sets the Temporal client"
    scale = ScaleInput(pool_id=pool.id, project=pool.project, name=pool.name)
    await client_calls.start(deps.client, wf.SCALE, scale, workflow_id=pool.workflow_id,
                             task_queue=activity.info().task_queue, use_existing=True)
    await client_calls.update(deps.client, pool.workflow_id, wf.SCALE.reconcile)


def shrink_by_idle(session: Session, pool_id: str, idle_count: int) -> tuple[Pool, int] | None:
    """Lower the pool's size so its idle machines go (its ScaleWorkflow removes idle machines first),
    never under its min: size = max(min, ready machines - idle ones) when that is below the size now.
    Counted from the machines, not from the size, so a retried action lowers it no further.
    (The saved pool and its size before), or None when nothing changes."""
    pool = session.get(Pool, pool_id)
    if pool is None or pool.status != PoolStatus.ACTIVE:
        return None
    target = max(pool.min_size, len(pool_claims.ready_machines(session, pool)) - idle_count)
    if target >= pool.size:
        return None
    before, pool.size = pool.size, target
    return pools.save_pool(session, pool), before


async def scale_pool_action(deps: ActivityDeps, inp: ActInput, then: ScalePoolThen) -> ActResult:
    """Save the pool's new size, then wake its ScaleWorkflow. Retry-safe: `by` counts from the size
    the run measured (PolicyFacts.pool_size), so a second attempt sets the same size, and wakes the
    workflow again (an update it takes as often as it comes)."""
    base = inp.facts.pool_size

    def resize() -> Pool | str:
        with session_scope(deps.engine) as session:
            pool = pools.get_pool(session, inp.project, then.pool)
            if pool is None or pool.status != PoolStatus.ACTIVE:
                return f"not run: no active pool {then.pool!r} in project {inp.project!r}"
            size = target_size(pool, then, base)
            if size == (base if base is not None else pool.size) and size == pool.size:
                bound = ("its max" if size == pool.max_size else "its min" if size == pool.min_size
                         else "as asked")
                return f"not run: pool {then.pool!r} is already at {size} ({bound})"
            pool.size = size
            return pools.save_pool(session, pool)

    pool = await deps.blocking(resize)
    if isinstance(pool, str):
        return ActResult(ran=False, ok=True, result=pool)
    before = base if base is not None else pool.size
    await wake(deps, pool)
    log.info("policy %s: pool %s of project %s scaled %d -> %d", inp.policy_id, pool.name, pool.project,
             before, pool.size)
    return ActResult(ok=True, result=f"scaled pool {pool.name!r} from {before} to {pool.size}")

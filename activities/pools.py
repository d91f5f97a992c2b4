"""Pool activities (workflows/scale.py): observe a pool (its desired spec, its slots' allocations as
Temporal knows them, and its machines as the cloud lists them), start one slot's AllocationWorkflow
and record it, write back the last reconcile, forget a pool scaled to nothing.

Database work runs on the worker's thread pool (`deps.blocking`), cloud and Temporal calls on the loop."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import col, select
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus

from activities.deps import ActivityDeps, heartbeating
from activities.errors import provider_errors
from messages import activities as acts
from messages import workflows as wf
from messages.allocation import AllocateRequest, AllocationInput, CloudTarget
from messages.ids import allocation_of_key, allocation_workflow_id
from messages.pool import (
    AllocationView,
    ForgetPoolInput,
    Observation,
    ObserveInput,
    PoolMachine,
    PoolSpecView,
    PoolStatus,
    RecordPoolInput,
    StartMachineInput,
    StartResult,
    slot_of_allocation,
    slot_of_key,
)
from providers.base import InstanceRef
from store import allocations, connections, defaults, pool_claims, pools
from store.db import session_scope
from store.models import Instance, Pool
from workflows import client_calls


class PoolActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    # ------------------------------------------------------------------ database (blocking)

    def _lease_hours(self, project: str) -> float:
        """A pool machine's lease (activities/lease.py): the project's default, else 12 h."""
        with session_scope(self.deps.engine) as session:
            return defaults.lease_hours(session, project, None)

    def _pool(self, pool_id: str, project: str) -> tuple[Pool | None, list[CloudTarget]]:
        """The pool row and the project's connected connections of its cloud (where it allocates
        and what is listed)."""
        with session_scope(self.deps.engine) as session:
            row = session.get(Pool, pool_id)
            if row is None or row.project != project:
                return None, []
            conns = connections.connected(session, [row.cloud], project)
            return row, [CloudTarget(connection_id=c.id, cloud=c.provider) for c in conns]

    def _rows(self, allocation_ids: list[str]) -> dict[str, Instance]:
        if not allocation_ids:
            return {}
        with session_scope(self.deps.engine) as session:
            rows = session.exec(select(Instance).where(col(Instance.id).in_(allocation_ids))).all()
        return {r.id: r for r in rows}

    def _busy(self, allocation_ids: list[str]) -> set[str]:
        with session_scope(self.deps.engine) as session:
            return pool_claims.busy(session, allocation_ids)

    # ------------------------------------------------------------------ observe

    @activity.defn(name=acts.OBSERVE_POOL.name)
    async def observe_pool(self, inp: ObserveInput) -> Observation:
        """The pool's desired spec, each slot allocation's workflow (open or closed) and row, and every
        machine the pool's connections list under the pool's id (the count that bounds the pool)."""
        row, targets = await self.deps.blocking(self._pool, inp.pool_id, inp.project)
        if row is None:
            return Observation(spec=None)
        spec = PoolSpecView(cloud=row.cloud, gpu=row.gpu, gpu_count=row.gpu_count, region=row.region,
                            spot=row.spot, min_size=row.min_size, max_size=row.max_size, size=row.size,
                            status=PoolStatus(row.status))
        # Temporal first, then the cloud: an allocation seen open whose machine is listed next is
        # never taken for a stray (one that closes between the two verified its machine gone).
        found = await heartbeating(asyncio.gather(*(self._describe(a) for a in inp.allocation_ids)),
                                   inp.heartbeat_every_s, "describing allocations")
        rows = await self.deps.blocking(self._rows, inp.allocation_ids)
        views = []
        for allocation_id, (exists, running) in zip(inp.allocation_ids, found, strict=True):
            r = rows.get(allocation_id)
            views.append(AllocationView(allocation_id=allocation_id, found=exists, running=running,
                                        status=r.status if r else None, error=r.error if r else None))
        listed = await heartbeating(asyncio.gather(*(self._list(t) for t in targets), return_exceptions=True),
                                    inp.heartbeat_every_s, "listing the pool's machines")
        machines: dict[tuple[str, str], PoolMachine] = {}
        failures = []
        for target, answer in zip(targets, listed, strict=True):
            if isinstance(answer, BaseException):
                failures.append(f"{target.cloud} ({target.connection_id}): {answer}")
                continue
            for ref in answer:
                slot = slot_of_key(ref.key)
                if slot is None or slot.pool_id != inp.pool_id or not ref.is_machine:
                    continue
                allocation_id = allocation_of_key(ref.key) or ""
                machines.setdefault((ref.provider, ref.instance_id), PoolMachine(
                    ref=ref, target=target, allocation_id=allocation_id, slot=slot.slot,
                    generation=slot.generation))
        # Machines of allocations no slot names (a run that lost its state): the workflow adopts the
        # open ones into their slots, and removes the others as strays.
        others = sorted({m.allocation_id for m in machines.values()} - set(inp.allocation_ids))
        if others:
            more = await heartbeating(asyncio.gather(*(self._describe(a) for a in others)),
                                      inp.heartbeat_every_s, "describing allocations")
            rows = await self.deps.blocking(self._rows, others)
            for allocation_id, (exists, running) in zip(others, more, strict=True):
                r = rows.get(allocation_id)
                views.append(AllocationView(allocation_id=allocation_id, found=exists, running=running,
                                            status=r.status if r else None, error=r.error if r else None))
        if failures and len(failures) == len(targets):
            # Nothing counted: the pool must not be judged empty (and refilled) on no answer.
            raise RuntimeError("no connection listed the pool's machines: " + "; ".join(failures))
        busy = await self.deps.blocking(self._busy, [v.allocation_id for v in views])
        return Observation(spec=spec, targets=targets, allocations=views, machines=list(machines.values()),
                           failures=failures, busy=sorted(busy))

    async def _describe(self, allocation_id: str) -> tuple[bool, bool]:
        """(its workflow exists, it is open)."""
        assert self.deps.client is not None, "ActivityDeps.client is set by build_worker"
        found = await client_calls.status(self.deps.client, allocation_workflow_id(allocation_id))
        return found is not None, found == WorkflowExecutionStatus.RUNNING

    async def _list(self, target: CloudTarget) -> list[InstanceRef]:
        with provider_errors():
            p = await self.deps.provider(target)
            return await p.list_owned()

    # ------------------------------------------------------------------ start one machine

    @activity.defn(name=acts.START_POOL_MACHINE.name)
    async def start_pool_machine(self, inp: StartMachineInput) -> StartResult:
        """Start the slot's AllocationWorkflow (once per allocation id: a retry joins the run it
        started, and an id whose run closed is never run again) and record its row."""
        row, targets = await self.deps.blocking(self._pool, inp.pool_id, inp.project)
        if row is None or row.status != PoolStatus.ACTIVE:
            return StartResult(started=False, reason="the pool is being deleted")
        if not targets:
            return StartResult(started=False, reason=f"no {row.cloud} connection in project {row.project}: "
                                                     f"connect {row.cloud} first")
        slot = slot_of_allocation(inp.allocation_id)
        keys = list(row.ssh_public_keys) or [await self.deps.blocking(self.deps.public_key)]
        first = targets[0]
        request = AllocateRequest(
            allocation_id=inp.allocation_id, connection_id=first.connection_id, cloud=first.cloud,
            targets=targets, project=row.project,
            name=f"{row.name}-{slot.slot}" if slot is not None else row.name,
            gpu=row.gpu, gpu_count=row.gpu_count, region=row.region, spot=row.spot, k3s=row.k3s,
            ssh_public_keys=keys, timing=inp.timing,
            lease_hours=await self.deps.blocking(self._lease_hours, row.project))
        workflow_id = allocation_workflow_id(inp.allocation_id)
        assert self.deps.client is not None, "ActivityDeps.client is set by build_worker"
        task_timeout = timedelta(seconds=inp.task_timeout_s) if inp.task_timeout_s else None
        started = await heartbeating(client_calls.start(
            self.deps.client, wf.ALLOCATION, AllocationInput(request=request), workflow_id=workflow_id,
            task_queue=activity.info().task_queue, once=True, task_timeout=task_timeout),
            inp.heartbeat_every_s, "starting")
        if not started:
            return StartResult(started=False, reason=f"allocation {inp.allocation_id} already ran")
        await self.deps.blocking(allocations.record_started, self.deps.engine, request, workflow_id)
        return StartResult(started=True)

    # ------------------------------------------------------------------ record, forget

    @activity.defn(name=acts.RECORD_POOL.name)
    def record_pool(self, inp: RecordPoolInput) -> None:
        """The last reconcile's view for GET: each machine counted on the cloud with its allocation's
        status, each slot allocation not (or no longer) on the cloud, and the pass's errors."""
        if not inp.observed:
            with session_scope(self.deps.engine) as session:
                pools.record_errors(session, inp.pool_id, inp.errors)
            return
        views = {v.allocation_id: v for v in inp.allocations}
        shown: list[dict[str, Any]] = []
        for m in inp.machines:
            v = views.get(m.allocation_id)
            shown.append({"allocation_id": m.allocation_id, "slot": m.slot, "generation": m.generation,
                          "provider": m.ref.provider, "instance_id": m.ref.instance_id, "on_cloud": True,
                          "status": v.status if v else "stray", "error": v.error if v else None})
        on_cloud = {m.allocation_id for m in inp.machines}
        for slot, s in sorted(inp.slots.items()):
            if s.allocation_id in on_cloud:
                continue
            v = views.get(s.allocation_id)
            shown.append({"allocation_id": s.allocation_id, "slot": slot, "generation": s.generation,
                          "provider": None, "instance_id": None, "on_cloud": False,
                          "status": (v.status if v else None) or "provisioning",
                          "error": v.error if v else None})
        shown.sort(key=lambda d: (d["slot"], d["generation"]))
        with session_scope(self.deps.engine) as session:
            pools.record_reconcile(session, inp.pool_id, machines=shown, errors=inp.errors,
                                   reconciled_at=datetime.fromisoformat(inp.reconciled_at))

    @activity.defn(name=acts.FORGET_POOL.name)
    def forget_pool(self, inp: ForgetPoolInput) -> None:
        with session_scope(self.deps.engine) as session:
            pools.forget(session, inp.pool_id)


"""ScaleWorkflow: one long-lived workflow per pool that keeps the cloud at the pool's desired size.

    ┌─► observe (spec from the pool row, slots' allocations from Temporal, machines from the cloud)
    │     ├─ a slot whose allocation closed (lost, failed, terminated) is free again
    │     ├─ strays: machines listed under the pool that no open slot allocation owns ─► terminate by key
    │     ├─ surplus: more slots than desired ─► `terminate` update (idle first: not-ready, then
    │     │    ready with no job, newest first; a machine running a job only when no idle one is left)
    │     └─ missing: fill free slots with a new generation's AllocationWorkflow (≤ `parallel` provisioning)
    └── wait for the `reconcile` update (PUT, DELETE) or the resync timer; continue-as-new now and then

Nothing overshoots `max`, counted on the cloud, whatever crashes: a pool has `max` slots, a slot holds
one allocation at a time, and a slot gets a new generation only once its previous allocation's workflow
has closed (which it does only after the cloud shows its machine gone) and no stray of the pool is left
on the cloud. A slot's allocation id (`messages.pool.pool_allocation_id`) is its machine's key, so a pass
retried after a crash restarts the same workflow, whose create finds the machine it already made.

"Idle first" when scaling down: the machines whose loss costs least go first — not yet ready, then
ready ones running no job (store/pool_claims.py: no job claims them, as observed this pass), newest
first; a machine running a job goes only once no idle one is left, and its job fails with the reason.
A job may still claim an idle machine between the observation and its termination: that job fails
("its machine was lost"), the busy machines observed are never the ones chosen while idle ones remain.
The shape of temporalio's ClusterManagerWorkflow sample.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from messages import activities as acts
from messages import workflows as wf
from messages.activities import TerminateAllocationInput, TerminateInput
from messages.enums import AllocationStatus
from messages.ids import allocation_workflow_id
from messages.pool import (
    AllocationView,
    ForgetPoolInput,
    ObserveInput,
    PoolMachine,
    PoolStatus,
    RecordPoolInput,
    ScaleInput,
    ScaleState,
    Slot,
    StartMachineInput,
    pool_allocation_id,
)
from workflows.calls import call
from workflows.failures import failure_reason
from workflows.retries import backoff


@workflow.defn(name=wf.SCALE.name)
class ScaleWorkflow:
    @workflow.init
    def __init__(self, inp: ScaleInput) -> None:
        self._inp = inp
        self._state = inp.state or ScaleState()
        self._t = inp.timing
        self._hb = timedelta(seconds=self._t.heartbeat_timeout_s)
        self._hb_every = max(0.2, self._t.heartbeat_timeout_s / 4)
        self._wake = False

    @workflow.query(name=wf.SCALE.state.name)
    def state(self) -> ScaleState:
        return self._state

    @workflow.update(name=wf.SCALE.reconcile.name)
    def reconcile(self) -> None:
        """Read the pool's spec again and reconcile now (PUT and DELETE send it)."""
        self._wake = True

    @workflow.run
    async def run(self, inp: ScaleInput) -> ScaleState:
        for _ in range(inp.passes_per_run):
            self._wake = False
            if await self._pass():
                self._state.done = True
                return self._state
            if workflow.info().is_continue_as_new_suggested():
                break
            try:
                await workflow.wait_condition(lambda: self._wake, timeout=timedelta(seconds=inp.resync_s))
            except TimeoutError:
                pass
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(inp.model_copy(update={"state": self._state}))

    def _db_call(self) -> dict[str, Any]:
        return {"start_to_close_timeout": timedelta(seconds=15),
                "retry_policy": backoff(self._t.max_retry_interval_s)}

    def _teardown_call(self) -> dict[str, Any]:
        """A teardown waits until the cloud shows the machine gone: as long as a boot may take."""
        return {"start_to_close_timeout": timedelta(seconds=self._t.boot_timeout_s),
                "heartbeat_timeout": self._hb, "retry_policy": backoff(self._t.max_retry_interval_s, 5)}

    # ------------------------------------------------------------------ one pass

    async def _pass(self) -> bool:
        """One reconcile; True once the pool is forgotten (deleted, and the cloud shows none left)."""
        st, inp = self._state, self._inp
        st.passes += 1
        errors: list[str] = []
        try:
            obs = await call(acts.OBSERVE_POOL,
                             ObserveInput(pool_id=inp.pool_id, project=inp.project,
                                          allocation_ids=[s.allocation_id for s in st.slots.values()],
                                          heartbeat_every_s=self._hb_every),
                             start_to_close_timeout=timedelta(seconds=self._t.call_timeout_s),
                             heartbeat_timeout=self._hb,
                             retry_policy=backoff(self._t.max_retry_interval_s, 3))
        except ActivityError as e:
            st.errors = [f"observing the pool: {failure_reason(e)}"]  # nothing is judged on no answer
            await call(acts.RECORD_POOL,
                       RecordPoolInput(pool_id=inp.pool_id, machines=[], allocations=[], slots=st.slots,
                                       errors=st.errors, reconciled_at=workflow.now().isoformat(),
                                       observed=False),
                       **self._db_call())
            return False
        spec = obs.spec
        if spec is None:
            return True  # the row is gone: nothing left to keep
        deleting = spec.status == PoolStatus.DELETING
        views = {v.allocation_id: v for v in obs.allocations}
        errors += [f"listing {f}" for f in obs.failures]

        if deleting and not st.slots and not obs.machines:
            # Scaled to nothing, verified on the cloud by this pass's listing: forget the pool.
            await call(acts.FORGET_POOL, ForgetPoolInput(pool_id=inp.pool_id), **self._db_call())
            return True

        # A slot whose allocation closed is free: its machine was seen gone before it closed.
        for i, s in sorted(st.slots.items()):
            v = views.get(s.allocation_id)
            if v is not None and v.found and not v.running:
                if v.status != AllocationStatus.TERMINATED:
                    errors.append(f"slot {i} ({s.allocation_id}) {v.status or 'closed'}"
                                  + (f": {v.error}" if v.error else "") + "; replaced")
                del st.slots[i]

        # A machine of an open allocation no slot names (this run lost its state: a pool whose
        # workflow was started afresh) is adopted into its slot, if free and within max.
        owned = {s.allocation_id for s in st.slots.values()}
        for m in obs.machines:
            v = views.get(m.allocation_id)
            if (m.allocation_id not in owned and v is not None and v.running and m.slot not in st.slots
                    and m.slot < spec.max_size):
                st.slots[m.slot] = Slot(allocation_id=m.allocation_id, generation=m.generation,
                                        started_pass=st.passes)
                st.generations[m.slot] = max(st.generations.get(m.slot, 0), m.generation)
                owned.add(m.allocation_id)

        # Strays (no open slot allocation owns them) and surplus slots go, all at once.
        strays = [m for m in obs.machines if m.allocation_id not in owned]
        desired = 0 if deleting else spec.size
        victims = self._victims(desired, spec.max_size, views, set(obs.busy))
        removed = await self._remove(strays, victims, errors)
        for i in victims:
            if st.slots[i].allocation_id in removed:
                del st.slots[i]
        stray_left = any(m.allocation_id not in removed for m in strays)
        if stray_left:
            errors.append("a stray machine of the pool is still on the cloud: no slot is filled this pass")

        if not deleting and not stray_left:
            await self._fill(desired, spec.max_size, views, errors)

        # Deleting: once something was removed, the next pass verifies on the cloud at once that
        # nothing is left, then forgets (a failed removal waits for the resync, not a tight loop).
        if deleting and removed:
            self._wake = True
        st.errors = errors
        shown = [m for m in obs.machines if m.allocation_id not in removed]
        await call(acts.RECORD_POOL,
                   RecordPoolInput(pool_id=inp.pool_id, machines=shown, allocations=obs.allocations,
                                   slots=st.slots, errors=errors, reconciled_at=workflow.now().isoformat()),
                   **self._db_call())
        return False

    def _victims(self, desired: int, max_size: int, views: dict[str, AllocationView],
                 busy: set[str]) -> list[int]:
        """Slots to empty: any at or beyond `max`, then down to `desired` — idle first (not-ready,
        then ready with no job), newest first; machines running a job last."""
        st = self._state

        def ready(i: int) -> bool:
            v = views.get(st.slots[i].allocation_id)
            return v is not None and v.status == AllocationStatus.READY

        order = sorted(st.slots, key=lambda i: (i < max_size, st.slots[i].allocation_id in busy, ready(i),
                                                -st.slots[i].started_pass, -i))
        count = max(len(st.slots) - desired, sum(1 for i in st.slots if i >= max_size), 0)
        return order[:count]

    async def _remove(self, strays: list[PoolMachine], victims: list[int], errors: list[str]) -> set[str]:
        """Terminate strays by key and victims through their allocation's `terminate` update, in
        parallel; each returns once the cloud shows the machine gone. The allocation ids removed."""
        st = self._state

        async def stray(m: PoolMachine) -> str:
            by_key = TerminateInput(target=m.target, key=m.ref.key, ref=m.ref,
                                    heartbeat_every_s=self._hb_every, poll_interval_s=self._t.poll_interval_s)
            await call(acts.TERMINATE_AND_VERIFY, by_key, **self._teardown_call())
            return m.allocation_id

        async def victim(i: int) -> str:
            allocation_id = st.slots[i].allocation_id
            await call(acts.TERMINATE_ALLOCATION,
                       TerminateAllocationInput(workflow_id=allocation_workflow_id(allocation_id),
                                                heartbeat_every_s=self._hb_every),
                       **self._teardown_call())
            return allocation_id

        outcomes = await asyncio.gather(*(stray(m) for m in strays), *(victim(i) for i in victims),
                                        return_exceptions=True)
        removed = set()
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, ActivityError):
                    raise outcome
                errors.append(f"terminating: {failure_reason(outcome)}")
            else:
                removed.add(outcome)
        return removed

    async def _fill(self, desired: int, max_size: int, views: dict[str, AllocationView],
                    errors: list[str]) -> None:
        """Start a new generation in free slots (lowest first), at most `parallel` provisioning at once;
        start again any slot whose workflow does not exist yet (its start was interrupted)."""
        st, inp = self._state, self._inp
        provisioning = sum(1 for s in st.slots.values()
                           if (v := views.get(s.allocation_id)) is None or v.status != AllocationStatus.READY)
        room = max(0, inp.parallel - provisioning)
        free = [i for i in range(max_size) if i not in st.slots][:max(0, min(desired - len(st.slots), room))]
        for i in free:
            generation = st.generations.get(i, 0) + 1
            st.generations[i] = generation  # before the start: a retried pass starts the same id
            st.slots[i] = Slot(allocation_id=pool_allocation_id(inp.pool_id, inp.name, i, generation),
                               generation=generation, started_pass=st.passes)
        unstarted = [i for i, s in st.slots.items()
                     if (v := views.get(s.allocation_id)) is not None and not v.found]

        async def start(i: int) -> None:
            result = await call(acts.START_POOL_MACHINE,
                                StartMachineInput(pool_id=inp.pool_id, project=inp.project,
                                                  allocation_id=st.slots[i].allocation_id, timing=self._t,
                                                  task_timeout_s=inp.task_timeout_s,
                                                  heartbeat_every_s=self._hb_every),
                                start_to_close_timeout=timedelta(seconds=self._t.call_timeout_s),
                                heartbeat_timeout=self._hb,
                                retry_policy=backoff(self._t.max_retry_interval_s, 5))
            if not result.started and result.reason:
                errors.append(f"slot {i}: {result.reason}")

        starts = sorted({*free, *unstarted})
        outcomes = await asyncio.gather(*(start(i) for i in starts), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, ActivityError):
                errors.append(f"starting: {failure_reason(outcome)}")  # the next pass starts it again
            elif isinstance(outcome, BaseException):
                raise outcome

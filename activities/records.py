"""Record activities: keep the SQL projection (Instance + Attempt rows) in step with workflows.

Every write is an idempotent upsert, so a retried activity leaves the same rows. The database
calls block, so these activities are plain `def`s: the worker runs them on its thread pool and
its event loop (heartbeats, cloud calls) never waits on the database."""

from __future__ import annotations

from sqlmodel import Session
from temporalio import activity

from activities import metrics
from activities.deps import ActivityDeps
from messages import activities as acts
from messages.activities import RecordAllocationInput
from messages.enums import AllocationStatus
from messages.ids import allocation_workflow_id
from store import instances, spend
from store.db import session_scope
from store.models import Attempt, Instance, utcnow


class RecordActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=acts.RECORD_ALLOCATION.name)
    def record_allocation(self, inp: RecordAllocationInput) -> None:
        record_allocation(self.deps, inp)


def record_allocation(deps: ActivityDeps, inp: RecordAllocationInput) -> None:
    """Upsert the Instance row from an allocate snapshot; the row is created when the workflow was
    started without the API. RECORD_ALLOCATION's work, and the snapshot VALIDATE_ALLOCATION and
    WAIT_RUNNING write first when one rides along (workflows/allocation.py, RECORDS_RIDE_PATCH)."""
    req, st = inp.request, inp.state
    now = utcnow()
    with session_scope(deps.engine) as session:
        # One transaction with the snapshot below: no reader sees `ready` before the address.
        marks = [(m.status.value, m.phase.value) for m in inp.marks]
        instances.mark_phases(session, req.allocation_id, marks, commit=False)
        row = session.get(Instance, req.allocation_id)
        if row is None:
            # The workflow writes its own row when the API did not (or died before it could) — or
            # has not yet: the API inserts it right after the start (store/allocations.py), maybe
            # between this read and this write. Whichever comes first wins; this one then updates.
            workflow_id = activity.info().workflow_id or allocation_workflow_id(req.allocation_id)
            instances.add_instance_if_absent(session, Instance(
                id=req.allocation_id, provider=req.cloud, connection_id=req.connection_id,
                workflow_id=workflow_id))
            row = session.get(Instance, req.allocation_id)
            assert row is not None  # ours, or the API's
        before = (row.status, row.phase)
        # The request, as asked (the API may have inserted these already).
        row.name, row.project = req.name or row.name, req.project
        if st.target is not None:  # where the current attempt runs: planning may cross clouds
            row.provider, row.connection_id = st.target.cloud, st.target.connection_id
        row.gpu, row.gpu_count, row.region, row.spot = req.gpu, req.gpu_count, req.region, req.spot
        if row.lease_hours is None:  # a row this record made (the API's insert came second, and left it)
            row.lease_hours = req.lease_hours  # the create arms the machine's lease from it
        # The outcome so far.
        row.status, row.phase, row.error = inp.status, st.phase.value, st.error
        row.note = "; ".join(st.notes) or None
        if st.offer is not None:
            row.instance_type, row.offer_region = st.offer.instance_type, st.offer.region
            row.price_per_hour = st.offer.price_per_hour
        if st.attempts:
            row.key = st.attempts[-1].key
        row.cloud_instance_id = st.ref.instance_id if st.ref else None
        row.ssh_host, row.ssh_port, row.ssh_user = st.host, st.ssh_port, st.ssh_user
        ready = inp.status == AllocationStatus.READY
        row.gpus_found = [g.model_dump() for g in st.gpus] if ready else row.gpus_found
        became_ready = ready and row.ready_at is None
        if became_ready:
            row.ready_at = now
        requested_at, cloud = row.created_at, row.provider
        gone = inp.status in (AllocationStatus.TERMINATED, AllocationStatus.LOST)
        if gone and row.terminated_at is None:
            row.terminated_at = now  # the cloud shows the machine gone
        row.updated_at = now
        session.add(row)
        session.flush()
        _log_transition(session, row.id, before, (inp.status, st.phase.value))
        for a in st.attempts:
            instances.record_attempt(session, Attempt(
                instance_id=req.allocation_id, seq=a.seq, provider=a.offer.provider,
                instance_type=a.offer.instance_type, region=a.offer.region, spot=a.offer.spot,
                price_per_hour=a.offer.price_per_hour, outcome=a.outcome, reason=a.reason), commit=False)
        session.commit()
        if became_ready:  # once per allocation: a retried record finds ready_at set
            metrics.ready(cloud, requested_at, now)
        live = inp.status not in (AllocationStatus.TERMINATED, AllocationStatus.LOST,
                                  AllocationStatus.FAILED)
        if st.ref is not None and st.offer is not None and st.attempts and live:
            # The create activity opened the attempt's interval already; this only covers an
            # allocation whose create completed before the ledger existed (a no-op otherwise).
            spend.open_interval(session, key=st.attempts[-1].key, instance_id=req.allocation_id,
                                project=row.project, connection_id=row.connection_id,
                                provider=row.provider, rate_per_hour=st.offer.price_per_hour,
                                started_at=now)


def _log_transition(session: Session, instance_id: str, before: tuple[str, str],
                    after: tuple[str, str]) -> None:
    """Append an event when (status, phase) changes. `before` is the row as it was, so a
    retried activity (row already updated) adds nothing; the first record logs its state."""
    if before != after or not instances.has_events(session, instance_id):
        instances.add_event(session, instance_id, after)

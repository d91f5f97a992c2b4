"""Sweep activities (workflows/sweep.py): what each connection holds under our ownership tag, each
machine judged against the database, and the removal of an orphan or a duplicate (terminate by
ref, verify gone, release the key's side resources once no machine carries it), recorded.

Database work runs in plain `def`s (the worker's thread pool), cloud calls in async ones.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlmodel import Session, select
from temporalio import activity

from activities import metrics
from activities.cloud import terminate_refs
from activities.deps import ActivityDeps, heartbeating
from activities.errors import provider_errors
from messages import activities as acts
from messages.allocation import CloudTarget
from messages.enums import AllocationStatus
from messages.ids import allocation_of_key
from messages.sweep import (
    JudgeInput,
    Judgement,
    Judgements,
    ListOwnedInput,
    OwnedMachines,
    RemoveInput,
    RemoveResult,
    SeenMachine,
    SweepTargets,
    SweepTargetsInput,
    Verdict,
)
from providers import registry
from providers.base import InstanceRef
from store import connections as connection_store
from store import fleets
from store.clock import aware
from store.db import session_scope
from store.models import Connection, Instance, SweepAction, SweepSighting, utcnow


def judge(ref: InstanceRef, allocation_id: str | None, row: Instance | None) -> tuple[Verdict, str]:
    """Is `ref` (listed under our ownership tag) the machine of a live allocation? Pure.

    - no allocation id in its key, no row for it, or the row is over (failed, terminated, lost):
      an orphan;
    - the row is live and records this machine (`cloud_instance_id`), or records none yet and this
      machine carries its latest attempt's key (a create in flight): kept;
    - the row is live and records another machine, or this one carries an earlier attempt's key:
      a duplicate (also a twin under the latest key where the cloud allows duplicate names);
    - a side resource (a security group, NIC, ...): kept while its allocation is live on its key,
      else an orphan.
    """
    if allocation_id is None:
        return Verdict.ORPHAN, f"its key {ref.key!r} names no allocation"
    if row is None:
        return Verdict.ORPHAN, f"allocation {allocation_id} is unknown to the database"
    status = AllocationStatus(row.status)
    if not status.live:
        return Verdict.ORPHAN, f"allocation {allocation_id} is {status.value}"
    if not ref.is_machine:
        if ref.key == row.key:
            return Verdict.KEEP, f"a {ref.kind} of allocation {allocation_id}'s latest attempt"
        return Verdict.ORPHAN, (f"a {ref.kind} of attempt key {ref.key}; allocation {allocation_id} is "
                                f"{status.value} on {row.key}")
    if row.cloud_instance_id is not None:
        if row.cloud_instance_id == ref.instance_id and row.provider == ref.provider:
            return Verdict.KEEP, f"the machine allocation {allocation_id} records"
        return Verdict.DUPLICATE, (f"allocation {allocation_id} is {status.value} on {row.provider} machine "
                                   f"{row.cloud_instance_id}, not this one")
    if ref.key == row.key:
        return Verdict.KEEP, f"allocation {allocation_id}'s latest attempt, its create not yet recorded"
    return Verdict.DUPLICATE, (f"allocation {allocation_id} is {status.value} on attempt key {row.key}, "
                               f"not {ref.key}")


class SweepActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=acts.SWEEP_TARGETS.name)
    def sweep_targets(self, inp: SweepTargetsInput) -> SweepTargets:
        """Every connection (or those named), removing ones included: their machines still bill. And
        every SSH fleet: a claim of ours whose allocation is over (a crash between claim and record)
        frees its host the same way, after the same grace."""
        with session_scope(self.deps.engine) as session:
            rows = connection_store.list_connections(session)
            fleet_ids = fleets.all_fleet_ids(session)
        wanted = None if inp.connection_ids is None else set(inp.connection_ids)
        targets = [CloudTarget(connection_id=r.id, cloud=r.provider) for r in rows]
        targets += [CloudTarget(connection_id=f, cloud=kind) for kind in registry.fleets() for f in fleet_ids]
        return SweepTargets(targets=[t for t in targets if wanted is None or t.connection_id in wanted])

    @activity.defn(name=acts.LIST_OWNED.name)
    async def list_owned(self, inp: ListOwnedInput) -> OwnedMachines:
        """What one connection holds under this installation's ownership tag."""
        with provider_errors():
            p = await self.deps.provider(inp.target)
            refs = await heartbeating(p.list_owned(), inp.heartbeat_every_s,
                                      f"listing {inp.target.connection_id}")
        return OwnedMachines(target=inp.target, refs=refs)

    @activity.defn(name=acts.JUDGE_MACHINES.name)
    def judge_machines(self, inp: JudgeInput) -> Judgements:
        """Judge each machine; keep the first-seen time of orphans and duplicates (the grace period
        runs from it) and forget those no longer suspect or no longer listed."""
        now = utcnow()
        with session_scope(self.deps.engine) as session:
            items = [_judge(session, m, inp.grace_s, now) for m in inp.machines]
            for j in items:
                if j.verdict != Verdict.KEEP:
                    metrics.sweep_action(j.machine.target.cloud, f"seen_{j.verdict.value}")
            seen = {(m.ref.provider, m.ref.instance_id) for m in inp.machines}
            connections = set(session.exec(select(Connection.id)).all()) | set(fleets.all_fleet_ids(session))
            for s in session.exec(select(SweepSighting)).all():
                gone = s.connection_id in inp.listed and (s.provider, s.instance_id) not in seen
                if gone or s.connection_id not in connections:
                    session.delete(s)
            session.commit()
        return Judgements(items=items)

    @activity.defn(name=acts.SWEEP_REMOVE.name)
    async def sweep_remove(self, inp: RemoveInput) -> RemoveResult:
        """Judge the machine again (its allocation may have recorded it since); if still due, terminate
        it, wait until the cloud shows it gone, release the key's side resources when no machine
        carries the key any more, and record the action."""
        m = inp.judgement.machine
        again = await heartbeating(self.deps.blocking(self._rejudge, m, inp.grace_s), inp.heartbeat_every_s,
                                   "judging again")
        result = RemoveResult(removed=False, machine=m, verdict=again.verdict,
                              allocation_id=again.allocation_id, reason=again.reason)
        if again.verdict == Verdict.KEEP or not again.due:
            return result
        with provider_errors():
            p = await self.deps.provider(m.target)
            if m.ref.is_machine:
                await terminate_refs(p, [m.ref], poll_interval_s=inp.poll_interval_s,
                                     heartbeat_every_s=inp.heartbeat_every_s, statuses=self.deps.statuses)
            # A side resource goes with its key's: released once no machine carries the key (a
            # machine still there is swept as a machine, and its terminate takes its side resources).
            left = await heartbeating(p.find_all(m.ref.key), inp.heartbeat_every_s, "finding twins")
            if not left:
                await heartbeating(p.release(m.ref.key), inp.heartbeat_every_s, "releasing")
            elif not m.ref.is_machine:
                return result
        await heartbeating(self.deps.blocking(self._record, inp.sweep_id, again), inp.heartbeat_every_s,
                           "recording")
        metrics.sweep_action(m.target.cloud, f"removed_{again.verdict.value}")
        return result.model_copy(update={"removed": True})

    def _rejudge(self, m: SeenMachine, grace_s: float) -> Judgement:
        with session_scope(self.deps.engine) as session:
            j = _judge(session, m, grace_s, utcnow())
            session.commit()
        return j

    def _record(self, sweep_id: str, j: Judgement) -> None:
        ref = j.machine.ref
        with session_scope(self.deps.engine) as session:
            done = session.exec(select(SweepAction.id).where(
                SweepAction.sweep_id == sweep_id, SweepAction.provider == ref.provider,
                SweepAction.instance_id == ref.instance_id)).first()
            if done is None:
                session.add(SweepAction(
                    sweep_id=sweep_id, provider=ref.provider, instance_id=ref.instance_id, key=ref.key,
                    connection_id=j.machine.target.connection_id, allocation_id=j.allocation_id,
                    verdict=j.verdict.value, reason=j.reason,
                    first_seen=datetime.fromisoformat(j.first_seen) if j.first_seen else None))
            sighting = session.get(SweepSighting, (ref.provider, ref.instance_id))
            if sighting is not None:
                session.delete(sighting)
            session.commit()


def _judge(session: Session, m: SeenMachine, grace_s: float, now: datetime) -> Judgement:
    """`judge`, plus the sighting: made when first suspect, refreshed after, dropped once kept."""
    allocation_id = allocation_of_key(m.ref.key)
    row = session.get(Instance, allocation_id) if allocation_id else None
    verdict, reason = judge(m.ref, allocation_id, row)
    sighting = session.get(SweepSighting, (m.ref.provider, m.ref.instance_id))
    if verdict == Verdict.KEEP:
        if sighting is not None:
            session.delete(sighting)
        return Judgement(machine=m, verdict=verdict, allocation_id=allocation_id, reason=reason)
    if sighting is None:
        sighting = SweepSighting(provider=m.ref.provider, instance_id=m.ref.instance_id, key=m.ref.key,
                                 connection_id=m.target.connection_id, allocation_id=allocation_id,
                                 verdict=verdict.value, reason=reason, first_seen=now, last_seen=now)
    else:
        sighting.key, sighting.connection_id, sighting.allocation_id = (
            m.ref.key, m.target.connection_id, allocation_id)
        sighting.verdict, sighting.reason, sighting.last_seen = verdict.value, reason, now
    session.add(sighting)
    first_seen = aware(sighting.first_seen)
    return Judgement(machine=m, verdict=verdict, allocation_id=allocation_id, reason=reason,
                     first_seen=first_seen.isoformat(),
                     due=now - first_seen >= timedelta(seconds=grace_s))


"""The watch's one activity: ask the cloud about every ready machine of a connection (its listing,
one call a page: `statuses`), and tell the allocation of each one the cloud reports gone, stopped
or broken (its `machine_lost` signal; `preempted` when the cloud's API says it reclaimed the machine:
a spot interruption, a preemption, an eviction, an outbid). A machine whose cloud shows an
interruption notice (AWS: two minutes, GCP: thirty seconds) still runs: the managed job running on
it is told (its `preemption_notice` signal) once, and the loss is reported when the cloud shows it
gone. The machines the cloud shows alive are then sampled for idleness (activities/idle.py), one
SSH login each — so every sample's rate is the watch's interval.

Once per notice, without a column: each worker remembers, per connection, the allocations whose
notice it has passed on (`_NOTICED`), and signals only those the previous round did not see under
notice. A worker restarted during a notice (or another worker taking the next round) sends it once
more: the job's handler takes a second notice for the same allocation as a no-op."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlmodel import col, select
from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities import idle, metrics
from activities.deps import ActivityDeps, heartbeating
from messages import activities as acts
from messages import workflows as wf
from messages.allocation import CloudTarget, MachineLost
from messages.enums import AllocationStatus
from messages.ids import job_workflow_id, watch_workflow_id
from messages.job import JobStatus, PreemptionNotice
from messages.watch import WatchInput, WatchReport, WatchRequest
from providers.base import CloudProvider, InstanceRef, InstanceState, InstanceStatus, ProviderError
from providers.ssh_fleet import SshFleetProvider
from store import creates_in_flight, fleets
from store.clock import aware
from store.db import session_scope
from store.models import Connection, Fleet, Instance, Job, utcnow
from workflows import client_calls

log = logging.getLogger(__name__)

# After an in-doubt create, how long after ready the watch hunts for a twin under the allocation's
# key (a launch that lands after the in-flight window: minutes, not the sweep's grace), and how long a
# round waits for the twins it terminates to show gone (the rest is the next round's).
TWIN_HUNT_S = 900.0
TWIN_BUDGET_S = 20.0
TWIN_POLL_S = 0.5

# What the cloud may say about a machine that is not lost.
_ALIVE = (InstanceState.RUNNING, InstanceState.PENDING)


# Per connection, the allocations whose interruption notice this worker has passed on to their job
# (module docstring): a notice is signalled when it first shows, not every round it lasts.
_NOTICED: dict[str, set[str]] = {}


def under_notice(st: InstanceStatus | None) -> bool:
    """The cloud's interruption notice is out and the machine still runs (not lost yet)."""
    return st is not None and st.notice and st.state != InstanceState.TERMINATED


def lost_reason(instance_id: str, st: InstanceStatus | None) -> str | None:
    """Why a ready machine counts as lost, or None while the cloud shows it alive (or still running
    under an interruption notice: AWS's instance stays `running`, GCP's goes STOPPING meanwhile)."""
    if st is None:
        return f"the cloud no longer lists machine {instance_id}"
    if st.state in _ALIVE or under_notice(st):
        return None
    word = f" ({st.detail})" if st.detail and st.detail not in (st.state.value, "preempted") else ""
    if st.preempted:
        return (f"the cloud preempted machine {instance_id} "
                f"(spot interruption: it reports {st.state.value}{word})")
    return f"the cloud reports machine {instance_id} {st.state.value}{word}"


@dataclass
class Statuses:
    answers: list[InstanceStatus | None | BaseException]  # per row, in order
    calls: int  # the adapter calls it took: the listing (if the cloud has one) and each get


async def statuses(p: CloudProvider, rows: list[Instance]) -> Statuses:
    """What the cloud says of each row's machine: one listing for the connection (`list_machines`,
    every page), then `get` only for a machine the listing does not show — gone, or a listing that
    lags a launch — so a round over N live machines costs the listing's pages, not N calls (a
    connection of 1,000 machines stays within a cloud's rate limit at the default interval). A
    cloud whose listing tells no state (None) is asked `get` per machine. A failed `get` is that
    machine's answer (asked again next round); a failed listing raises (the round has no answer)."""
    listed = await p.list_machines()
    by_id = {s.ref.instance_id: s for s in listed or ()}
    asked = [r for r in rows if r.cloud_instance_id not in by_id]

    async def status(row: Instance) -> InstanceStatus | None:
        assert row.cloud_instance_id is not None and row.key is not None
        if row.cloud_instance_id in by_id:
            return by_id[row.cloud_instance_id]
        return await p.get(InstanceRef(provider=row.provider, instance_id=row.cloud_instance_id,
                                       key=row.key, region=row.offer_region))

    answers = await asyncio.gather(*(status(r) for r in rows), return_exceptions=True)
    return Statuses(answers=answers, calls=(listed is not None) + len(asked))


class WatchActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    def _ready_on(self, connection_id: str) -> tuple[CloudTarget | None, list[Instance]]:
        """The connection's (or SSH fleet's) target, None when it is gone, and its ready machines."""
        with session_scope(self.deps.engine) as session:
            conn = session.get(Connection, connection_id)
            target = (CloudTarget(connection_id=conn.id, cloud=conn.provider) if conn is not None
                      else CloudTarget(connection_id=connection_id, cloud=SshFleetProvider.id)
                      if session.get(Fleet, connection_id) is not None else None)
            rows = list(session.exec(select(Instance).where(
                Instance.connection_id == connection_id, Instance.status == AllocationStatus.READY,
                col(Instance.cloud_instance_id).is_not(None))).all())
        return target, rows

    @activity.defn(name=acts.WATCH_CONNECTION.name)
    async def watch_connection(self, inp: WatchInput) -> WatchReport:
        target, rows = await self.deps.blocking(self._ready_on, inp.connection_id)
        if target is None:
            return WatchReport(connection_found=False)
        if not rows:
            return WatchReport()
        p = await self.deps.provider(target)
        try:
            found = await heartbeating(statuses(p, rows), 5.0, "listing machines")
        except ProviderError as e:
            log.info("watch of %s: the cloud's listing did not answer (%s); next round asks again",
                     inp.connection_id, e)
            metrics.watch_round(target.cloud, 1)
            return WatchReport()
        metrics.watch_round(target.cloud, found.calls)
        answers = found.answers
        report = WatchReport()
        alive = []
        noticed: list[tuple[Instance, InstanceStatus]] = []
        unanswered: set[str] = set()
        for row, answer in zip(rows, answers, strict=True):
            if isinstance(answer, ProviderError):
                unanswered.add(row.id)
                continue  # no answer about this one: ask again next round
            if isinstance(answer, BaseException):
                raise answer
            reason = lost_reason(str(row.cloud_instance_id), answer)
            if reason is None:
                alive.append(row)
                if answer is not None and under_notice(answer):
                    noticed.append((row, answer))
            else:
                preempted = answer is not None and answer.preempted
                if await self._tell(row.workflow_id, reason, preempted=preempted):
                    report.lost[row.id] = reason
                    metrics.watch_lost(target.cloud, preempted=preempted)
        await self._pass_notices(inp.connection_id, noticed, unanswered)
        if alive:
            report.twins = await self._hunt_twins(p, alive)
        if alive:
            idle_now = await heartbeating(idle.sample(self.deps, p, alive), 5.0, "sampling idleness")
            report.idle = sorted(a for a, is_idle in idle_now.items() if is_idle)
        return report

    async def _hunt_twins(self, p: CloudProvider, rows: list[Instance]) -> dict[str, list[str]]:
        """After an in-doubt create (its answer never came: found later, or launched again once the
        in-flight window passed), that launch may still land beside the allocation's machine: a
        twin under the same key, billing. For TWIN_HUNT_S after ready (or after the doubt, if
        later) each such allocation's key is looked up every round, and every machine under it but
        the allocation's own is terminated at once and seen gone — within a watch interval, not
        the sweep's grace. Returns allocation id -> the twins seen gone this round; a twin not yet
        gone (or a cloud that did not answer) is taken up again next round."""
        from activities.cloud import terminate_refs  # here: activities/cloud.py imports this module

        now = utcnow()

        def doubted() -> dict[str, datetime]:
            with session_scope(self.deps.engine) as session:
                return creates_in_flight.doubted_keys(session, [r.key for r in rows if r.key])

        since = await self.deps.blocking(doubted)
        hunted = [r for r in rows if r.key in since and max(since[r.key], aware(r.ready_at or now))
                  + timedelta(seconds=TWIN_HUNT_S) > now]

        async def hunt(row: Instance) -> list[str]:
            assert row.key is not None
            try:
                found = await p.find_all(row.key)
                twins = [r for r in found if r.is_machine and r.instance_id != row.cloud_instance_id]
                if not twins:
                    return []
                log.warning("allocation %s: %d twin(s) under key %s beside machine %s (a launch in "
                            "doubt landed late): terminating %s", row.id, len(twins), row.key,
                            row.cloud_instance_id, ", ".join(t.instance_id for t in twins))
                async with asyncio.timeout(TWIN_BUDGET_S):
                    await terminate_refs(p, twins, poll_interval_s=TWIN_POLL_S, heartbeat_every_s=5.0)
            except (ProviderError, TimeoutError):
                return []  # not seen gone yet: next round looks again (the delete is re-issued)
            return [t.instance_id for t in twins]

        gone = await heartbeating(asyncio.gather(*(hunt(r) for r in hunted)), 5.0, "hunting twins")
        return {row.id: ids for row, ids in zip(hunted, gone, strict=True) if ids}

    async def _tell(self, workflow_id: str, reason: str, *, preempted: bool = False) -> bool:
        assert self.deps.client is not None, "ActivityDeps.client is set by build_worker"
        try:
            await client_calls.signal(self.deps.client, workflow_id, wf.ALLOCATION.machine_lost,
                                      MachineLost(reason=reason, preempted=preempted))
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return False  # the allocation already closed
            raise
        return True

    def _running_jobs(self, allocation_ids: list[str]) -> dict[str, str]:
        """allocation id -> the managed job running on it (a running job names its allocation)."""
        with session_scope(self.deps.engine) as session:
            found = session.exec(select(Job.allocation_id, Job.id).where(
                col(Job.allocation_id).in_(allocation_ids), Job.status == JobStatus.RUNNING)).all()
        return {str(alloc): str(job) for alloc, job in found if alloc is not None}

    async def _pass_notices(self, connection_id: str, noticed: list[tuple[Instance, InstanceStatus]],
                            unanswered: set[str]) -> None:
        """Tell the job running on each machine under a notice this worker has not passed on yet
        (`_NOTICED`: the previous rounds'); a machine no longer under notice is forgotten, one the
        cloud gave no answer about this round is kept. No job there: nothing to tell."""
        before = _NOTICED.get(connection_id, set())
        seen = {row.id for row, _ in noticed} | (before & unanswered)
        fresh = [(row, st) for row, st in noticed if row.id not in before]
        jobs = await self.deps.blocking(self._running_jobs, [row.id for row, _ in fresh]) if fresh else {}
        told: set[str] = set()
        for row, st in fresh:
            job_id = jobs.get(row.id)
            if job_id is None or await self._notify(job_id, row, st):
                told.add(row.id)
        remembered = (seen - {row.id for row, _ in fresh}) | told
        if remembered:
            _NOTICED[connection_id] = remembered
        else:
            _NOTICED.pop(connection_id, None)

    async def _notify(self, job_id: str, row: Instance, st: InstanceStatus) -> bool:
        """Send the job its machine's notice; False when it could not be sent (asked again next round)."""
        assert self.deps.client is not None, "ActivityDeps.client is set by build_worker"
        word = f": {st.detail}" if st.detail and st.detail != st.state.value else ""
        reason = f"the cloud will preempt machine {row.cloud_instance_id} (interruption notice{word})"
        try:
            await client_calls.signal(self.deps.client, job_workflow_id(job_id), wf.JOB.preemption_notice,
                                      PreemptionNotice(allocation_id=row.id, reason=reason))
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return True  # the job already ended: nothing left to tell
            log.warning("watch: the preemption notice for job %s did not go (%s); next round tries again",
                        job_id, e)
            return False
        return True


async def start_watch(client: Client, task_queue: str, connection_id: str, interval_s: float) -> None:
    """The connection's watch, started unless it runs already (any number of callers)."""
    request = WatchRequest(connection_id=connection_id, interval_s=interval_s)
    await client_calls.start(client, wf.WATCH, request, workflow_id=watch_workflow_id(connection_id),
                             task_queue=task_queue, use_existing=True)


async def start_all_watches(client: Client, deps: ActivityDeps, task_queue: str) -> int:
    """A watch for every connection and SSH fleet (a worker's start: connections saved before
    watches existed; fleets, whose watch otherwise starts with their first allocation)."""
    def ids() -> list[str]:
        with session_scope(deps.engine) as session:
            return list(session.exec(select(Connection.id)).all()) + fleets.all_fleet_ids(session)

    connection_ids = await deps.blocking(ids)
    for connection_id in connection_ids:
        await start_watch(client, task_queue, connection_id, deps.watch_interval_s)
    return len(connection_ids)

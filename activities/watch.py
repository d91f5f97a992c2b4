"""The watch's one activity: ask the cloud about every ready machine of a connection (its listing,
one call a page: `statuses`), and tell the allocation of each one the cloud reports gone, stopped
or broken (its `machine_lost` signal). The machines the cloud shows alive are then sampled for
idleness (activities/idle.py), one SSH login each — so every sample's rate is the watch's interval."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

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
from messages.ids import watch_workflow_id
from messages.watch import WatchInput, WatchReport, WatchRequest
from providers.base import CloudProvider, InstanceRef, InstanceState, InstanceStatus, ProviderError
from providers.ssh_fleet import SshFleetProvider
from store import creates_in_flight, fleets
from store.db import session_scope
from store.models import Connection, Fleet, Instance, utcnow
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


def aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # SQLite drops the zone


def lost_reason(instance_id: str, st: InstanceStatus | None) -> str | None:
    """Why a ready machine counts as lost, or None while the cloud shows it alive."""
    if st is None:
        return f"the cloud no longer lists machine {instance_id}"
    if st.state in _ALIVE:
        return None
    word = f" ({st.detail})" if st.detail and st.detail != st.state.value else ""
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
        for row, answer in zip(rows, answers, strict=True):
            if isinstance(answer, ProviderError):
                continue  # no answer about this one: ask again next round
            if isinstance(answer, BaseException):
                raise answer
            reason = lost_reason(str(row.cloud_instance_id), answer)
            if reason is None:
                alive.append(row)
            elif await self._tell(row.workflow_id, reason):
                report.lost[row.id] = reason
                metrics.watch_lost(target.cloud)
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

    async def _tell(self, workflow_id: str, reason: str) -> bool:
        assert self.deps.client is not None, "ActivityDeps.client is set by build_worker"
        try:
            await client_calls.signal(self.deps.client, workflow_id, wf.ALLOCATION.machine_lost,
                                      MachineLost(reason=reason))
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return False  # the allocation already closed
            raise
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

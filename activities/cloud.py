"""Cloud activities: thin wrappers around one adapter call each, by connection id."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import capacity_memory, lease
from activities.deps import ActivityDeps, heartbeating
from activities.errors import provider_errors
from activities.records import record_allocation
from activities.watch import start_watch
from messages import activities as acts
from messages.activities import (
    CreateInput,
    PlanInput,
    PlanResult,
    TerminateInput,
    ValidateInput,
    ValidateResult,
    WaitRunningInput,
)
from messages.allocation import AllocateRequest, CloudTarget
from messages.enums import ConnectionStatus, ErrorKind
from providers import registry
from providers.base import (
    BootLease,
    Capabilities,
    CloudProvider,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    LaunchRequirements,
    LaunchSpec,
    Ownership,
    ProviderError,
    on_launch_send,
)
from providers.market import CloudAnswer, Source, gather_offers
from providers.shared_statuses import SharedStatuses
from store import capacity, creates_in_flight, projects, spend
from store.db import session_scope
from store.models import CapacityRefusal, Connection, Instance, utcnow

# A cloud that has not listed its offers by then is reported and planning goes on without it.
PLAN_TIMEOUT_S = 60.0
# The longest a plan waits on the clouds' Retry-After before asking again: a cloud that asks for
# more (a daily window) is asked again sooner, and the plan's attempts end with its reason.
RATE_LIMIT_WAIT_MAX_S = 300.0
# Re-issue the delete after this many poll intervals while the cloud shows the machine alive and not
# terminating (it dropped the delete): counted in time, not polls, so polls answered faster (a shared
# listing) do not re-issue it sooner.
_TERMINATE_REISSUE_POLLS = 10

log = logging.getLogger(__name__)


class CloudActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=acts.VALIDATE_ALLOCATION.name)
    def validate_allocation(self, inp: ValidateInput) -> ValidateResult:
        """Each target's capabilities; refuse (with every cloud's reason) when none can do it."""
        if inp.record is not None:
            record_allocation(self.deps, inp.record)  # first: a refused request still has its row
        self.deps.write_marks_sync(inp)
        req, caps, skipped = inp.request, {}, []
        for target in req.all_targets():
            try:
                caps[target.cloud] = self._validate(req, target)
            except ApplicationError as e:
                skipped.append(f"{target.cloud} ({target.connection_id}): {e.message}")
        if not caps:
            raise ApplicationError("no cloud can serve this request: " + "; ".join(skipped),
                                   type=ErrorKind.UNSUPPORTED, non_retryable=True)
        return ValidateResult(capabilities=caps, skipped=skipped)

    def _validate(self, req: AllocateRequest, target: CloudTarget) -> Capabilities:
        """Refuse what this cloud cannot do, with its reason, before any planning."""
        with provider_errors():
            caps = registry.capabilities(target.cloud)
        if registry.is_fleet(target.cloud):
            self.deps.load_fleet(target.connection_id)  # the fleet exists (not found: non-retryable)
            with provider_errors():
                caps.check(LaunchRequirements(spot=req.spot, ports=req.ports, image=req.image,
                                              region=req.region, k3s=req.k3s, max_hours=req.max_hours))
            return caps
        conn = self.deps.load_connection(target.connection_id)
        if conn.provider != target.cloud:
            raise ApplicationError(f"connection {conn.id!r} is for {conn.provider!r}, not {target.cloud!r}",
                                   type=ErrorKind.INVALID_REQUEST, non_retryable=True)
        if conn.status == ConnectionStatus.REMOVING:
            raise ApplicationError(f"connection {conn.id!r} is being removed", type=ErrorKind.INVALID_REQUEST,
                                   non_retryable=True)
        with provider_errors():
            caps.check(LaunchRequirements(spot=req.spot, ports=req.ports, image=req.image,
                                          region=req.region, k3s=req.k3s, max_hours=req.max_hours))
        return caps

    @activity.defn(name=acts.PLAN_ALLOCATION.name)
    async def plan_allocation(self, inp: PlanInput) -> PlanResult:
        """Offers from every target at once (providers/market.py), merged cheapest first, each naming
        its connection; live, no cache (plans at once share listings that began after each asked).
        A target that fails, is slow or cannot serve the query is reported, not fatal, while another
        answered."""
        await self.deps.write_marks(inp)

        def source(target: CloudTarget) -> Source:
            async def adapter() -> CloudProvider:
                return await self.deps.provider(target)
            with provider_errors():
                caps = registry.capabilities(target.cloud)
            return Source(connection_id=target.connection_id, cloud=target.cloud, capabilities=caps,
                          adapter=adapter)

        answer = await heartbeating(
            gather_offers([source(t) for t in inp.targets], inp.query, timeout_s=PLAN_TIMEOUT_S,
                          live=self.deps.live_offers), 1.0,
            "planning")
        failures = [f"{a.cloud} ({a.connection_id}): {a.reason}" for a in answer.clouds
                    if a.status != "answered"]
        unanswered = [a for a in answer.clouds if a.status in ("failed", "timeout")]
        if not answer.offers and unanswered:
            # Nothing to plan from: Temporal retries the planning while asking again may help (a
            # timeout, a 5xx); refused credentials or a bad request stop it with the reason.
            retry = any(a.status == "timeout" or a.retryable for a in unanswered)
            raise ApplicationError("no cloud answered with offers: " + "; ".join(failures),
                                   type=ErrorKind.TRANSIENT if retry else unanswered[0].error,
                                   non_retryable=not retry, next_retry_delay=rate_limit_wait(unanswered))
        offers, remembered = answer.offers, list[str]()
        if self.deps.capacity_memory and offers:
            # Offers a refusal still remembered covers go last (store/capacity.py), each said why.
            refusals = await self.deps.blocking(self._live_refusals, [t.connection_id for t in inp.targets])
            offers, remembered = capacity_memory.order_offers(offers, refusals, utcnow())
        return PlanResult(offers=offers, failures=failures, remembered=remembered)

    def _live_refusals(self, connection_ids: list[str]) -> list[CapacityRefusal]:
        with session_scope(self.deps.engine) as session:
            return capacity.live_refusals(session, connection_ids, utcnow())

    @activity.defn(name=acts.CREATE_INSTANCE.name)
    async def create_instance(self, inp: CreateInput) -> InstanceRef:
        """Find-or-create by key. The installation's key is always added so gpuprov can log in,
        and the owner tag is this deployment's installation id.

        On a cloud without an idempotency token (`create_in_flight_s` > 0), a create whose answer
        never came (a timeout, a dropped connection, a crash — on any worker) may still land: no
        attempt launches again until that launch shows up or the cloud's in-flight window after it
        was sent has passed. When it was sent and whether its answer came is kept in the database
        (written right before the launch request leaves — not before the adapter's own lookups and
        pacing, so a create that fails before it waits for nothing), not in memory or heartbeats that
        a crash can lose."""
        await self.deps.write_marks(inp)
        if registry.is_fleet(inp.target.cloud) and self.deps.client is not None:
            # A fleet is saved without a workflow of the worker's: its watch starts with its first
            # allocation (once; a running watch is joined).
            await start_watch(self.deps.client, activity.info().task_queue, inp.target.connection_id,
                              self.deps.watch_interval_s)
        # No create under this key can have been sent before the activity's first attempt was
        # scheduled: the ledger's floor for a cloud clock that runs behind.
        first_scheduled = activity.info().scheduled_time
        remember = self.deps.capacity_memory and not registry.is_fleet(inp.target.cloud)
        try:
            ref = await self._create(inp)
        except ApplicationError as e:
            kind = capacity_memory.KIND_OF_ERROR.get(e.type or "")
            if remember and kind is not None:
                await self._remember(inp, e, kind)
            raise
        # The machine accrues cost from here: the ledger's interval is opened before the answer is
        # returned (a crash before this write retries the create, which finds the machine).
        await self.deps.blocking(open_spend, self.deps.engine, inp, ref, first_scheduled)
        if remember:
            await self.deps.blocking(self._clear_refusals, inp)
        return ref

    async def _remember(self, inp: CreateInput, e: ApplicationError, kind: str) -> None:
        """The next allocations on this connection try the refused scope last (store/capacity.py).
        Best effort: the refusal itself is what the workflow acts on, raised unchanged."""
        scope = capacity_memory.refused_scope(e.details, inp.offer, inp.target.connection_id)

        def write() -> None:
            with session_scope(self.deps.engine) as session:
                capacity.remember_refusal(session, scope, kind, e.message, utcnow())
        try:
            await self.deps.blocking(write)
        except Exception:
            log.warning("could not remember the %s refusal of %s", kind, scope, exc_info=True)

    def _clear_refusals(self, inp: CreateInput) -> None:
        """A create there worked: what was remembered as refused there is forgotten."""
        o = inp.offer
        with session_scope(self.deps.engine) as session:
            capacity.clear_success(session, o.provider, inp.target.connection_id, o.region, o.zone,
                                   o.instance_type, utcnow())

    def _lease_at_boot(self, inp: CreateInput) -> BootLease | None:
        """The lease's timer for the machine's user data, where its cloud installs it at boot."""
        with session_scope(self.deps.engine) as session:
            row = session.get(Instance, inp.allocation_id)
            return lease.at_boot(inp.target.cloud, row.lease_hours if row is not None else None)

    async def _create(self, inp: CreateInput) -> InstanceRef:
        public = await self.deps.blocking(self.deps.public_key)
        at_boot = await self.deps.blocking(self._lease_at_boot, inp)
        spec = LaunchSpec(
            key=inp.key,
            owner=Ownership(installation_id=self.deps.installation_id, allocation_id=inp.allocation_id),
            # first: some clouds (Lambda) take one key natively and the rest via cloud-init
            ssh_public_keys=[public, *(k for k in inp.ssh_public_keys if k != public)],
            image=inp.image, ports=inp.ports, k3s=inp.k3s_at_boot, lifetime_s=inp.lifetime_s,
            k8s_api_from=inp.k8s_api_from, lease=at_boot)
        with provider_errors():
            p = await self.deps.provider(inp.target)
            await heartbeating(p.prepare(inp.offer.region), inp.heartbeat_every_s, "preparing")
            window = type(p).capabilities.create_in_flight_s
            if window <= 0:
                return await heartbeating(p.create(inp.offer, spec), inp.heartbeat_every_s, "creating")
            found, ever_sent = await self._await_in_flight(p, inp, window)
            if found is not None:
                return found
            # Nothing ever sent under the key: nothing to look it up for (LaunchSpec.unsent).
            spec = spec.model_copy(update={"unsent": not ever_sent})
            sent = False

            async def sending() -> None:
                # Right before the launch request leaves (after the adapter's lookup, key setup and
                # pacing: providers/base.py): a create that fails, or whose worker dies, before
                # then sent nothing, and its retry does not wait the window.
                nonlocal sent
                await self.deps.blocking(self._sends, creates_in_flight.create_sent, inp.key)
                sent = True

            try:
                with on_launch_send(sending):
                    ref = await heartbeating(p.create(inp.offer, spec), inp.heartbeat_every_s, "creating")
            except ProviderError as e:
                if sent:  # else nothing left: whatever an earlier attempt sent is as it was
                    # The cloud answered: whatever it refused is not in flight. No answer: the launch
                    # may still land, even after the window (the watch then hunts for its twin).
                    record = (creates_in_flight.create_doubted if e.in_doubt
                              else creates_in_flight.create_answered)
                    await self.deps.blocking(self._sends, record, inp.key)
                raise
            await self.deps.blocking(self._sends, creates_in_flight.create_answered, inp.key)
            return ref

    def _sends(self, record: Callable[[Session, str], object], key: str) -> None:
        with session_scope(self.deps.engine) as session:
            record(session, key)

    async def _await_in_flight(self, p: CloudProvider, inp: CreateInput,
                               window: float) -> tuple[InstanceRef | None, bool]:
        """The machine an unanswered earlier launch made, once it lands; None when none is in
        doubt, or the window after it was sent has passed without it (launching is safe then). And
        whether any create was ever sent under the key."""
        def sends() -> tuple[bool, datetime | None]:
            with session_scope(self.deps.engine) as session:
                return creates_in_flight.sends_under(session, inp.key)

        ever_sent, sent_at = await self.deps.blocking(sends)
        if sent_at is None:
            return None, ever_sent
        # An earlier launch got no answer (a timeout; a worker that died with it in flight).
        await self.deps.blocking(self._sends, creates_in_flight.create_doubted, inp.key)
        deadline = sent_at.timestamp() + window
        while True:
            found = await heartbeating(p.find(inp.key), inp.heartbeat_every_s, "awaiting an earlier launch")
            if found is not None or time.time() >= deadline:
                return found, True
            await asyncio.sleep(inp.poll_interval_s)

    @activity.defn(name=acts.WAIT_RUNNING.name)
    async def wait_running(self, inp: WaitRunningInput) -> InstanceStatus:
        if inp.record is not None:  # the machine's id recorded before anything else (watch, sweep)
            await self.deps.blocking(record_allocation, self.deps, inp.record)
        await self.deps.write_marks(inp)
        # The polls below may last minutes, for a thousand booting machines at once, and the SDK
        # keeps `inp` until they end: the snapshot and marks just written are not kept with it
        # (about 15 KB each: bench (d), `python -m bench.heap`). A retry decodes its input anew.
        inp.record, inp.marks = None, []
        pause = boot_polls(inp.poll_interval_s, registry.capabilities(inp.target.cloud).boot_timeout_s)
        with provider_errors():
            p = await self.deps.provider(inp.target)
            while True:
                # Heartbeats continue while a slow cloud answers. Polls of other machines booting on the
                # same connection at once share its listing (providers/shared_statuses.py).
                polled = poll_status(p, inp.ref, self.deps.statuses)
                st = await heartbeating(polled, inp.heartbeat_every_s, "waiting for running")
                if st is None or st.state in (InstanceState.TERMINATED, InstanceState.TERMINATING):
                    # The cloud's word on why, where it gives one (Modal: the sandbox's lifetime,
                    # --max-hours, ran out before it was ready): "disappeared" alone hides the cause.
                    ended = (f"ended while booting: {st.detail}" if st is not None and st.detail
                             else "disappeared while booting")
                    raise ApplicationError(f"instance {inp.ref.instance_id} {ended}",
                                           type=ErrorKind.INSTANCE_GONE, non_retryable=True)
                if st.state == InstanceState.ERROR:
                    raise ApplicationError(f"instance {inp.ref.instance_id} failed: {st.detail or 'error'}",
                                           type=ErrorKind.INSTANCE_FAILED, non_retryable=True)
                if st.state == InstanceState.RUNNING and st.host:
                    return st
                await asyncio.sleep(next(pause))

    @activity.defn(name=acts.TERMINATE_AND_VERIFY.name)
    async def terminate_and_verify(self, inp: TerminateInput) -> None:
        """Terminate by key: the ref and every machine the cloud shows under the key (a duplicate
        that slipped through, a machine whose create answer was lost); return once the provider
        shows each gone (not when the delete was accepted), then release the key's side resources
        (also those of a launch that never happened)."""
        await self.deps.write_marks(inp)
        with provider_errors():
            p = await self.deps.provider(inp.target)
            await terminate_key(p, inp.key, [inp.ref] if inp.ref else [], poll_interval_s=inp.poll_interval_s,
                                heartbeat_every_s=inp.heartbeat_every_s, statuses=self.deps.statuses)
        # The cloud shows every machine under the key gone: the attempt stops accruing.
        await self.deps.blocking(close_spend, self.deps.engine, inp.key)


# A boot is polled at the request's interval for its first stretch (a fast boot is seen at once),
# then less and less often, up to a 60th of the cloud's broken-boot bound
# (Capabilities.boot_timeout_s): every 20 s after the first 20 s on a cloud whose boots take
# minutes (20 min is broken there), every 2 s throughout on one whose boots take seconds. A
# thousand machines booting for minutes then cost the worker (and the cloud's rate limit) a poll
# each per 20 s, not per 2 s; a boot is seen at most that much late.
BOOT_POLL_GROWTH = 1.5
BOOT_POLLS_PER_TIMEOUT = 60


def rate_limit_wait(unanswered: list[CloudAnswer]) -> timedelta | None:
    """When every cloud that did not answer was rate limited: the soonest any of them said it would
    take calls again (at most RATE_LIMIT_WAIT_MAX_S), so the plan's next attempt lands after that
    window instead of spending its attempts inside it (an acceptance run under `make fuzz` failed
    so: RunPod's minute window outlasted eight attempts 1-2 s apart). Otherwise None: the retry
    policy's backoff (a timeout or a 5xx may clear sooner)."""
    waits = [a.retry_after for a in unanswered if a.retry_after is not None]
    if not waits or len(waits) < len(unanswered):
        return None
    return timedelta(seconds=min(max(min(waits), 0.1), RATE_LIMIT_WAIT_MAX_S))


def boot_polls(first_s: float, boot_timeout_s: float | None) -> Iterator[float]:
    """The pauses between a booting machine's polls: `first_s` until the cloud's ceiling has
    passed, then growing to that ceiling."""
    ceiling = max(first_s, (boot_timeout_s or 0.0) / BOOT_POLLS_PER_TIMEOUT)
    waited, pause = 0.0, first_s
    while True:
        yield pause
        waited += pause
        if waited >= ceiling:
            pause = min(ceiling, pause * BOOT_POLL_GROWTH)


def open_spend(engine: sa.Engine, inp: CreateInput, ref: InstanceRef,
               not_before: datetime | None = None) -> None:
    """Open the attempt's ledger interval at the offer's price (spot at its price), unless open: from
    the cloud's own creation time when the adapter gives one (clamped to [not_before, now], see
    spend.start_of), else now (the create's answer, or the first sighting of a machine whose answer
    was lost)."""
    started = spend.start_of(ref.created_at, now=utcnow(), not_before=not_before)
    with session_scope(engine) as session:
        row = session.get(Instance, inp.allocation_id)
        conn = session.get(Connection, inp.target.connection_id)
        project = (row.project if row is not None
                   else conn.project if conn is not None else projects.DEFAULT_PROJECT)
        spend.open_interval(session, key=inp.key, instance_id=inp.allocation_id, project=project,
                            connection_id=inp.target.connection_id, provider=inp.target.cloud,
                            rate_per_hour=inp.offer.price_per_hour, started_at=started)


def close_spend(engine: sa.Engine, key: str) -> None:
    """Close the attempt's ledger interval now, if it is open (a retried terminate changes nothing)."""
    with session_scope(engine) as session:
        spend.close_interval(session, key, utcnow())


def poll_status(p: CloudProvider, ref: InstanceRef, statuses: SharedStatuses | None
                ) -> Awaitable[InstanceStatus | None]:
    """What `p.get(ref)` says; from the connection's listing, when other polls of it overlap this one
    (providers/shared_statuses.py), given the worker's `statuses`."""
    return statuses.status(p, ref) if statuses is not None else p.get(ref)


async def terminate_key(p: CloudProvider, key: str, refs: list[InstanceRef], *, poll_interval_s: float,
                        heartbeat_every_s: float, statuses: SharedStatuses | None = None) -> None:
    """Terminate `refs` and everything `find_all(key)` shows, until the cloud lists nothing under
    the key that is not seen gone; then `release(key)`."""
    gone: set[str] = set()
    while True:
        found = await heartbeating(p.find_all(key), heartbeat_every_s, f"finding {key}")
        pending = {r.instance_id: r for r in [*refs, *found] if r.instance_id not in gone}
        if not pending:
            break
        await terminate_refs(p, list(pending.values()), poll_interval_s=poll_interval_s,
                             heartbeat_every_s=heartbeat_every_s, statuses=statuses)
        gone |= set(pending)
        refs = []
    await heartbeating(p.release(key), heartbeat_every_s, f"releasing {key}")


async def terminate_refs(p: CloudProvider, refs: list[InstanceRef], *, poll_interval_s: float,
                         heartbeat_every_s: float, statuses: SharedStatuses | None = None) -> None:
    """Terminate each of `refs` and return once the cloud shows every one gone (the delete is
    re-issued now and then while a machine still shows alive). Given the worker's `statuses`, polls
    of machines torn down at once on one connection share its listing (providers/shared_statuses.py);
    a machine the listing no longer shows is asked by id: gone is what the cloud says of it."""
    async def one(ref: InstanceRef) -> None:
        reissue_after, st = None, None  # monotonic time; the last state seen
        while True:
            if reissue_after is None or (time.monotonic() >= reissue_after and st is not None
                                         and st.state != InstanceState.TERMINATING):
                # heartbeats continue while the cloud deletes (an adapter may wait on the delete)
                await heartbeating(p.terminate(ref), heartbeat_every_s, f"terminating {ref.instance_id}")
                reissue_after = time.monotonic() + _TERMINATE_REISSUE_POLLS * poll_interval_s
            st = await heartbeating(poll_status(p, ref, statuses), heartbeat_every_s,
                                    f"waiting for {ref.instance_id} gone")
            if st is None or st.state == InstanceState.TERMINATED:
                return
            await asyncio.sleep(poll_interval_s)

    # Each runs to its end (gone or failed) before the first failure, if any, is raised.
    for outcome in await asyncio.gather(*(one(r) for r in refs), return_exceptions=True):
        if isinstance(outcome, BaseException):
            raise outcome

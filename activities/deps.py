"""What activities need from the outside world, injectable for tests: the database, the
secret box, this deployment's installation id, the adapters of this worker process, and (for
TerminateWorkflow) a Temporal client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
import sqlalchemy as sa
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError

from activities import metrics
from activities.errors import provider_errors
from activities.ssh_sessions import MachineSessions
from messages.activities import CloudTarget, Marked
from messages.enums import ErrorKind
from providers import pacing, registry
from providers.base import CloudProvider, ConnectionOptions
from providers.fleet_addresses import FleetAddresses
from providers.market import LiveOffers
from providers.shared_statuses import SharedStatuses
from providers.ssh_fleet import SshFleetProvider
from store import connections, fleets, instances, pacing_slots
from store.db import session_scope
from store.identity import ssh_identity
from store.models import Connection
from store.secrets import SecretBox, SecretError

T = TypeVar("T")

# An adapter replaced because its connection changed may still serve calls in flight: it is
# closed this long after, not at once.
RETIRED_ADAPTER_GRACE_S = 120.0


class ProviderCache:
    """One adapter per connection per worker process, reused by every activity: its HTTP
    connection pool and TLS context (or SDK client) are made once, not per call. Rebuilt when
    the connection's credentials or options change (a re-keyed account)."""

    def __init__(self) -> None:
        self._adapters: dict[str, tuple[str, CloudProvider]] = {}
        self.builds = 0  # how many adapters were made (tests, metrics)

    @staticmethod
    def fingerprint(row: Connection) -> str:
        return connections.fingerprint(row)

    def get(self, row: Connection, build: Callable[[Connection], CloudProvider]) -> CloudProvider:
        """The cached adapter for `row`, or a new one from `build(row)` when none or stale.
        Called on the event loop only (no lock needed: nothing here awaits)."""
        return self.keyed(row.id, self.fingerprint(row), lambda: build(row))

    def keyed(self, key: str, fp: str, build: Callable[[], CloudProvider]) -> CloudProvider:
        """The cached adapter under `key` (a connection or fleet id) while `fp` is unchanged."""
        cached = self._adapters.get(key)
        if cached is not None and cached[0] == fp:
            return cached[1]
        adapter = metrics.instrument(build())  # every cloud call of every activity measured, here
        self.builds += 1
        self._adapters[key] = (fp, adapter)
        if cached is not None:
            self._retire(cached[1])
        return adapter

    @staticmethod
    def _retire(adapter: CloudProvider) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(RETIRED_ADAPTER_GRACE_S, lambda: loop.create_task(adapter.aclose()))

    async def aclose(self) -> None:
        adapters = [a for _, a in self._adapters.values()]
        self._adapters.clear()
        for adapter in adapters:
            await adapter.aclose()


@dataclass
class ActivityDeps:
    engine: sa.Engine
    box: SecretBox
    installation_id: str
    client: Client | None = None  # set by build_worker
    watch_interval_s: float = 60.0  # each connection's watch lists its machines this often
    # URL prefixes a stored connection's endpoint may use besides its cloud's documented hosts
    # (GPUPROV_ALLOWED_ENDPOINTS): checked again here, where adapters are built, not only by the API.
    allowed_endpoints: list[str] = field(default_factory=list)
    # Where INSTALL_K3S fetches the k3s installer (GPUPROV_K3S_INSTALL_URL).
    k3s_install_url: str = "https://get.k3s.io"
    # Which addresses a fleet's hosts may have (GPUPROV_FLEET_ALLOWED_NETWORKS, this installation's own
    # services): checked again where a probe connects, as the API checked it when the fleet was saved.
    fleet_addresses: FleetAddresses = field(default_factory=FleetAddresses)
    # Where a policy's webhook may POST (GPUPROV_WEBHOOK_ALLOWLIST), checked again before each call.
    webhook_allowlist: list[str] = field(default_factory=list)
    webhook_timeout_s: float = 10.0
    # How often a running job's GPUs are sampled with nvidia-smi (GPUPROV_JOB_METRICS_INTERVAL_S).
    job_metrics_interval_s: float = 30.0
    # Capacity memory (GPUPROV_CAPACITY_MEMORY): refusals remembered across allocations, planned last.
    capacity_memory: bool = True
    providers: ProviderCache = field(default_factory=ProviderCache, repr=False)
    # Each connection's offers listing, shared by the plans that ask at once (providers/market.py);
    # None: each plan makes its own call (bench `paced` measures the difference).
    live_offers: LiveOffers | None = field(default_factory=LiveOffers, repr=False)
    # State polls — booting machines', machines being torn down — sharing each connection's listing
    # while they overlap; None: a get each (bench `paced` measures the difference).
    statuses: SharedStatuses | None = field(default_factory=SharedStatuses, repr=False)
    # The SSH connection an allocation's SSH steps share, per machine (activities/ssh_sessions.py).
    ssh_sessions: MachineSessions = field(default_factory=MachineSessions, repr=False)
    _ssh_key: asyncssh.SSHKey | None = field(default=None, repr=False)
    _public_key: str | None = field(default=None, repr=False)
    # Database reads/writes and decryption run here, never on the event loop. Sized apart from
    # asyncio's small default pool so 200 concurrent activities do not queue behind 6 threads.
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=32, thread_name_prefix="gpuprov-db"),
        repr=False)

    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call (SQL, decryption) on the executor."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, partial(fn, *args, **kwargs))

    async def aclose(self) -> None:
        """What this process holds open for the activities, closed as it exits: every adapter (its
        HTTP pool or SDK clients, and the CA bundle file an SDK adapter wrote to the temporary
        directory, which would otherwise be left there) and the machines' shared SSH logins."""
        await self.ssh_sessions.close_all()
        await self.providers.aclose()

    @classmethod
    def from_settings(cls) -> ActivityDeps:
        from settings import get_settings
        from store.db import default_engine
        from store.identity import installation_id
        from store.secrets import default_box

        s = get_settings()
        engine = default_engine()
        return cls(engine=engine, box=default_box(),
                   installation_id=installation_id(engine, s.installation_id, legacy_home=s.home),
                   watch_interval_s=s.watch_interval_s, allowed_endpoints=list(s.allowed_endpoint_prefixes()),
                   webhook_allowlist=list(s.webhook_prefixes()), webhook_timeout_s=s.webhook_timeout_s,
                   k3s_install_url=s.k3s_install_url, job_metrics_interval_s=s.job_metrics_interval_s,
                   fleet_addresses=FleetAddresses.from_settings(s), capacity_memory=s.capacity_memory)

    async def write_marks(self, inp: Marked) -> None:
        """The allocation's pending phase marks, as events, before the activity's own work."""
        if inp.marks:
            await self.blocking(self.write_marks_sync, inp)

    def write_marks_sync(self, inp: Marked) -> None:
        if inp.marks:
            with session_scope(self.engine) as session:
                marks = [(m.status.value, m.phase.value) for m in inp.marks]
                instances.mark_phases(session, inp.allocation_id, marks)

    def load_connection(self, connection_id: str) -> Connection:
        with session_scope(self.engine) as session:
            row = session.get(Connection, connection_id)
        if row is None:
            raise ApplicationError(f"connection {connection_id!r} not found",
                                   type=ErrorKind.CONNECTION_NOT_FOUND, non_retryable=True)
        return row

    def load_fleet(self, fleet_id: str) -> fleets.SealedFleet:
        with session_scope(self.engine) as session:
            found = fleets.sealed_fleet(session, fleet_id)
        if found is None:
            raise ApplicationError(f"fleet {fleet_id!r} not found", type=ErrorKind.CONNECTION_NOT_FOUND,
                                   non_retryable=True)
        return found

    async def provider(self, target: CloudTarget) -> CloudProvider:
        """The adapter for `target` (decrypted credentials inside it, never logged or returned).
        The connection row is read on a thread, heartbeating meanwhile: under load it can queue.
        A fleet kind's target names a fleet: its adapter is built from the Fleet row."""
        if registry.is_fleet(target.cloud):
            fleet = await heartbeating(self.blocking(self.load_fleet, target.connection_id), 1.0,
                                       "loading fleet")
            return self.providers.keyed(fleet.id, fleet.fingerprint,
                                        lambda: self._build_fleet(target.cloud, fleet))
        row = await heartbeating(self.blocking(self.load_connection, target.connection_id), 1.0,
                                 "loading connection")
        if row.provider != target.cloud:
            raise ApplicationError(f"connection {row.id!r} is for {row.provider!r}, not {target.cloud!r}",
                                   type=ErrorKind.INVALID_REQUEST, non_retryable=True)
        return self.providers.get(row, self._build)

    def _build(self, row: Connection) -> CloudProvider:
        try:
            credentials = self.box.open(row.secret)
        except SecretError as e:
            raise ApplicationError(str(e), type=ErrorKind.SECRET_ERROR, non_retryable=True) from None
        with provider_errors():
            return registry.build(row.provider, credentials,
                                  options=ConnectionOptions(endpoint=row.endpoint, ca_bundle=row.ca_bundle),
                                  installation_id=self.installation_id,
                                  allowed_endpoints=self.allowed_endpoints)

    def _build_fleet(self, cloud: str, fleet: fleets.SealedFleet) -> CloudProvider:
        try:
            credentials = fleets.open_fleet(self.box, fleet)
        except SecretError as e:
            raise ApplicationError(str(e), type=ErrorKind.SECRET_ERROR, non_retryable=True) from None
        with provider_errors():
            adapter = registry.build(cloud, credentials, installation_id=self.installation_id)
        if isinstance(adapter, SshFleetProvider):
            adapter.pin_host_keys(fleet.host_keys, fleet.bastion_host_key)
            adapter.check_addresses(self.fleet_addresses)
        return adapter

    def public_key(self) -> str:
        if self._public_key is None:
            with session_scope(self.engine) as session:
                self._public_key, _ = ssh_identity(session, self.box)
        return self._public_key

    def private_key(self) -> asyncssh.SSHKey:
        if self._ssh_key is None:
            with session_scope(self.engine) as session:
                _, private = ssh_identity(session, self.box)
            self._ssh_key = asyncssh.import_private_key(private)
        return self._ssh_key


def share_pacing(home: Path, engine: sa.Engine) -> None:
    """Pace this process's cloud calls within each key's budget together with the host's other
    processes (lock files under `home`) and, where the database is PostgreSQL, every host's
    (providers/pacing.py, store/pacing_slots.py). The worker and each API process call it at start."""
    from settings import PACING_DIR

    pacing.shared_dir = home / PACING_DIR
    pacing.cross_host = pacing_slots.lanes(engine)


# When the activity running in this context last heartbeat, or first asked to (a list: set once
# per activity's task, then updated in place). None: not yet in this activity.
_last_beat: ContextVar[list[float] | None] = ContextVar("gpuprov_last_beat", default=None)


def _beat(detail: object, every_s: float) -> None:
    """Heartbeat unless this activity did — or began heartbeating — in the last half interval.

    Each heartbeat encodes and encrypts its details before the SDK's own throttle drops it, and a
    booting machine's poll loop calls `heartbeating` on every poll: beating each time cost ~5 % of
    the worker's CPU under bench (b)'s load (py-spy), for beats the server mostly never saw. A beat
    at an activity's very start tells the server nothing its start did not (the heartbeat timeout
    runs from the start), yet the SDK sends a first beat at once and the server writes it: ~2.3 ms
    of Temporal's CPU each, four per allocation (bench/RESULTS.md, forty-first round). So the first
    beat comes half an interval in, and an activity shorter than that sends none."""
    now = time.monotonic()
    last = _last_beat.get()
    if last is None:
        _last_beat.set([now])
    elif now - last[0] >= every_s / 2:
        activity.heartbeat(detail)
        last[0] = now


async def heartbeating(aw: Awaitable[T], every_s: float, detail: object) -> T:
    """Await `aw`, heartbeating meanwhile (at most once per half `every_s`), so a dead worker is
    noticed and a cancel arrives."""
    task = asyncio.ensure_future(aw)
    wait_s = every_s / 2  # the first beat half an interval in, then one an interval
    try:
        while True:
            _beat(detail, every_s)
            done, _ = await asyncio.wait({task}, timeout=wait_s)
            if done:
                return task.result()
            wait_s = every_s
    finally:
        if not task.done():
            task.cancel()
            # Cancelled, an awaitable may still end with an exception of its own: temporalio's
            # update call turns the cancel into WorkflowUpdateRPCTimeoutOrCancelledError (a job
            # cancelled while its machine boots). Read when it comes, or asyncio logs it as "Task
            # exception was never retrieved" with its traceback.
            task.add_done_callback(_read_outcome)


def _read_outcome(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()

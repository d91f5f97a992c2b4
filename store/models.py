"""SQL projection of gpuprov's state. Temporal owns in-flight operations; these tables are
what list pages read. Secrets are stored only as Fernet ciphertext (store/secrets.py)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from messages.enums import AllocationStatus, ConnectionStatus
from store.clock import utcnow

# The job queue's tables, re-exported: every table is imported from here (store/job_tables.py).
from store.job_tables import Job as Job
from store.job_tables import JobGpuSample as JobGpuSample
from store.job_tables import JobLimit as JobLimit
from store.job_tables import JobLogChunk as JobLogChunk
from store.job_tables import QueueLock as QueueLock
from store.job_tables import QueuePause as QueuePause
from store.job_tables import ReportedWorkload as ReportedWorkload


def table_of(model: type[SQLModel]) -> sa.Table:
    """A table model's Table, for statements and column lists that skip the ORM (SQLModel sets
    `__table__` on each table class but does not declare it to type checkers)."""
    return model.__table__  # type: ignore[attr-defined,no-any-return]


class Installation(SQLModel, table=True):
    """The deployment's identity: one row, shared by every worker and API process, so a create
    retried on any worker looks for the same names and tags (store/identity.py)."""

    id: str = Field(default="default", primary_key=True)
    installation_id: str
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class Project(SQLModel, table=True):
    """A tenant: every connection, instance and (later) fleet and workload belongs to one, and a
    project token sees only its own. `default` always exists (migration 0007)."""

    id: str = Field(primary_key=True)  # a slug (api/fields.py PROJECT_PATTERN)
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class ApiToken(SQLModel, table=True):
    """A project's API token. Only its hash is kept (tokens are 256-bit random, so a plain SHA-256
    is enough: nothing to guess); the token itself is shown once, when made."""

    __tablename__ = "api_token"

    id: str = Field(primary_key=True)  # public: names the token in lists and revocation
    project: str = Field(foreign_key="project.id", index=True)
    token_hash: str = Field(unique=True)
    label: str | None = None
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    revoked_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))


class Connection(SQLModel, table=True):
    """A verified cloud account. `secret` is the encrypted credentials dict."""

    id: str = Field(primary_key=True)
    project: str = Field(default="default", index=True)
    provider: str = Field(index=True)
    name: str
    endpoint: str | None = None  # API endpoint override (simulated clouds, private endpoints)
    ca_bundle: str | None = Field(default=None, sa_column=sa.Column(sa.Text))  # PEM for that endpoint
    account: str | None = None  # identity returned by verify()
    status: str = ConnectionStatus.CONNECTED
    error: str | None = None  # why it is being removed
    secret: bytes = Field(sa_column=sa.Column(sa.LargeBinary, nullable=False))
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    # The periodic health check's last answer (workflows/health.py): a HealthStatus, None until the
    # first check; why verify failed; when it was asked; how long verify took.
    health_status: str | None = None
    health_reason: str | None = None
    health_checked_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    health_latency_ms: int | None = None


# The statuses in which a machine may exist and bill (AllocationStatus.live), as SQL: the predicate of
# the live instances' partial index.
_LIVE_LITERALS = ", ".join(f"'{s.value}'" for s in sorted(AllocationStatus, key=lambda s: s.value) if s.live)
LIVE_PREDICATE = f"status IN ({_LIVE_LITERALS})"


class Instance(SQLModel, table=True):
    """One allocation, from request to verified teardown. `id` is the allocation id."""

    __table_args__ = (
        # A project's rows of one status, newest first (migration 0027).
        sa.Index("ix_instance_project_status_created_at", "project", "status", "created_at"),
        # The console's "active instances" page: the project's live rows in page order, so a page
        # reads its 50 rows, not every live one to sort them (0032). A query uses it only when its
        # status list is this one, written out (store/instances.py `is_live`).
        sa.Index("ix_instance_live_project_created_at", "project", "created_at", "id",
                 sqlite_where=sa.text(LIVE_PREDICATE), postgresql_where=sa.text(LIVE_PREDICATE)),
        # The providers list's live count and $/hr per connection, from the index alone (0032;
        # `status` too: SQLite reads the table for a column the index lacks, even one it settles).
        sa.Index("ix_instance_live_project_connection",
                 "project", "connection_id", "price_per_hour", "status",
                 sqlite_where=sa.text(LIVE_PREDICATE), postgresql_where=sa.text(LIVE_PREDICATE)),
    )

    id: str = Field(primary_key=True)
    name: str | None = None
    project: str = Field(default="default", index=True)
    provider: str = Field(index=True)
    connection_id: str
    workflow_id: str
    status: str = Field(default=AllocationStatus.PROVISIONING, index=True)
    phase: str = "validate"
    # what was asked
    gpu: str | None = None
    gpu_count: int | None = None
    region: str | None = None
    spot: bool | None = None
    # what was got
    instance_type: str | None = None
    offer_region: str | None = None
    price_per_hour: float | None = None
    cloud_instance_id: str | None = None
    key: str | None = None
    ssh_host: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None
    gpus_found: list[dict[str, Any]] | None = Field(default=None, sa_column=sa.Column(sa.JSON))
    note: str | None = None
    error: str | None = None
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    ready_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    terminated_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    # The SSH host key a cloud machine presented at its first login (SET_UP_MACHINE, trust on first use;
    # activities/machine_ssh.py): every later connection accepts only it. An OpenSSH public key line;
    # `host_key_machine` is the cloud_instance_id it was pinned for (another attempt pins afresh).
    # Fleet hosts keep theirs on fleet_host (the probe's pin).
    host_key: str | None = None
    host_key_machine: str | None = None
    host_key_pinned_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    # The machine's lease in hours (activities/lease.py; 0: off, None: started before leases).
    lease_hours: float | None = None


class Attempt(SQLModel, table=True):
    """One offer tried by an allocation: the decision history shown to users."""

    id: int | None = Field(default=None, primary_key=True)
    instance_id: str = Field(index=True, foreign_key="instance.id")
    seq: int
    provider: str
    instance_type: str
    region: str
    spot: bool = False
    price_per_hour: float
    outcome: str  # an AttemptOutcome
    reason: str | None = None
    at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class InstanceEvent(SQLModel, table=True):
    """One status/phase transition, in order: what `gpuprov up` streams, with none skipped."""

    id: int | None = Field(default=None, primary_key=True)
    instance_id: str = Field(index=True, foreign_key="instance.id")
    status: str
    phase: str
    at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class IdempotencyRecord(SQLModel, table=True):
    """One Idempotency-Key as first used: the request it came with (a fingerprint) and the resource
    it names. A retry with the same key and body finds that resource; another body is refused. The
    primary key makes the claim race-safe: of two concurrent first uses, one inserts, the other reads."""

    __tablename__ = "idempotency_key"

    scope: str = Field(primary_key=True)  # "<kind>:<project>", e.g. "instances:default"
    key_hash: str = Field(primary_key=True)  # sha256 of the key (the key itself is not kept)
    fingerprint: str  # of the request body
    resource_id: str  # derived from (kind, project, key): the same on every retry
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class SshIdentity(SQLModel, table=True):
    """The installation's own SSH key pair, added to every machine so activities can log in."""

    id: str = Field(default="default", primary_key=True)
    public_key: str
    private_key: bytes = Field(sa_column=sa.Column(sa.LargeBinary, nullable=False))  # encrypted
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class SweepSighting(SQLModel, table=True):
    """A machine the sweep judged an orphan or a duplicate, since when: it is removed only once the
    grace period has passed since `first_seen`, so a create in flight is never swept. Dropped when
    the machine is judged its allocation's again, is removed, or is no longer listed."""

    provider: str = Field(primary_key=True)
    instance_id: str = Field(primary_key=True)
    key: str
    connection_id: str
    allocation_id: str | None = None
    verdict: str  # a messages.sweep.Verdict
    reason: str
    first_seen: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    last_seen: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))


class SweepAction(SQLModel, table=True):
    """What a sweep removed: one row per machine per sweep run (a retried removal adds none)."""

    __table_args__ = (sa.UniqueConstraint("sweep_id", "provider", "instance_id"),)

    id: int | None = Field(default=None, primary_key=True)
    sweep_id: str = Field(index=True)  # the SweepWorkflow run
    provider: str
    instance_id: str
    key: str
    connection_id: str
    allocation_id: str | None = Field(default=None, index=True)
    verdict: str  # orphan | duplicate
    reason: str
    first_seen: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class CreateSend(SQLModel, table=True):
    """The last create sent under an attempt key (clouds without an idempotency token): a retry,
    on any worker, does not launch again while `answered_at` is empty and the cloud's in-flight
    window after `sent_at` has not passed (activities/cloud.py)."""

    key: str = Field(primary_key=True)
    sent_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    answered_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    # When a send under the key was first known in doubt (no answer came: a timeout, a dead worker).
    # Kept once set: the allocation's watch then hunts for a twin under the key for a while after
    # ready (activities/watch.py), since that launch may still land after the in-flight window.
    doubted_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))


class Fleet(SQLModel, table=True):
    """An SSH / on-prem fleet: hosts gpuprov logs in to with a pasted private key. `secret` is the
    sealed private key (never returned); `bastion_secret` the bastion's own key, if it has one."""

    id: str = Field(primary_key=True)
    project: str = Field(default="default", index=True)
    name: str
    user: str = "ubuntu"
    port: int = 22
    secret: bytes = Field(sa_column=sa.Column(sa.LargeBinary, nullable=False))
    bastion_host: str | None = None
    bastion_port: int | None = None
    bastion_user: str | None = None
    bastion_secret: bytes | None = Field(default=None, sa_column=sa.Column(sa.LargeBinary, nullable=True))
    probe_id: str | None = None  # the latest save's probe (workflows/fleet_probe.py): only it records
    bastion_host_key: str | None = None  # pinned on first use (providers/host_keys.py), OpenSSH line
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class FleetHost(SQLModel, table=True):
    """One host of a fleet, with the last probe's answer (workflows/fleet_probe.py). GPU and
    requirement columns are None until probed; `reachable` False comes with `reason`."""

    __tablename__ = "fleet_host"

    id: str = Field(primary_key=True)
    fleet_id: str = Field(foreign_key="fleet.id", index=True)
    position: int  # its place in the fleet's host list
    host: str
    probed_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    reachable: bool | None = None
    reason: str | None = None
    gpu_vendor: str | None = None
    gpu_name: str | None = None
    gpu_count: int | None = None
    gpu_memory_gb: int | None = None  # per GPU
    gpu_summary: str | None = None  # "2× H100 (80GB) · 160GB total"
    docker: bool | None = None
    sudo: bool | None = None
    tcp_forwarding: bool | None = None
    # The SSH host key the first successful probe found (providers/host_keys.py, trust on first
    # use): later connections accept only it. An OpenSSH public key line; None until pinned.
    host_key: str | None = None
    host_key_pinned_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))


class SpendInterval(SQLModel, table=True):
    """The spend ledger: one interval per allocation attempt (its key), from when the cloud accepted
    the create (or, when that answer was lost, the cloud's creation time or when gpuprov first found
    the machine) until the cloud shows the machine gone; `ended_at` is null while it runs. Cost is
    `rate_per_hour` × the interval's length (store/spend.py): intervals, never per-minute rows.
    The unique key makes opening idempotent, and closing only sets an empty `ended_at`."""

    __tablename__ = "spend_interval"
    __table_args__ = (
        # Budgets' and the running rate's reads: the project's intervals still open or ended lately (0027).
        sa.Index("ix_spend_interval_project_ended_at", "project", "ended_at"),
        # The spend card's: the intervals not yet in `spend_day` — the open ones (0031).
        sa.Index("ix_spend_interval_rolled_up_project", "rolled_up", "project"),
    )

    id: int | None = Field(default=None, primary_key=True)
    key: str = Field(unique=True)  # the allocation attempt's key: one interval per attempt
    instance_id: str = Field(index=True)  # the allocation id
    project: str = Field(index=True)
    connection_id: str
    provider: str
    job_type: str = "manual"  # the workload the machine serves; `manual` when allocated by hand
    rate_per_hour: float  # the offer's $/hr (a spot offer at its spot price)
    started_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    ended_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    # True once its cost is in `spend_day`: set with `ended_at` (or after it) in the transaction that
    # adds it there, so a read counts each interval exactly once, from one place or the other.
    rolled_up: bool = Field(default=False, sa_column=sa.Column(sa.Boolean(), nullable=False,
                                                               server_default=sa.false()))


class SpendDay(SQLModel, table=True):
    """The closed intervals' cost per UTC day, project and job type. A closed interval never changes,
    so its cost is added here once, when it closes (store/spend.py `close_interval`), and the spend
    card sums these rows and the open intervals instead of re-adding a 30-day window's every interval
    at each request."""

    __tablename__ = "spend_day"

    project: str = Field(primary_key=True)
    job_type: str = Field(primary_key=True)
    day: date = Field(sa_column=sa.Column(sa.Date(), primary_key=True))  # a UTC day
    cost: float  # $ accrued that day by the closed intervals of this project and job type


class BackendPick(SQLModel, table=True):
    """The offer a project picked in a backend's offers browser: that backend's default there. A
    request naming the backend with no GPU and no instance type plans on this type in this region."""

    __tablename__ = "backend_pick"

    project: str = Field(primary_key=True)
    provider: str = Field(primary_key=True)
    instance_type: str
    region: str
    spot: bool = False
    gpu_label: str | None = None  # as the offers table showed it, e.g. "1× H100 (80GB)"
    price_per_hour: float | None = None  # when picked
    picked_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class ProjectDefaults(SQLModel, table=True):
    """The cloud (and region) a project's requests plan on when they name none (`cloud`, `clouds`,
    `connection_id`): PUT /api/compute/defaults. Without a row, every connected cloud."""

    __tablename__ = "project_defaults"

    project: str = Field(primary_key=True)
    cloud: str
    region: str | None = None
    updated_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    lease_hours: float | None = None  # the project's default lease (None: 12; 0: off)


class AcceptanceRun(SQLModel, table=True):
    """One run of the acceptance suite (workflows/acceptance.py): its state as the workflow last
    recorded it, and once it ended its result (messages/acceptance.py AcceptanceResult, JSON). No
    credential is in either: the account is a fingerprint at most."""

    __tablename__ = "acceptance_runs"

    id: str = Field(primary_key=True)
    project: str = Field(index=True)
    connection_id: str
    cloud: str = Field(index=True)
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    finished_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    state: str  # AcceptanceState, JSON
    result: str | None = None  # AcceptanceResult, JSON: set once the run ended


class AcceptanceLane(SQLModel, table=True):
    """The acceptance run under way on a cloud account: one at a time (the key: a digest of the
    identity the connection verified as, store/acceptance_runs.py lane_key), taken before a run starts
    and let go when it records its result. Two runs on one account would share its capacity and rate
    limits, each would count the other's machines in its "nothing billable" check, and they would
    double what it spends."""

    __tablename__ = "acceptance_lane"

    account_key: str = Field(primary_key=True)
    run_id: str
    taken_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))


class KubeconfigFetch(SQLModel, table=True):
    """One hand-out of an instance's cluster-admin kubeconfig (api/routers/kubeconfig.py): who asked,
    from where, when. The kubeconfig itself is never stored: it is read from the machine each time."""

    __tablename__ = "kubeconfig_fetches"

    id: str = Field(primary_key=True)
    instance_id: str = Field(index=True)
    project: str = Field(index=True)
    principal: str  # "admin" or "project:<slug>": which token asked
    client_address: str | None = None  # where the request came from, as the API saw it
    access: str  # "direct" (the machine's address) or "tunnel" (127.0.0.1, for `gpuprov tunnel`)
    fetched_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class ConsoleSession(SQLModel, table=True):
    """A signed-in browser of the Compute console (api/console/session.py): the token it was opened
    with is never kept, only which kind it was (and a project token's hash, so revoking the token
    ends its sessions). The cookie holds a random value; only its keyed digest is stored here."""

    __tablename__ = "console_sessions"

    id_digest: str = Field(primary_key=True)
    admin: bool
    project: str | None = None  # a project token's project (an admin session picks per request)
    token_hash: str | None = Field(default=None, index=True)  # a project token's (projects.token_hash)
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    expires_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    ended_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))


class Policy(SQLModel, table=True):
    """A scaling/resource policy (the Policies card): `spec` is messages.policy.PolicySpec as JSON
    (When, Then, max spend, cooldown). Each enabled one has a Temporal Schedule
    (`gpuprov-policy-<project>-<id>`) that runs PolicyWorkflow, which records here how it went."""

    id: str = Field(primary_key=True)
    project: str = Field(index=True)
    name: str
    enabled: bool = True
    spec: dict[str, Any] = Field(sa_column=sa.Column(sa.JSON, nullable=False))
    # A webhook's URL is kept in `spec` without its query; the query (which may carry the hook's
    # token) is sealed here and only opened by the activity that calls it.
    webhook_secret: bytes | None = Field(default=None, sa_column=sa.Column(sa.LargeBinary, nullable=True))
    trigger_count: int = 0  # how many runs acted
    last_triggered_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    last_result: str | None = None  # the last run's outcome: what it did, or why it did not act
    last_evaluated_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    last_run_id: str | None = None  # the run that recorded last: a retried record counts once
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class ProjectBudget(SQLModel, table=True):
    """A project's daily budget (built in, off until set): no new allocation starts once today's
    spend (the ledger, UTC day) has reached `daily_usd`."""

    __tablename__ = "project_budget"

    project: str = Field(primary_key=True)
    daily_usd: float
    updated_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class Pool(SQLModel, table=True):
    """A pool: the desired number of identical machines of one cloud (workflows/scale.py reconciles
    it). `id` is the incarnation, in every machine's allocation id (messages/pool.py), so the cloud's
    listing names the pool; a pool deleted and made again under the same name gets a new id. The
    last reconcile's view (machines counted on the cloud, each with its allocation's status) is
    written by the workflow for GET."""

    __table_args__ = (sa.UniqueConstraint("project", "name", name="uq_pool_project_name"),)

    id: str = Field(primary_key=True)
    project: str = Field(index=True)
    name: str
    cloud: str
    gpu: str | None = None
    gpu_count: int | None = None
    region: str | None = None
    spot: bool | None = None
    k3s: bool = False
    min_size: int
    max_size: int
    size: int
    ssh_public_keys: list[str] = Field(default_factory=list, sa_column=sa.Column(sa.JSON, nullable=False))
    status: str = "active"  # a PoolStatus
    workflow_id: str
    machines: list[dict[str, Any]] | None = Field(default=None, sa_column=sa.Column(sa.JSON))
    errors: list[str] | None = Field(default=None, sa_column=sa.Column(sa.JSON))
    reconciled_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class MachineIdle(SQLModel, table=True):
    """The watch's last idle sample of a ready allocation (activities/idle.py): its GPUs' highest
    utilisation, its open login sessions, the job running on it. `idle_since` is the first sample of
    the current idle run (every GPU under 5 %, no session, no running job), None while it is not
    idle — or when the last sample failed (`error`): a machine not measured is not called idle."""

    __tablename__ = "machine_idle"

    allocation_id: str = Field(primary_key=True)
    project: str = Field(index=True)
    sampled_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    idle_since: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    gpu_max_pct: float | None = None  # None: no GPU answered (no nvidia-smi: no GPU to be busy)
    sessions: int | None = None
    job_id: str | None = None  # the job running on it when sampled
    error: str | None = None


class CapacityRefusal(SQLModel, table=True):
    """A capacity or quota refusal remembered across allocations (store/capacity.py): planning tries
    the offers its scope covers last until `until`. One row per scope and kind on one connection."""

    __tablename__ = "capacity_refusal"
    __table_args__ = (sa.Index("ix_capacity_refusal_connection_id_until", "connection_id", "until"),)

    id: str = Field(primary_key=True)  # a digest of the scope and kind (store/capacity.py scope_id)
    provider: str
    connection_id: str
    region: str
    zone: str | None = None  # None: every zone of the region
    instance_type: str | None = None  # None: every type
    kind: str  # "capacity" | "quota"
    reason: str  # the cloud's message, bounded (store/capacity.py MAX_REASON)
    refusals: int = 1  # since first_at, while remembered
    first_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    last_at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    until: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))


class PacingSlot(SQLModel, table=True):
    """When the next call of one cloud key's lane (its calls, or its launches) may leave, for every
    host's processes: seconds since the epoch on the database server's clock (store/pacing_slots.py;
    PostgreSQL only). One row per lane; `lane` is a digest, never the key."""

    __tablename__ = "pacing_slot"

    lane: str = Field(primary_key=True, max_length=100)
    next_at: float


class OfferAnswer(SQLModel, table=True):
    """One connection's offers for one query, as the offers pages' cache keeps it, for every API
    process of the installation until `expires_at` (seconds since the epoch; store/offer_answers.py).
    `key` is a digest of the connection, its credentials' fingerprint and the query. Empty `offers`:
    a process is asking the cloud for them, and the others wait for its answer until `expires_at`."""

    __tablename__ = "offer_answer"

    key: str = Field(primary_key=True, max_length=64)
    expires_at: float = Field(index=True)
    offers: str  # JSON: the adapter's list of offers; "" while being asked (offer_answers.ASKING)

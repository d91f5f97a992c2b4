"""A managed job's messages: what is asked (JobRequest), where it stands (JobStatus), and the inputs
of the job's activities. The command is the user's text: it goes to the host quoted, never spliced."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from messages.allocation import AllocateRequest, Timing
from messages.workloads import WorkloadKind, WorkloadStatus

# One vocabulary for jobs and reported workloads (messages/workloads.py): a job's type is one of
# the Workload Queue's kinds, its status one of its statuses.
JobType = WorkloadKind
JobStatus = WorkloadStatus


class PoolTarget(BaseModel):
    """A job that runs on a machine of a pool (claimed, never allocated or terminated by the job)."""

    pool_id: str  # the pool's incarnation (messages/pool.py)
    name: str


class RetryCause(StrEnum):
    """How an attempt of a job ended, in the words of its `retry` policy's `on`."""

    PREEMPTED = "preempted"  # the cloud reclaimed its machine (AllocationState.preempted)
    MACHINE_LOST = "machine_lost"  # its machine went otherwise (the watch found it gone or broken)
    NO_CAPACITY = "no_capacity"  # no machine could be allocated for it
    FAILED = "failed"  # the command exited non-zero

    def says(self) -> str:
        """The end, as a job's error begins with it."""
        return {"preempted": "its machine was preempted", "machine_lost": "its machine was lost",
                "no_capacity": "no machine could be allocated", "failed": "the command failed"}[self.value]


class RetryWhere(StrEnum):
    """Where a restart's machine may come from."""

    SAME_OFFER = "same_offer"  # the first machine's offer: its connection, region and instance type
    SAME_CLOUD = "same_cloud"  # the first machine's cloud (its connections among the job's targets)
    ANY_ALLOWED = "any_allowed"  # any target the job was planned with


MAX_RESTARTS = 10


class JobRetry(BaseModel):
    """A job's `retry`: an attempt that ends by a cause in `on`, with restarts left, runs again on
    a new machine (workflows/job.py); `restarts` + 1 attempts at most."""

    on: list[RetryCause] = Field(min_length=1)
    restarts: int = Field(ge=0, le=MAX_RESTARTS)
    where: RetryWhere = RetryWhere.ANY_ALLOWED

    @property
    def attempts(self) -> int:
        return self.restarts + 1


class AttemptEnd(BaseModel):
    """How one attempt of a job ended (JobState.ends; the job's row keeps them too)."""

    attempt: int
    allocation_id: str | None = None
    cause: RetryCause
    reason: str
    exit_code: int | None = None  # the command's, when it exited (non-zero)


def attempt_marker(attempt: int, attempts: int, previous: RetryCause) -> str:
    """The line the job's one log carries between two attempts' output."""
    return f"--- gpuprov: attempt {attempt} of {attempts} (previous ended: {previous.value}) ---\n"


def restart_allocation_id(first: str, attempt: int) -> str:
    """The allocation of attempt `attempt` (2, 3, …): derived from the first one's id, so a worker
    that dies while a restart starts its machine starts the same child workflow again (one
    machine), never a second one."""
    return f"{first}-{attempt}"


class JobInput(BaseModel):
    """JobWorkflow's input: the job's id and either the allocation its machine comes from (planned
    by the API: targets, GPU, the installation's key) or the pool whose machine it claims."""

    job_id: str
    project: str
    command: str
    image: str | None = None
    allocation: AllocateRequest | None = None  # set unless `pool` is
    pool: PoolTarget | None = None  # a pool job: selects its own code path (older histories have none)
    timing: Timing = Field(default_factory=Timing)
    log_poll_s: float = Field(default=1.0, gt=0)  # how often the run activity reads new output
    queue_poll_s: float = Field(default=5.0, gt=0)  # at most this long between asks for a grant
    # Restarts on a new machine (JOB_RETRY_PATCH); None: none (older histories have none).
    retry: JobRetry | None = None


class JobState(BaseModel):
    """What the `state` query returns."""

    job_id: str
    status: JobStatus = JobStatus.QUEUED
    allocation_id: str | None = None
    exit_code: int | None = None
    error: str | None = None
    cancel_requested: bool = False
    attempt: int = 1  # the attempt running (or the last made)
    ends: list[AttemptEnd] = Field(default_factory=list)  # of the attempts that ended, in order
    noticed: list[str] = Field(default_factory=list)  # allocations whose preemption notice sent SIGTERM


class PreemptionNotice(BaseModel):
    """The watch saw the cloud's interruption notice for the machine a job runs on (the machine still
    runs for a little while: AWS two minutes, GCP thirty seconds): the job's command gets SIGTERM."""

    allocation_id: str
    reason: str


class RecordJobInput(BaseModel):
    """A job's row brought to `status` (and what is known with it)."""

    job_id: str
    status: JobStatus
    allocation_id: str | None = None
    host: str | None = None
    exit_code: int | None = None
    error: str | None = None
    # A job with a retry policy: the attempt this record is of, and the ends of those before (and of
    # this one, once it ended). A record of an attempt not yet on the row begins it there: from 2 on
    # with the marker line in the log, where that attempt's output then starts.
    attempt: int | None = None
    attempts: int | None = None  # as many as the policy allows (the marker line says "n of N")
    ends: list[AttemptEnd] = Field(default_factory=list)


class RunJobInput(BaseModel):
    """Run (or re-attach to) the job's command on its machine and copy its output into the log."""

    job_id: str
    command: str
    image: str | None = None
    gpus: bool = False  # the machine has GPUs: `docker run --gpus all`
    host: str
    port: int = 22
    user: str
    poll_interval_s: float = Field(default=1.0, gt=0)
    heartbeat_every_s: float = Field(default=2.0, gt=0)
    # In the command's environment as GPUPROV_JOB_ATTEMPT and GPUPROV_JOB_PREVIOUS_END; from 2 on
    # the command runs in a directory of that attempt's on the host, its output from where the
    # attempt's record on the job's row says (after the marker line).
    attempt: int = Field(default=1, ge=1)
    previous_end: RetryCause | None = None


class SignalJobInput(BaseModel):
    """Signal the job's command (the process group it runs in, activities/jobs.py) on its machine."""

    job_id: str
    attempt: int = Field(default=1, ge=1)
    allocation_id: str
    host: str
    port: int = 22
    user: str


class RunJobResult(BaseModel):
    exit_code: int
    last_lines: list[str] = Field(default_factory=list)


class AllocationReadyInput(BaseModel):
    """Wait for an allocation (its workflow's `ready` update)."""

    workflow_id: str
    heartbeat_every_s: float = 5.0


class AdmitInput(BaseModel):
    job_id: str


class AdmitResult(BaseModel):
    granted: bool


class ClaimInput(BaseModel):
    """Claim a free ready machine of the pool for the job (store/pool_claims.py)."""

    job_id: str
    pool_id: str


class ClaimedMachine(BaseModel):
    allocation_id: str
    host: str
    port: int = 22
    user: str = "ubuntu"
    gpus: bool = False


class ClaimResult(BaseModel):
    machine: ClaimedMachine | None = None  # None: none free yet (ask again), or `gone`
    gone: str | None = None  # why the job can never get one


class MachineEndInput(BaseModel):
    """Wait for a pool machine's allocation workflow to close."""

    workflow_id: str
    heartbeat_every_s: float = 5.0

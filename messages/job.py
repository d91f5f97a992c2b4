"""A managed job's messages: what is asked (JobRequest), where it stands (JobStatus), and the inputs
of the job's activities. The command is the user's text: it goes to the host quoted, never spliced."""

from __future__ import annotations

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


class JobState(BaseModel):
    """What the `state` query returns."""

    job_id: str
    status: JobStatus = JobStatus.QUEUED
    allocation_id: str | None = None
    exit_code: int | None = None
    error: str | None = None
    cancel_requested: bool = False


class RecordJobInput(BaseModel):
    """A job's row brought to `status` (and what is known with it)."""

    job_id: str
    status: JobStatus
    allocation_id: str | None = None
    host: str | None = None
    exit_code: int | None = None
    error: str | None = None


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

"""The job queue's tables: managed jobs with their output and GPU readings, the queue's limits,
pauses and admission lock, and the workloads reported in from elsewhere. store/models.py re-exports
them: every table is imported from there, and importing it registers them all with SQLModel."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from store.clock import utcnow


class ReportedWorkload(SQLModel, table=True):
    """Work run elsewhere on the project's behalf (a training run, a deployed model, another
    service's synthetic run), reported in with PUT /api/compute/workloads/{id} so the Workload Queue
    is the one list of everything consuming compute. gpuprov shows it; it does not run it."""

    __tablename__ = "reported_workload"
    # The Workload Queue's page and its counts per kind, from the index alone (migration 0033).
    __table_args__ = (
        sa.Index("ix_reported_workload_queue", "project", "kind", "status", "created_at", "id"),)

    project: str = Field(primary_key=True)
    id: str = Field(primary_key=True)  # the reporter's own id (api/routers/workloads.py checks its shape)
    name: str
    kind: str  # messages/workloads.py WorkloadKind
    status: str  # messages/workloads.py WorkloadStatus
    source: str  # who reported it: training | model | synthetic | other
    gpu: str | None = None
    gpu_count: int | None = None
    location: str | None = None  # "local cluster" or a cloud backend
    priority: int = 0
    progress_pct: float | None = None
    eta_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    requested_by: str | None = None
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class Job(SQLModel, table=True):
    """A managed job (workflows/job.py): a command run on a machine allocated for it. Its output is
    in `job_log_chunk`, never in workflow history."""

    # The Workload Queue's page and its counts per kind, from the index alone (migration 0033).
    __table_args__ = (sa.Index("ix_job_queue", "project", "type", "status", "created_at", "id"),)

    id: str = Field(primary_key=True)
    project: str = Field(default="default", index=True)
    name: str
    type: str  # a messages.job.JobType
    command: str = Field(sa_column=sa.Column(sa.Text, nullable=False))
    image: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    cloud: str | None = None  # as asked (None: any connected, cheapest)
    requested_by: str
    priority: int = 0  # higher runs first
    max_price_per_hour: float | None = None
    workflow_id: str
    status: str = Field(default="queued", index=True)  # a messages.job.JobStatus
    allocation_id: str | None = None
    host: str | None = None
    exit_code: int | None = None
    error: str | None = Field(default=None, sa_column=sa.Column(sa.Text))  # with the last log lines
    created_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    updated_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))
    started_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    ended_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    # The queue's ledger (store/queue.py): the capacity the job holds from its grant until its
    # machine is gone — GPUs, and $/hr at its max price.
    granted_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    released_at: datetime | None = Field(default=None, sa_column=sa.Column(sa.DateTime(timezone=True)))
    granted_gpus: int = 0
    granted_usd_per_hour: float = 0.0
    # Its `retry` policy (messages/job.py JobRetry, as JSON; None: no restarts), the attempts made
    # so far (1 until a restart), and one record per attempt (store/jobs.py: its allocation, where
    # its output starts in the log, how it ended).
    retry: dict[str, Any] | None = Field(default=None, sa_column=sa.Column(sa.JSON))
    attempts: int = Field(default=1, sa_column=sa.Column(sa.Integer, nullable=False, server_default="1"))
    attempt_log: list[dict[str, Any]] | None = Field(default=None, sa_column=sa.Column(sa.JSON))


class JobLimit(SQLModel, table=True):
    """A capacity limit of the job queue: a project's (`scope` = the project id) or the
    installation's (`scope` = GLOBAL). None: no limit of that kind. No row: no limit at all."""

    __tablename__ = "job_limit"

    scope: str = Field(primary_key=True)
    max_gpus: int | None = None
    max_usd_per_hour: float | None = None
    updated_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class QueuePause(SQLModel, table=True):
    """A project's queue group (messages/queue_groups.py: sft, grpo, eval, synthetic) whose jobs are
    not admitted (store/queue.py): they keep their place and their PRI until it is resumed (the row
    deleted). `by` says who paused it: a policy's id, or `api`; `run_id` is the pausing policy run,
    so a retried action knows its own pause."""

    __tablename__ = "queue_pause"

    project: str = Field(primary_key=True)
    type: str = Field(primary_key=True)
    by: str
    run_id: str | None = None
    paused_at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class QueueLock(SQLModel, table=True):
    """One row, written first by every admission (store/queue.py): admissions take turns on it,
    on SQLite and PostgreSQL alike."""

    __tablename__ = "job_queue_lock"

    id: int = Field(default=1, primary_key=True)
    turns: int = 0


class JobLogChunk(SQLModel, table=True):
    """`data` is the job's output (stdout and stderr interleaved) from byte `offset`. The chunks of
    a job tile its output without gaps or overlaps: a retried write of the same offset is a no-op."""

    __tablename__ = "job_log_chunk"

    job_id: str = Field(primary_key=True, foreign_key="job.id")
    offset: int = Field(sa_column=sa.Column(sa.BigInteger, primary_key=True, autoincrement=False))
    data: bytes = Field(sa_column=sa.Column(sa.LargeBinary, nullable=False))
    at: datetime = Field(default_factory=utcnow, sa_column=sa.Column(sa.DateTime(timezone=True)))


class JobGpuSample(SQLModel, table=True):
    """One reading of one GPU of a running job's machine (`nvidia-smi --query-gpu=utilization.gpu,
    memory.used,memory.total`), taken by the job's run activity every GPUPROV_JOB_METRICS_INTERVAL_S.
    Only the recent readings are kept (store/jobs.py KEEP_READINGS); never in workflow history."""

    __tablename__ = "job_gpu_sample"

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(foreign_key="job.id", index=True)
    at: datetime = Field(sa_column=sa.Column(sa.DateTime(timezone=True), nullable=False))
    gpu: int  # the GPU's place in nvidia-smi's order
    utilization_pct: float
    memory_used_mib: int
    memory_total_mib: int

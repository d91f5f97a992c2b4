"""The Workload Queue's vocabulary (the studio seed's "Workload Queue tab"): the kinds of work that
consume compute, how the page groups them (SFT for SFT/DPO, GRPO for GRPO/PPO, ...), which kinds wait
in the queue, their statuses, and the queue's order. Pure: the API, the job workflow, its activities
and the queue's admission (store/queue.py) share it — a managed job's type is a WorkloadKind and its
status a WorkloadStatus (messages/job.py re-exports them as JobType and JobStatus)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from operator import attrgetter, itemgetter
from typing import Protocol, TypeVar


class WorkloadKind(StrEnum):
    SFT = "sft"
    DPO = "dpo"
    GRPO = "grpo"
    PPO = "ppo"
    SERVING = "serving"
    EVAL = "eval"
    TASK = "task"
    KB_COMPILE = "kb_compile"
    SYNTHETIC = "synthetic"

    @property
    def queueable(self) -> bool:
        """Training, eval and synthetic wait in the queue for capacity; serving and tasks do not
        (over a limit they are refused)."""
        return self in QUEUEABLE


class WorkloadFilter(StrEnum):
    """The filter pills across the top of the table, in the seed's order."""

    ALL = "ALL"
    SFT = "SFT"
    GRPO = "GRPO"
    SERVING = "SERVING"
    EVAL = "EVAL"
    TASK = "TASK"
    SYNTHETIC = "SYNTHETIC"


# The TYPE column and the pill each kind counts under: DPO is shown as SFT, PPO as GRPO, a KB
# compile as a Task (its method, "kb compile", is the row's `method`).
GROUP: dict[WorkloadKind, WorkloadFilter] = {
    WorkloadKind.SFT: WorkloadFilter.SFT, WorkloadKind.DPO: WorkloadFilter.SFT,
    WorkloadKind.GRPO: WorkloadFilter.GRPO, WorkloadKind.PPO: WorkloadFilter.GRPO,
    WorkloadKind.SERVING: WorkloadFilter.SERVING, WorkloadKind.EVAL: WorkloadFilter.EVAL,
    WorkloadKind.TASK: WorkloadFilter.TASK, WorkloadKind.KB_COMPILE: WorkloadFilter.TASK,
    WorkloadKind.SYNTHETIC: WorkloadFilter.SYNTHETIC,
}
TYPE_LABEL: dict[WorkloadFilter, str] = {
    WorkloadFilter.SFT: "SFT", WorkloadFilter.GRPO: "GRPO", WorkloadFilter.SERVING: "Serving",
    WorkloadFilter.EVAL: "Eval", WorkloadFilter.TASK: "Task", WorkloadFilter.SYNTHETIC: "Synthetic",
}

# Training, eval and synthetic runs wait for capacity; serving and tasks are never queued (PRI "—").
QUEUEABLE: frozenset[WorkloadKind] = frozenset({
    WorkloadKind.SFT, WorkloadKind.DPO, WorkloadKind.GRPO, WorkloadKind.PPO, WorkloadKind.EVAL,
    WorkloadKind.SYNTHETIC})


class WorkloadStatus(StrEnum):
    QUEUED = "queued"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        return self not in ACTIVE


ACTIVE: frozenset[WorkloadStatus] = frozenset({
    WorkloadStatus.QUEUED, WorkloadStatus.PROVISIONING, WorkloadStatus.RUNNING})


def method_label(kind: WorkloadKind) -> str:
    """The underlying job kind as the TYPE/method reads it: `kb_compile` -> "kb compile"."""
    return kind.value.replace("_", " ")


def gpu_label(gpu: str | None, count: int | None) -> str | None:
    """The GPU column: "4× H100"; None for CPU-only work."""
    if not gpu:
        return None
    return f"{count or 1}× {gpu}"


@dataclass(frozen=True)
class Waiting:
    """A queued workload, as the queue orders it."""

    id: str
    project: str
    priority: int
    created_at: datetime


class Queued(Protocol):
    """What the queue's order reads of a waiting workload (a `Waiting`, a job's row or record)."""

    @property
    def id(self) -> str: ...
    @property
    def project(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def created_at(self) -> datetime: ...


Q = TypeVar("Q", bound=Queued)

_AGE = attrgetter("created_at", "id")
_PLACE = itemgetter(0, 1, 2, 3)  # never the workload itself: two of one id would not compare


def queue_order(waiting: Iterable[Q]) -> list[Q]:
    """The queue's order: higher priority first; at equal priority, round-robin between projects
    (each project's oldest, then each one's second oldest, ...), and within a round the older first.
    So one project's burst of jobs cannot starve another project's single job of equal priority.
    Orders whatever it is given (the installation's queue at every job list: no copies made)."""
    by_level: dict[tuple[int, str], list[Q]] = {}
    for w in waiting:
        by_level.setdefault((w.priority, w.project), []).append(w)
    keyed: list[tuple[int, int, datetime, str, Q]] = []
    for group in by_level.values():
        group.sort(key=_AGE)
        keyed.extend((-w.priority, rank, w.created_at, w.id, w) for rank, w in enumerate(group))
    keyed.sort(key=_PLACE)
    return [k[-1] for k in keyed]


def positions(waiting: Sequence[Waiting]) -> dict[str, int]:
    """The PRI column: each queued workload's 1-based global position."""
    return {w.id: i for i, w in enumerate(queue_order(waiting), start=1)}

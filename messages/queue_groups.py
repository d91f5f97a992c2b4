"""The queue's groups: what a policy's `type` names (queue_wait, queue_depth, pause_queue).

A policy names a *group*, not a job kind: the groups are the Workload Queue's pills for the queued
types — SFT covers sft and dpo jobs, GRPO covers grpo and ppo, then eval and synthetic. So "queue
wait of SFT" reads the oldest of the sft and dpo jobs, and pausing `grpo` holds grpo and ppo jobs
alike. Serving, task and kb_compile jobs are never queued (over a limit they are refused), so no
queue policy can name them. Kinds are plain strings here (messages/job.py's JobType values), so
this module stays pure and imports no job model."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator

QUEUE_GROUPS: dict[str, tuple[str, ...]] = {
    "sft": ("sft", "dpo"),
    "grpo": ("grpo", "ppo"),
    "eval": ("eval",),
    "synthetic": ("synthetic",),
}
NOT_QUEUED = ("serving", "task", "kb_compile")


def group_of(kind: str) -> str | None:
    """The queue group of a job kind; None for a kind that is not queued."""
    return next((g for g, kinds in QUEUE_GROUPS.items() if kind in kinds), None)


def _hint(value: object) -> object:
    """A kind where a group is expected is refused with the group to name instead."""
    if isinstance(value, str) and value not in QUEUE_GROUPS:
        group = group_of(value)
        if group is not None:
            raise ValueError(f"{value} jobs are queued in the {group} group: name {group!r}")
        if value in NOT_QUEUED:
            raise ValueError(f"{value} jobs are not queued: name one of {', '.join(QUEUE_GROUPS)}")
    return value


QueueGroup = Annotated[Literal["sft", "grpo", "eval", "synthetic"], BeforeValidator(_hint)]

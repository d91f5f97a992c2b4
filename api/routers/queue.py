"""The project's job queue by group (messages/queue_groups.py: sft covers sft and dpo jobs, grpo
covers grpo and ppo, then eval and synthetic): how many jobs wait, and which groups are paused —
by a pause_queue policy or by hand. A paused group's jobs keep their place and PRI but are not
admitted (store/queue.py) until it is resumed here."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field
from sqlmodel import Session, col, func, select

from api.auth import CallerDep
from api.deps import SessionDep
from api.fields import Strict, Timestamp, aware
from messages.queue_groups import QUEUE_GROUPS, QueueGroup, group_of
from store import queue
from store.models import Job

router = APIRouter(prefix="/queue", tags=["jobs"])


class GroupIn(Strict):
    type: QueueGroup = Field(description="a queue group: sft (sft, dpo jobs), grpo (grpo, ppo), eval, "
                                         "synthetic")


class PauseOut(BaseModel):
    type: str
    by: str = Field(description="the policy's id that paused it, or `api` (by hand)")
    paused_at: Timestamp


class QueueOut(BaseModel):
    waiting: dict[str, int] = Field(description="per group, the project's jobs waiting for a grant")
    paused: list[PauseOut] = Field(description="the project's paused groups: their jobs are not admitted")


def queue_of(session: Session, project: str) -> QueueOut:
    waiting = dict.fromkeys(QUEUE_GROUPS, 0)
    for kind, n in session.exec(select(Job.type, func.count()).where(
            col(Job.project) == project, col(Job.status) == "queued", col(Job.granted_at).is_(None))
            .group_by(col(Job.type))).all():
        group = group_of(kind)
        if group is not None:
            waiting[group] += n
    paused = [PauseOut(type=p.type, by=p.by, paused_at=aware(p.paused_at))
              for (_, _), p in sorted(queue.pauses(session, project).items())]
    return QueueOut(waiting=waiting, paused=paused)


@router.get("", response_model=QueueOut)
def get_queue(session: SessionDep, caller: CallerDep) -> QueueOut:
    return queue_of(session, caller.project)


@router.post("/pause", response_model=QueueOut)
def pause_queue(body: GroupIn, session: SessionDep, caller: CallerDep) -> QueueOut:
    """Stop admitting the group's queued jobs (idempotent: a paused group stays as it was paused)."""
    queue.pause(session, caller.project, body.type, by="api")
    return queue_of(session, caller.project)


@router.post("/resume", response_model=QueueOut)
def resume_queue(body: GroupIn, session: SessionDep, caller: CallerDep) -> QueueOut:
    """Admit the group's queued jobs again, in their places (idempotent)."""
    queue.resume(session, caller.project, body.type)
    return queue_of(session, caller.project)

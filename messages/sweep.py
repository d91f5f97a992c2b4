"""The sweep's messages (workflows/sweep.py): what every connection holds under our ownership tag,
how each machine is judged against the database, and what the sweep did about it.

Times travel as ISO 8601 UTC strings (this package stays free of anything but pure modules).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

from messages.allocation import CloudTarget
from providers.base import InstanceRef


class Verdict(StrEnum):
    KEEP = "keep"  # its allocation is live and it is that allocation's machine
    ORPHAN = "orphan"  # no allocation names it, or its allocation is over (failed, terminated, lost)
    DUPLICATE = "duplicate"  # its allocation is live but records another machine


class SweepInput(BaseModel):
    """One sweep. The Schedule passes the grace period from settings; the timing knobs suit real
    clouds, tests lower them."""

    grace_s: float = Field(default=600.0, ge=0)  # from first seen as orphan/duplicate to removal
    connection_ids: list[str] | None = None  # None: every connection
    poll_interval_s: float = Field(default=2.0, gt=0)
    heartbeat_timeout_s: float = Field(default=30.0, gt=0)
    list_timeout_s: float = Field(default=120.0, gt=0)  # one connection's listing
    terminate_timeout_s: float = Field(default=1800.0, gt=0)  # one removal, until the cloud shows it gone
    max_retry_interval_s: float = Field(default=30.0, gt=0)


class SweepTargetsInput(BaseModel):
    connection_ids: list[str] | None = None  # None: every connection


class SweepTargets(BaseModel):
    targets: list[CloudTarget]


class ListOwnedInput(BaseModel):
    target: CloudTarget
    heartbeat_every_s: float = 1.0


class OwnedMachines(BaseModel):
    target: CloudTarget
    refs: list[InstanceRef]  # what the connection holds under our ownership tag


class SeenMachine(BaseModel):
    """One machine, judged once however many connections (to one account) listed it."""

    ref: InstanceRef
    target: CloudTarget  # the first connection that listed it: the one that acts on it
    also_via: list[str] = Field(default_factory=list)  # other connections that listed it too


class JudgeInput(BaseModel):
    machines: list[SeenMachine]
    listed: list[str]  # connections that answered: their suspects not listed again are gone
    grace_s: float


class Judgement(BaseModel):
    machine: SeenMachine
    verdict: Verdict
    allocation_id: str | None  # from the machine's key (messages.ids.allocation_of_key)
    reason: str
    first_seen: str | None = None  # when the sweep first judged it an orphan/duplicate (None: kept)
    due: bool = False  # the grace period has passed since first_seen: remove it


class Judgements(BaseModel):
    items: list[Judgement]


class RemoveInput(BaseModel):
    """Remove one orphan or duplicate: judged again first (the database may have moved on)."""

    judgement: Judgement
    sweep_id: str
    grace_s: float
    poll_interval_s: float = 2.0
    heartbeat_every_s: float = 1.0


class RemoveResult(BaseModel):
    removed: bool  # False: judged again, it was no longer due (its reason says why)
    machine: SeenMachine
    verdict: Verdict
    allocation_id: str | None
    reason: str


class SweepSummary(BaseModel):
    sweep_id: str
    listed: list[str]  # connections that answered
    failures: list[str] = Field(default_factory=list)  # connections that did not, with the reason
    seen: int = 0  # distinct machines under our tag
    kept: int = 0
    waiting: list[Judgement] = Field(default_factory=list)  # orphans/duplicates inside their grace period
    removed: list[RemoveResult] = Field(default_factory=list)
    spared: list[RemoveResult] = Field(default_factory=list)  # due, but judged again and kept
    errors: list[str] = Field(default_factory=list)  # removals that failed (the next sweep retries)

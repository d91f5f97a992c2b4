"""Pools (workflows/scale.py): a desired number of identical machines, reconciled by ScaleWorkflow.

Each pool machine is an AllocationWorkflow whose allocation id is derived from the pool, a slot and
the slot's generation: `pl<pool id>-<pool name>-s<slot>g<generation>`. That id is in every attempt key
(`gp-<allocation>-a<n>`), which is the cloud-side name / tag of the machine, so what a cloud lists names
its pool (and slot) without the database, and a reconcile that is retried after a crash computes the
same key and finds the machine it already made instead of a second one. A slot holds at most one
allocation at a time and a pool has `max` slots: that, not the database, bounds what the cloud holds.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, Field

from messages.allocation import CloudTarget, Timing
from messages.ids import allocation_of_key
from providers.base import InstanceRef

# The pool's name goes into the cloud-side name of each machine: short, lowercase, [a-z0-9-]. With a
# 16-char name the attempt key is at most 39 chars (generations below 1000), which fits whole beside
# `gpuprov-<8-char installation>-` in the names of every cloud but Hyperstack (50 chars: names there
# fit whole up to a 10-char pool name; a longer one is shortened and its machines are not counted
# by name — their allocations still hold their slots, which is what bounds the pool).
POOL_NAME_MAX = 16
POOL_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,14}[a-z0-9])?$")
POOL_ID_LENGTH = 6
MAX_POOL_SIZE = 64  # slots 0..63
_POOL_ALLOCATION = re.compile(r"^pl([a-z0-9]{6})-([a-z0-9](?:[a-z0-9-]*[a-z0-9])?)-s([0-9]+)g([0-9]+)$")


class PoolSlot(BaseModel):
    """Where a pool machine sits: the pool (incarnation id and name), its slot and generation."""

    pool_id: str
    pool: str
    slot: int
    generation: int


def pool_allocation_id(pool_id: str, pool: str, slot: int, generation: int) -> str:
    """The allocation id of generation `generation` of slot `slot` (at most 33 chars below generation
    1000; the attempt key keeps it whole and `allocation_of_key` gives it back)."""
    return f"pl{pool_id}-{pool}-s{slot}g{generation}"


def slot_of_allocation(allocation_id: str | None) -> PoolSlot | None:
    """`pool_allocation_id`'s inverse; None for an allocation of no pool (one made by hand)."""
    m = _POOL_ALLOCATION.match(allocation_id or "")
    if m is None:
        return None
    return PoolSlot(pool_id=m.group(1), pool=m.group(2), slot=int(m.group(3)), generation=int(m.group(4)))


def slot_of_key(key: str) -> PoolSlot | None:
    """The pool slot a machine's key (as the cloud lists it) belongs to, or None."""
    return slot_of_allocation(allocation_of_key(key))


def scale_workflow_id(pool_id: str) -> str:
    """One ScaleWorkflow per pool incarnation: a pool deleted and made again gets a new id, so a run
    finishing the old one's teardown never swallows the new one's start."""
    return f"pool-{pool_id}"


class PoolStatus(StrEnum):
    ACTIVE = "active"
    DELETING = "deleting"  # scaling to 0; the row is forgotten once the cloud shows none left


# --------------------------------------------------------------------------- the workflow's messages


class ScaleInput(BaseModel):
    """ScaleWorkflow's input. The desired spec is the pool row (PUT writes it, then wakes the
    workflow with its `reconcile` update); each pass reads it. `state` carries the slots across
    continue-as-new."""

    pool_id: str
    project: str
    name: str
    timing: Timing = Field(default_factory=Timing)  # of the pool's allocations
    resync_s: float = Field(default=30.0, gt=0)  # a pass at least this often (losses, failed starts)
    parallel: int = Field(default=4, ge=1)  # at most this many machines provisioning at once
    passes_per_run: int = Field(default=200, ge=1)  # continue-as-new after this many passes
    # The workflow task timeout of the pool's allocations (None: Temporal's 10 s): how long a task held
    # by a worker that died waits before another worker gets it. Tests lower it.
    task_timeout_s: float | None = Field(default=None, gt=0)
    state: ScaleState | None = None


class Slot(BaseModel):
    allocation_id: str
    generation: int
    started_pass: int  # the pass that started it: newer ones go first when scaling down


class ScaleState(BaseModel):
    """What the `state` query returns and continue-as-new carries."""

    slots: dict[int, Slot] = Field(default_factory=dict)  # slot -> its current allocation
    generations: dict[int, int] = Field(default_factory=dict)  # slot -> the last generation started
    passes: int = 0
    errors: list[str] = Field(default_factory=list)  # of the last pass
    done: bool = False


class ObserveInput(BaseModel):
    pool_id: str
    project: str
    allocation_ids: list[str]  # the slots' current allocations
    heartbeat_every_s: float = 1.0


class PoolSpecView(BaseModel):
    """The desired state, as the pool row holds it."""

    cloud: str
    gpu: str | None = None
    gpu_count: int | None = None
    region: str | None = None
    spot: bool | None = None
    min_size: int
    max_size: int
    size: int
    status: PoolStatus


class AllocationView(BaseModel):
    """One slot allocation as Temporal and its row know it."""

    allocation_id: str
    found: bool  # its workflow exists (False: the start has not happened yet)
    running: bool  # its workflow is open
    status: str | None = None  # the Instance row's status (an AllocationStatus), if recorded
    error: str | None = None


class PoolMachine(BaseModel):
    """A machine the cloud lists under the pool's name."""

    ref: InstanceRef
    target: CloudTarget
    allocation_id: str
    slot: int
    generation: int


class Observation(BaseModel):
    spec: PoolSpecView | None  # None: the pool row is gone (forgotten)
    targets: list[CloudTarget] = Field(default_factory=list)
    allocations: list[AllocationView] = Field(default_factory=list)
    machines: list[PoolMachine] = Field(default_factory=list)  # counted on the cloud
    failures: list[str] = Field(default_factory=list)  # connections that did not list
    # Allocations a job runs on now (store/pool_claims.py): scaling down takes them last. Older
    # histories' observations have none: their decisions replay unchanged.
    busy: list[str] = Field(default_factory=list)


class StartMachineInput(BaseModel):
    pool_id: str
    project: str
    allocation_id: str
    timing: Timing
    task_timeout_s: float | None = None
    heartbeat_every_s: float = 1.0


class StartResult(BaseModel):
    started: bool  # False: the refusal's reason is in `reason` (nothing was started)
    reason: str | None = None


class RecordPoolInput(BaseModel):
    pool_id: str
    machines: list[PoolMachine]
    allocations: list[AllocationView]
    slots: dict[int, Slot]
    errors: list[str]
    reconciled_at: str  # ISO 8601 (workflow time)
    observed: bool = True  # False: the pass could not count the cloud; only the errors are news


class ForgetPoolInput(BaseModel):
    pool_id: str


ScaleInput.model_rebuild()

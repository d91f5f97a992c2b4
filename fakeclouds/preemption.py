"""The cloud taking a machine back — a spot interruption (AWS), a preemption (GCP), an eviction
(Azure), an outbid (Vast.ai), a preemptible stop (Nebius), Lambda's `preempted` — with or without an
interruption notice first. Shared by every facade; each one words it as its cloud's API does.

Two steps, both driven from the admin API (`POST /_fake/machines/{id}/preempt {"notice_s"}`,
`FakeCloudAdmin.preempt(machine_id, notice_s=...)`) or the `preempt` fault (no notice):

- the **notice** (`notice_s` > 0): the machine keeps running — SSH up, billing — while the cloud's
  notice is out (`noticed(m)`); a facade shows what its cloud shows then (AWS: the spot request's
  status changes while the instance still runs; GCP: STOPPING with a `compute.instances.preempted`
  operation running). A terminate during the notice wins: the machine then simply goes.
- the **reclaim** (`engine.preempt`): SSH stops, billing stops, its stock returns; `reclaimed(m)`
  (status terminated, detail `preempted`). A cloud that keeps the reclaimed resource around (Lambda
  lists a `preempted` instance, GCP's STOP action leaves a TERMINATED instance, Azure's Deallocate a
  deallocated VM, Vast.ai a stopped instance, Nebius a STOPPED one) shows it (`held`) until the
  user deletes it (`release`): billing has stopped already (the compute; disks are not modelled).

The notice's timer lives on the engine's loop like the machine's other lifecycle steps; it is not
persisted (a simulation restarted during a notice keeps the machine running, like faults, which
are not persisted either).
"""

from __future__ import annotations

import asyncio
import time

from fakeclouds.engine import PREEMPTED, RUNNING, TERMINATED, Engine, Machine
from fakeclouds.errors import Invalid, NotFound

NOTICE_AT = "preemption_notice_at"  # Machine.extra: when the cloud's notice went out
RECLAIM_AT = "preemption_at"  # Machine.extra: when the cloud takes it back (notice_at + notice_s)
RELEASED = "released"  # Machine.extra: a held (reclaimed, still listed) machine the user deleted


async def preempt(engine: Engine, machine_id: str, notice_s: float = 0.0) -> Machine:
    """The cloud takes the machine back: now, or after a notice of `notice_s` seconds during which
    it still runs. NotFound when it is gone; Invalid for a notice to a machine that does not run."""
    m = engine.machines.get(machine_id)
    if m is None or m.status == TERMINATED:
        raise NotFound(f"no machine {machine_id!r}")
    if notice_s < 0:
        raise Invalid("notice_s must be >= 0")
    if notice_s == 0:
        return await engine.preempt(machine_id)
    if m.status != RUNNING:
        raise Invalid(f"machine {machine_id!r} is {m.status}: a notice goes to a running machine")
    now = time.time()
    m.extra[NOTICE_AT], m.extra[RECLAIM_AT] = now, now + notice_s
    # The engine's lifecycle task for the machine (it replaces a pending die-after-boot timer: the
    # cloud reclaims it first). A terminate cancels it: the user's delete wins over the notice.
    engine._spawn(m, _reclaim_after(engine, m, notice_s))  # noqa: SLF001 — the engine's own scheduler
    engine.save()
    return m


async def _reclaim_after(engine: Engine, m: Machine, notice_s: float) -> None:
    await asyncio.sleep(notice_s)
    if m.status == RUNNING:
        await engine.preempt(m.id)


def noticed(m: Machine) -> bool:
    """An interruption notice is out and the machine still runs."""
    return m.status == RUNNING and NOTICE_AT in m.extra


def reclaimed(m: Machine) -> bool:
    """The cloud took the machine back (gone from the engine: not billing)."""
    return m.status == TERMINATED and m.detail == PREEMPTED


def held(engine: Engine, facade: str) -> list[Machine]:
    """The facade's reclaimed machines its cloud still shows (not yet deleted by the user), oldest first."""
    return sorted((m for m in engine.machines.values()
                   if m.facade == facade and reclaimed(m) and not m.extra.get(RELEASED)),
                  key=lambda m: (m.created_at, m.id))


def held_one(engine: Engine, facade: str, machine_id: str) -> Machine | None:
    m = engine.machines.get(machine_id)
    return m if m is not None and m.facade == facade and reclaimed(m) and not m.extra.get(RELEASED) else None


def release(engine: Engine, m: Machine) -> None:
    """The user deleted a held machine: it leaves the cloud's lists."""
    m.extra[RELEASED] = True
    engine.save()


def visible(engine: Engine, facade: str) -> list[Machine]:
    """What a cloud that keeps reclaimed machines lists: the live ones and the held ones, oldest first."""
    return sorted([*engine.live(facade), *held(engine, facade)], key=lambda m: (m.created_at, m.id))

"""Compute Engine's preemption of a Spot (or preemptible) VM in the simulation (`gcp_api.py` serves
it), driven by the engine's preemption (fakeclouds/preemption.py: `admin.preempt(id, notice_s=30)`).

What Compute Engine does, and so this:
- The preemption process: "Compute Engine sends a preemption notice to the VM in the form of an ACPI
  G2 Soft Off signal ... If the VM does not stop after 30 seconds, Compute Engine sends an ACPI G3
  Mechanical Off signal to the operating system. Compute Engine transitions the VM to a TERMINATED
  state" — or deletes it when `scheduling.instanceTerminationAction` is DELETE (cloud.google.com
  /compute/docs/instances/spot, "Preemption process"; `Scheduling.skipGuestOsShutdown`: "30 seconds
  for Spot VMs"). While the guest shuts down the instance is STOPPING (its guest still runs).
- How a preemption is told apart from any other stop: a zone operation of type
  `compute.instances.preempted` targets the instance ("Detect if a VM was preempted": `gcloud
  compute operations list --filter="operationType=compute.instances.preempted"`), a system event
  (`user: system`, name `systemevent-...`, statusMessage "Instance was preempted."). Here it is
  inserted when the notice goes out (RUNNING through the 30 s) and DONE once the VM is stopped or
  deleted. It is listed by `zones/{zone}/operations` and `aggregated/operations` (with `filter`).
- STOP (the default action): the instance stays, TERMINATED, until deleted — its vCPUs, memory and
  GPUs stop billing there (the boot disk would bill on: disks are not modelled). DELETE: it is gone.
[unconfirmed]: the operation's name shape and message, and its status during the 30 s (RUNNING here).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from fakeclouds import gcp_filter, preemption
from fakeclouds.engine import Engine, Machine
from fakeclouds.gcp_catalog import ZONES
from fakeclouds.gcp_responses import aggregated_list
from fakeclouds.gcp_state import API, GcpState, Operation

PREEMPTED_OP = "compute.instances.preempted"
MESSAGE = "Instance was preempted."


def termination_action(m: Machine) -> str:
    """What the cloud does with the VM it preempts: STOP (Compute Engine's default) or DELETE."""
    return str((m.extra.get("scheduling") or {}).get("instanceTerminationAction") or "STOP").upper()


def shown(engine: Engine, facade: str) -> list[Machine]:
    """The instances Compute Engine still shows: live ones, and preempted ones it stopped (STOP)
    until they are deleted."""
    kept = [m for m in preemption.held(engine, facade) if termination_action(m) == "STOP"]
    return sorted([*engine.live(facade), *kept], key=lambda m: (m.created_at, m.id))


def preempted_operation(engine: Engine, m: Machine, project: str) -> dict[str, Any] | None:
    """The `compute.instances.preempted` system event of a machine under notice or preempted."""
    at = m.extra.get(preemption.NOTICE_AT) or (m.ended_at if preemption.reclaimed(m) else None)
    if at is None:
        return None
    op = Operation(
        name=f"systemevent-{int(at * 1000)}-{zlib.crc32(m.id.encode()):08x}",
        project=project, zone=m.region, operation_type=PREEMPTED_OP,
        target_link=f"{API}/projects/{project}/zones/{m.region}/instances/{m.name}", user="system",
        inserted_at=at, done_at=None, id=str(10**18 + zlib.crc32(f"preempted/{m.id}".encode())),
        target_id=m.id, machine_id=m.id,
    )
    return {**op.to_json(engine), "statusMessage": MESSAGE}


def operations(engine: Engine, st: GcpState, facade: str, project: str, zone: str,
               flt: str | None) -> list[dict[str, Any]]:
    """A zone's operations: those the API's calls started, and the preemption system events."""
    keep = gcp_filter.parse(flt)
    rows = [op.to_json(engine) for op in st.operations.values() if op.project == project and op.zone == zone]
    for m in engine.machines.values():
        if m.facade == facade and m.region == zone:
            event = preempted_operation(engine, m, project)
            if event is not None:
                rows.append(event)
    return sorted((r for r in rows if keep(r)), key=lambda r: r["insertTime"])


def add_routes(router: APIRouter, base: str, engine: Engine, st: GcpState, facade: str,
               call: Callable[..., Any], zone_of: Callable[[str], str]) -> None:
    """`zones/{zone}/operations` and `aggregated/operations` (zoneOperations.list and
    globalOperations.aggregatedList, the zonal scopes: the only ones the simulation has)."""

    @router.get(base + "/zones/{zone}/operations")
    async def list_zone_operations(request: Request, project: str, zone: str) -> Response:
        def effect(_: Any, __: dict[str, Any]) -> dict[str, Any]:
            items = operations(engine, st, facade, project, zone_of(zone), request.query_params.get("filter"))
            return {"kind": "compute#operationList", "items": items}

        result: Response = await call(request, project, "list", "compute.zoneOperations.list", effect)
        return result

    @router.get(base + "/aggregated/operations")
    async def aggregated_operations(request: Request, project: str) -> Response:
        def effect(_: Any, __: dict[str, Any]) -> dict[str, Any]:
            flt = request.query_params.get("filter")
            return aggregated_list("compute#operationAggregatedList", "operations",
                                   {z: operations(engine, st, facade, project, z, flt) for z in ZONES})

        result: Response = await call(request, project, "list", "compute.globalOperations.list", effect)
        return result

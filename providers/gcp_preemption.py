"""An instance's state as the GCP adapter reports it (providers/gcp.py), a Spot VM's preemption
included: `preempted`, and the thirty-second `notice`.

Compute Engine tells a preemption apart from any other stop by a zone operation of type
`compute.instances.preempted` targeting the instance, a system event ("Detect if a VM was
preempted": `gcloud compute operations list --filter="operationType=compute.instances.preempted"`,
cloud.google.com/compute/docs/instances/spot). The preemption process: an ACPI G2 Soft Off, 30 s for
the guest to shut down (STOPPING meanwhile), then TERMINATED — or deleted, with
`instanceTerminationAction: DELETE`, which gpuprov sets. So, for a Spot VM of ours:
- STOPPING with a preemption operation not yet DONE: the notice (the guest still runs);
- TERMINATED (STOP) with one: preempted, the instance stopped (it bills its disk until deleted);
- gone (DELETE) with one: preempted and gone (TERMINATED).
The operations are read with one `globalOperations.aggregatedList` filtered by that type — only when
a Spot VM of ours is seen stopping, stopped or gone without our own delete, never for a running one
or an on-demand one — and best effort: refused, the machine reads stopped or gone as before.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from providers.base import InstanceRef, InstanceState, InstanceStatus, ProviderError

if TYPE_CHECKING:
    from providers.gcp import GcpProvider

log = logging.getLogger(__name__)
PREEMPTED_OP = "compute.instances.preempted"

_STATES = {
    "PROVISIONING": InstanceState.PENDING,
    "STAGING": InstanceState.PENDING,
    "PENDING": InstanceState.PENDING,
    "REPAIRING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    # We never stop instances: STOPPING is our delete under way (or someone else's stop), or a
    # preemption's soft off (then read with its operation: `observed`).
    "STOPPING": InstanceState.TERMINATING,
    "DEPROVISIONING": InstanceState.TERMINATING,
    "PENDING_STOP": InstanceState.STOPPING,
    "SUSPENDING": InstanceState.STOPPING,
    "SUSPENDED": InstanceState.STOPPED,
    "STOPPED": InstanceState.STOPPED,
    # Compute Engine's TERMINATED is "stopped" (host error, preemption): the instance and its disk
    # still exist and bill until deleted, so it is a broken machine of ours, not a gone one.
    "TERMINATED": InstanceState.ERROR,
}
_STOPPED = ("STOPPING", "TERMINATED", "STOPPED")


def instance_status(inst: Any, ref: InstanceRef, login_user: str) -> InstanceStatus:
    """One instance as Compute Engine reports it, by name (get) or in an aggregated listing."""
    status = str(inst.status)
    state = _STATES.get(status, InstanceState.ERROR)
    host = None
    nics = inst.network_interfaces
    if state == InstanceState.RUNNING and nics and nics[0].access_configs:
        host = nics[0].access_configs[0].nat_i_p or None
    detail = f"{status}: {inst.status_message}" if inst.status_message else status
    return InstanceStatus(ref=ref, state=state, host=host, ssh_port=22, ssh_user=login_user,
                          instance_type=inst.machine_type.rpartition("/")[2], detail=detail)


def is_spot(inst: Any) -> bool:
    scheduling = inst.scheduling
    return scheduling is not None and (str(scheduling.provisioning_model) == "SPOT"
                                       or bool(scheduling.preemptible))


def preempted_ops(p: GcpProvider) -> dict[str, str]:
    """Blocking (the SDK pool): instance id -> status (RUNNING/DONE) of the project's
    `compute.instances.preempted` operations, every zone, one aggregated listing."""
    from providers.gcp_client import compute_v1

    request = compute_v1().AggregatedListGlobalOperationsRequest(
        project=p.project, filter=f'operationType = "{PREEMPTED_OP}"')
    found: dict[str, str] = {}
    for _scope, listed in p._call("GlobalOperationsClient", "aggregated_list", request=request):
        for op in listed.operations:
            status = op.status.name if hasattr(op.status, "name") else str(op.status)
            if op.target_id and found.get(str(op.target_id)) != "DONE":
                found[str(op.target_id)] = status
    return found


async def _ops(p: GcpProvider) -> dict[str, str]:
    """preempted_ops, best effort: a refusal (a role without compute.globalOperations.list) means no
    preemption is seen — the machine reads stopped or gone as before — never a failed `get`."""
    try:
        return await p._sdk(preempted_ops, p)
    except ProviderError as e:
        log.info("gcp: no preemption operations (%s): preemptions read as plain stops", e)
        return {}


def _with(st: InstanceStatus, status: str, op: str | None) -> InstanceStatus:
    if op is None:
        return st
    if op != "DONE" and status == "STOPPING":  # the soft off: the guest still runs its 30 s
        return st.model_copy(update={"state": InstanceState.STOPPING, "notice": True,
                                     "detail": f"{st.detail} (preemption notice)"})
    state = InstanceState.STOPPED if status in ("TERMINATED", "STOPPED") else st.state
    return st.model_copy(update={"state": state, "preempted": True, "detail": f"{st.detail} (preempted)"})


def _needs_ops(p: GcpProvider, st: InstanceStatus, inst: Any) -> bool:
    if not is_spot(inst):
        return False
    p._spot.add(st.ref.instance_id)
    return str(inst.status) in _STOPPED and st.ref.instance_id not in p._deleted


async def observed(p: GcpProvider, pairs: list[tuple[InstanceStatus, Any]]) -> list[InstanceStatus]:
    """Each (status, instance) with its preemption read in: one operations listing for all of them,
    made only when a Spot VM among them stops (or stopped) without our delete."""
    if not any([_needs_ops(p, st, inst) for st, inst in pairs]):
        return [st for st, _ in pairs]
    ops = await _ops(p)
    return [_with(st, str(inst.status), ops.get(st.ref.instance_id)) if is_spot(inst) else st
            for st, inst in pairs]


async def gone(p: GcpProvider, ref: InstanceRef) -> InstanceStatus | None:
    """A machine Compute Engine no longer has: None, or — a Spot VM deleted by its preemption
    (instanceTerminationAction DELETE) — gone and preempted. Asked only of a VM this adapter saw as a
    Spot VM and did not delete itself: one it never saw (a worker started after the VM went) reads
    gone, as any id the cloud does not know does, without an operations listing per unknown id."""
    if ref.instance_id in p._deleted or ref.instance_id not in p._spot:
        return None
    if ref.instance_id not in await _ops(p):
        return None
    return InstanceStatus(ref=ref, state=InstanceState.TERMINATED, ssh_user=p.capabilities.login_user,
                          preempted=True, detail="deleted by Compute Engine after its preemption")

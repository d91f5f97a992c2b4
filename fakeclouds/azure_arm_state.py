"""The simulated Azure subscription (Azure Resource Manager), part one: what every part of the
`Account` shares — ARM's ids, names and JSON helpers, `ArmError`, `Outcome`, and `ArmState`, the
account's state over the engine with the lookups and checks resource groups, network resources and
virtual machines all make. The parts: `azure_arm_resources.py` (resource groups, long-running
operations, listings), `azure_arm_network.py` (virtual networks and subnets, network security
groups, public IPs, network interfaces), `azure_arm_compute.py` (virtual machines, their sizes,
images and disks); `azure_arm.py` composes them into `Account`.

State is JSON in `engine.facade_state["azure"]` (persisted with the engine): `groups` and
`resources` keyed by lower-cased ARM id (ARM ids are case-insensitive), `operations` for
long-running operations. A VM record names its engine machine; once that machine is gone, so is
the VM. A VM whose allocation failed has no machine: it stays `Failed` until deleted.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fakeclouds import azure_catalog as cat
from fakeclouds import preemption
from fakeclouds.engine import TERMINATED, Engine, Machine
from fakeclouds.errors import CloudError

NAME = "azure"
SUBSCRIPTION = "5f1c0a2e-7d4b-4c1e-9a3f-2b6d8e0c4a71"
TENANT = "9c3e7b1a-2f4d-4e8a-b6c0-1d5f3a7e9b20"
CLIENT_ID = "3a8d6f2c-1b9e-4d7a-8c5f-0e2b4a6d8f13"

VM, NIC, PIP, NSG, VNET = (
    "Microsoft.Compute/virtualMachines",
    "Microsoft.Network/networkInterfaces",
    "Microsoft.Network/publicIPAddresses",
    "Microsoft.Network/networkSecurityGroups",
    "Microsoft.Network/virtualNetworks",
)
TYPES = {t.split("/")[1].lower(): t for t in (VM, NIC, PIP, NSG, VNET)}
SIDE_KINDS = {NIC: "nic", PIP: "public-ip", NSG: "nsg", VNET: "virtual-network"}
MAX_OPERATIONS = 1000  # long-running operations kept for polling (oldest dropped first)
MAX_CUSTOM_DATA = 65535  # bytes, decoded (Azure's limit on osProfile.customData)

# Azure resource names: VMs 1-64 (Linux), network resources 1-80; letters, digits, '_', '.', '-';
# starting with a letter or digit, ending with a letter, digit or '_'.
NAME_LIMITS = {VM: 64, NIC: 80, PIP: 80, NSG: 80, VNET: 64}
NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
GROUP_RE = re.compile(r"[-\w._()]{0,89}[-\w_()]", re.UNICODE)
PORT_RANGE = re.compile(r"\*|\d{1,5}(?:-\d{1,5})?")


class ArmError(CloudError):
    """A refusal in ARM's shape: HTTP status and `{"error": {"code", "message"}}` (the facade's
    router renders it as is; other CloudErrors it maps first, azure_api.from_cloud_error)."""

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.retry_after = status, code, retry_after


def group_id(group: str) -> str:
    return f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{group}"


def resource_id(group: str, rtype: str, name: str) -> str:
    return f"{group_id(group)}/providers/{rtype}/{name}"


def reference(value: Any) -> str | None:
    """The lower-cased id of a `{"id": ...}` reference (None when absent)."""
    if isinstance(value, dict) and isinstance(value.get("id"), str):
        return str(value["id"]).lower()
    return None


def properties_of(body: dict[str, Any]) -> dict[str, Any]:
    props = body.get("properties") or {}
    if not isinstance(props, dict):
        raise ArmError(400, "InvalidRequestContent", "properties must be an object")
    return props


def tags_of(body: dict[str, Any]) -> dict[str, str]:
    tags = body.get("tags") or {}
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        raise ArmError(400, "InvalidTag", "tags must be an object of string names to string values")
    if len(tags) > 50:
        raise ArmError(400, "InvalidTag", "a resource may carry at most 50 tags")
    for k, v in tags.items():
        if len(k) > 512 or len(v) > 256 or re.search(r"[<>%&\\?/]", k):
            raise ArmError(
                400,
                "InvalidTagNameCharacters",
                "tag names are at most 512 characters without <, >, %, &, \\, ? or /; "
                "values at most 256 characters",
            )
    return dict(tags)


@dataclass
class Outcome:
    """What a PUT/DELETE answers: status, body, and the long-running operation to poll (if any)."""

    status: int
    body: dict[str, Any] | None
    operation: str | None = None  # the operation id (Azure-AsyncOperation)
    location: str | None = None  # where the operation lives (its URL's location segment)


class ArmState:
    """The subscription's state over an engine, and what every kind of resource looks up or checks.
    Every method is synchronous, hence atomic on the server's loop."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def state(self) -> dict[str, Any]:
        st = self.engine.facade_state.setdefault(NAME, {})
        for key in ("groups", "resources", "operations"):
            st.setdefault(key, {})
        return st

    @property
    def groups(self) -> dict[str, Any]:
        return dict.__getitem__(self.state, "groups")

    @property
    def resources(self) -> dict[str, Any]:
        return dict.__getitem__(self.state, "resources")

    @property
    def operations(self) -> dict[str, Any]:
        return dict.__getitem__(self.state, "operations")

    def save(self) -> None:
        self.engine.save()

    def machine(self, rec: dict[str, Any]) -> Machine | None:
        mid = rec.get("machine_id")
        return self.engine.machines.get(mid) if mid else None

    def prune(self) -> None:
        """Forget VMs whose machine is gone (deleted, evicted with evictionPolicy Delete, or
        forgotten by an engine reset); a Spot VM evicted with Deallocate stays, deallocated."""
        gone = [
            k
            for k, r in self.resources.items()
            if r["type"] == VM
            and r.get("machine_id")
            and ((m := self.machine(r)) is None or (m.status == TERMINATED and not evicted_kept(r, m)))
        ]
        for k in gone:
            del self.resources[k]
        if gone:
            self.save()

    def find(self, rid: str) -> dict[str, Any] | None:
        self.prune()
        rec: dict[str, Any] | None = self.resources.get(rid.lower())
        return rec

    def of_type(self, rtype: str, group: str | None = None) -> Iterator[dict[str, Any]]:
        self.prune()
        for r in list(self.resources.values()):
            if r["type"] == rtype and (group is None or r["group"].lower() == group.lower()):
                yield r

    def group(self, name: str) -> dict[str, Any]:
        g: dict[str, Any] | None = self.groups.get(name.lower())
        if g is None:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found.")
        return g

    def nic_vm(self, nic_id: str) -> dict[str, Any] | None:
        """The VM a NIC is attached to (a VM that still exists and names it)."""
        return next((v for v in self.of_type(VM) if nic_id.lower() in v["nics"]), None)

    def _check_name(self, rtype: str, name: str) -> None:
        limit = NAME_LIMITS[rtype]
        if len(name) > limit or not NAME_RE.fullmatch(name):
            raise ArmError(
                400,
                "InvalidResourceName",
                f"Resource name {name} is invalid. The name can be up to {limit} characters long, "
                "contain letters, digits, '_', '.' and '-', start with a letter or digit and end "
                "with a letter, digit or '_'.",
            )

    def _location(self, body: dict[str, Any], rtype: str) -> str:
        location = body.get("location")
        if not isinstance(location, str) or not location:
            raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
        if location.lower() not in cat.LOCATIONS:
            raise ArmError(
                400,
                "LocationNotAvailableForResourceType",
                f"The provided location '{location}' is not available for resource type "
                f"'{rtype}'. List of available regions for the resource type is "
                f"'{','.join(cat.LOCATIONS)}'.",
            )
        return location.lower()

    def _referenced(self, ref_id: str | None, rtype: str, by: str, location: str) -> dict[str, Any]:
        rec = self.find(ref_id) if ref_id else None
        if rec is None or rec["type"] != rtype:
            raise ArmError(
                400,
                "InvalidResourceReference",
                f"Resource {ref_id} referenced by resource {by} was not found. Please make sure "
                "that the referenced resource exists, and that both resources are in the same region.",
            )
        if rec["location"] != location:
            raise ArmError(
                400,
                "InvalidResourceReference",
                f"Resource {rec['id']} referenced by resource {by} is in location "
                f"'{rec['location']}', not '{location}'.",
            )
        return rec

    def new_operation(
        self,
        kind: str,
        location: str,
        rid: str,
        *,
        error: dict[str, str] | None = None,
        machine_id: str | None = None,
    ) -> str:
        op = str(uuid.uuid4())
        self.operations[op] = {
            "kind": kind,
            "location": location,
            "resource": rid,
            "error": error,
            "machine_id": machine_id,
            "start": time.time(),
        }
        while len(self.operations) > MAX_OPERATIONS:
            del self.operations[next(iter(self.operations))]
        return op

    def render(self, rec: dict[str, Any], *, instance_view: bool = False) -> dict[str, Any]:
        """A resource as ARM answers it (the account composes the network and compute renderings)."""
        raise NotImplementedError


def evicted_kept(rec: dict[str, Any], m: Machine) -> bool:
    """A Spot VM Azure evicted with `evictionPolicy: Deallocate`: "the VM is moved to the stopped-
    deallocated state" and stays until deleted (learn.microsoft.com/azure/virtual-machines/spot-vms,
    "Eviction policy"); its compute stops billing (the engine's reclaim; its disks would bill on, not
    modelled). With `Delete` the VM and its disks are deleted: gone."""
    policy = ((rec.get("request") or {}).get("properties") or {}).get("evictionPolicy")
    return preemption.reclaimed(m) and not rec.get("deleting") and policy == "Deallocate"

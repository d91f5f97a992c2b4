"""The simulated Azure subscription, resources: resource groups (create, read, delete with
everything in them), long-running operations as clients poll them, and the generic listings
(`/resources`, the admin's side resources). Shared state and checks: `azure_arm_state.py`."""


from __future__ import annotations

from typing import Any

from fakeclouds import azure_catalog as cat
from fakeclouds.azure_arm_state import (
    GROUP_RE,
    NAME,
    NIC,
    NSG,
    PIP,
    SIDE_KINDS,
    VM,
    ArmError,
    ArmState,
    Outcome,
    group_id,
    tags_of,
)
from fakeclouds.common import iso
from fakeclouds.engine import TERMINATED, TERMINATING


class ResourceGroups(ArmState):
    """Resource groups, operations and listings of the account (a part of `Account`)."""

    def put_group(self, name: str, body: dict[str, Any]) -> Outcome:
        if not GROUP_RE.fullmatch(name) or name.endswith("."):
            raise ArmError(
                400,
                "InvalidResourceGroupName",
                "resource group names are 1-90 characters of letters, digits, '.', '_', '-', "
                "'(' and ')', not ending in '.'",
            )
        location = body.get("location")
        if not isinstance(location, str) or location.lower() not in cat.LOCATIONS:
            raise ArmError(
                400,
                "LocationNotAvailableForResourceGroup",
                f"The provided location '{location}' is not available for resource group. "
                f"List of available regions is '{','.join(cat.LOCATIONS)}'.",
            )
        existing = self.groups.get(name.lower())
        if existing and existing["location"] != location.lower():
            raise ArmError(
                409,
                "InvalidResourceGroupLocation",
                f"Invalid resource group location '{location}'. The Resource group already exists in "
                f"location '{existing['location']}'.",
            )
        tags = tags_of(body)
        self.groups[name.lower()] = {
            "name": existing["name"] if existing else name,
            "location": location.lower(),
            "tags": tags,
        }
        self.save()
        return Outcome(200 if existing else 201, self.group_json(name))

    def group_json(self, name: str) -> dict[str, Any]:
        g = self.group(name)
        return {
            "id": group_id(g["name"]),
            "name": g["name"],
            "type": "Microsoft.Resources/resourceGroups",
            "location": g["location"],
            "tags": g["tags"],
            "properties": {"provisioningState": "Succeeded"},
        }

    def delete_group(self, name: str) -> Outcome:
        """Deletes the group with everything in it (VMs first, as ARM orders it)."""
        g = self.groups.get(name.lower())
        if g is None:
            return Outcome(204, None)
        for rec in list(self.of_type(VM, name)):
            m = self.machine(rec)
            if m is not None and m.status not in (TERMINATED, TERMINATING):
                self.engine.terminate(NAME, m.id)
        for k in [k for k, r in self.resources.items() if r["group"].lower() == name.lower()]:
            del self.resources[k]
        del self.groups[name.lower()]
        self.save()
        return Outcome(200, None)

    def operation_json(self, op_id: str) -> dict[str, Any]:
        op = self.operations.get(op_id)
        if op is None:
            raise ArmError(404, "NotFound", f"The operation '{op_id}' was not found.")
        status = "Succeeded"
        if op["error"]:
            status = "Failed"
        elif op["kind"] == "delete" and op["machine_id"]:
            m = self.engine.machines.get(op["machine_id"])
            if m is not None and m.status != TERMINATED:
                status = "InProgress"
        out: dict[str, Any] = {"name": op_id, "status": status, "startTime": iso(op["start"])}
        if status != "InProgress":
            out["endTime"] = iso(op["start"])
        if op["error"]:
            out["error"] = dict(op["error"])
        return out

    def generic(self, rec: dict[str, Any]) -> dict[str, Any]:
        out = {
            "id": rec["id"],
            "name": rec["name"],
            "type": rec["type"],
            "location": rec["location"],
            "tags": rec["tags"],
        }
        if rec.get("zones"):
            out["zones"] = rec["zones"]
        return out

    def side_rows(self) -> list[dict[str, Any]]:
        """Per-machine network resources, for the admin API (a VNet is shared: not listed)."""
        self.prune()
        return [
            {"kind": SIDE_KINDS[r["type"]], "id": r["id"], "name": r["name"], "tags": r["tags"]}
            for r in self.resources.values()
            if r["type"] in (NIC, PIP, NSG)
        ]

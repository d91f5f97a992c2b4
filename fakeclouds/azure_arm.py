"""The simulated Azure subscription's resources (Azure Resource Manager): resource groups, virtual
networks, network security groups, public IP addresses, network interfaces and virtual machines,
with ARM's ids, JSON shapes, references between them and the refusals the real ARM makes. The
HTTP layer (`azure_api.py`) maps requests onto an `Account`; VM machines live in the engine.

`Account` is composed of its parts: `azure_arm_resources.ResourceGroups` (groups, operations,
listings), `azure_arm_network.Network` and `azure_arm_compute.Compute`, over the shared state and
checks of `azure_arm_state.ArmState` (where the state's layout is described).
"""

from __future__ import annotations

from typing import Any

from fakeclouds.azure_arm_compute import Compute
from fakeclouds.azure_arm_network import Network
from fakeclouds.azure_arm_resources import ResourceGroups
from fakeclouds.azure_arm_state import (
    CLIENT_ID,
    NAME,
    SUBSCRIPTION,
    TENANT,
    TYPES,
    VM,
    VNET,
    ArmError,
    Outcome,
)

# What azure_api.py and tests import from here, besides the account.
__all__ = ["CLIENT_ID", "NAME", "SUBSCRIPTION", "TENANT", "TYPES", "VM", "VNET", "Account", "ArmError",
           "Outcome"]


class Account(ResourceGroups, Network, Compute):
    """The subscription's resources over an engine. Every method is synchronous, hence atomic on
    the server's loop."""

    def render(self, rec: dict[str, Any], *, instance_view: bool = False) -> dict[str, Any]:
        base = {
            "id": rec["id"],
            "name": rec["name"],
            "type": rec["type"],
            "location": rec["location"],
            "tags": rec["tags"],
        }
        if rec["type"] == VM:
            return self._vm_json(rec, base, instance_view)
        return self._network_json(rec, base)


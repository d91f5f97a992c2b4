"""Azure: a custom role definition."""

from __future__ import annotations

import json

from providers.permissions.base import UNCONFIRMED, CloudPermissions, each

_N, _C, _R = "Microsoft.Network", "Microsoft.Compute", "Microsoft.Resources"
_LOGIN = ("GET /login/{tenant}/v2.0/.well-known/openid-configuration",
          "POST /login/{tenant}/oauth2/v2.0/token")
_AZURE_CALLS: dict[str, tuple[str, ...]] = {
    **{c: () for c in _LOGIN},
    "GET subscription": (f"{_R}/subscriptions/read",),
    "GET resources": (f"{_R}/subscriptions/resources/read",),
    "GET skus": (f"{_C}/skus/read",),
    "GET vms_all": (f"{_C}/virtualMachines/read",),
    "GET virtualMachines": (f"{_C}/virtualMachines/read",),
    "GET operation": (f"{_C}/locations/operations/read", f"{_N}/locations/operations/read"),
    "PUT group": (f"{_R}/subscriptions/resourceGroups/write",),
    "PUT virtualNetworks": (f"{_N}/virtualNetworks/write",),
    "PUT networkSecurityGroups": (f"{_N}/networkSecurityGroups/write",),
    "PUT publicIPAddresses": (f"{_N}/publicIPAddresses/write",),
    "GET publicIPAddresses": (f"{_N}/publicIPAddresses/read",),
    # A NIC joins the subnet, the security group and the public IP; the VM joins the NIC and makes
    # its managed OS disk (which goes with it: deleteOption Delete).
    "PUT networkInterfaces": (f"{_N}/networkInterfaces/write", f"{_N}/virtualNetworks/subnets/join/action",
                              f"{_N}/networkSecurityGroups/join/action",
                              f"{_N}/publicIPAddresses/join/action"),
    "PUT virtualMachines": (f"{_C}/virtualMachines/write", f"{_N}/networkInterfaces/join/action",
                            f"{_C}/disks/write"),
    "DELETE virtualMachines": (f"{_C}/virtualMachines/delete", f"{_C}/disks/delete"),
    "DELETE networkInterfaces": (f"{_N}/networkInterfaces/delete",),
    "DELETE networkSecurityGroups": (f"{_N}/networkSecurityGroups/delete",),
    "DELETE publicIPAddresses": (f"{_N}/publicIPAddresses/delete",),
}
ENTRY = CloudPermissions(
    kind="custom role definition (assign it to the app registration on the subscription)",
    summary=(f"a custom role of {len(each(_AZURE_CALLS))} actions on the subscription (it makes one "
             "resource group per region, so the role cannot be narrowed to a group); instead of Contributor"),
    permissions=each(_AZURE_CALLS), calls=_AZURE_CALLS,
    document=json.dumps({
        "Name": "gpuprov", "IsCustom": True,
        "Description": "What gpuprov needs: VMs with a NIC, public IP, security group and virtual network "
                       "in resource groups it creates.",
        "Actions": sorted(each(_AZURE_CALLS)), "NotActions": [], "DataActions": [], "NotDataActions": [],
        "AssignableScopes": ["/subscriptions/<subscription-id>"]}, indent=2),
    free={c: "Microsoft Entra ID sign-in with the app's client secret: no Azure RBAC action" for c in _LOGIN},
    sources=("https://learn.microsoft.com/en-us/azure/role-based-access-control/permissions/compute",
             "https://learn.microsoft.com/en-us/azure/role-based-access-control/permissions/networking",
             "https://learn.microsoft.com/en-us/azure/role-based-access-control/custom-roles"),
    notes=("The join actions are ARM's linked-access checks for a NIC referencing a subnet, security group "
           "and public IP, and a VM referencing its NIC.",
           f"{_C}/disks/write and /disks/delete for the VM's implicit managed OS disk " + UNCONFIRMED + ".",
           "Checked against the simulation only " + UNCONFIRMED + "."),
)

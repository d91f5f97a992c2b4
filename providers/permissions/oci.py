"""Oracle Cloud: IAM policy statements."""

from __future__ import annotations

from providers.permissions.base import UNCONFIRMED, CloudPermissions, each

_OCI_GROUP = "<group>"
_OCI_INSTANCES = f"Allow group {_OCI_GROUP} to manage instance-family in tenancy"
_OCI_NETWORK = f"Allow group {_OCI_GROUP} to use virtual-network-family in tenancy"
_OCI_NSG = f"Allow group {_OCI_GROUP} to manage network-security-groups in tenancy"
_OCI_VOLUMES = f"Allow group {_OCI_GROUP} to use volume-family in tenancy"
_OCI_TENANCY = f"Allow group {_OCI_GROUP} to inspect tenancies in tenancy"
_OCI_COMPARTMENTS = f"Allow group {_OCI_GROUP} to inspect compartments in tenancy"
_CORE = "/20160918"
_OCI_CALLS: dict[str, tuple[str, ...]] = {
    f"GET {_CORE}/tenancies/{{tenancy_id}}": (_OCI_TENANCY,),
    f"GET {_CORE}/tenancies/{{tenancy_id}}/regionSubscriptions": (_OCI_TENANCY,),
    f"GET {_CORE}/availabilityDomains": (_OCI_COMPARTMENTS,),
    f"GET {_CORE}/shapes": (_OCI_INSTANCES,),
    f"GET {_CORE}/images": (_OCI_INSTANCES,),
    f"GET {_CORE}/instances": (_OCI_INSTANCES,),
    f"GET {_CORE}/instances/{{instance_id}}": (_OCI_INSTANCES,),
    f"GET {_CORE}/vnicAttachments": (_OCI_INSTANCES,),
    # A launch makes the VNIC in the subnet, puts it in the security group, and makes a boot volume.
    f"POST {_CORE}/instances": (_OCI_INSTANCES, _OCI_NETWORK, _OCI_VOLUMES),
    f"DELETE {_CORE}/instances/{{instance_id}}": (_OCI_INSTANCES,),
    f"GET {_CORE}/subnets": (_OCI_NETWORK,),
    f"GET {_CORE}/vnics/{{vnic_id}}": (_OCI_NETWORK,),
    f"GET {_CORE}/networkSecurityGroups": (_OCI_NETWORK,),
    f"GET {_CORE}/networkSecurityGroups/{{nsg_id}}/securityRules": (_OCI_NETWORK,),
    f"POST {_CORE}/networkSecurityGroups": (_OCI_NSG,),
    f"POST {_CORE}/networkSecurityGroups/{{nsg_id}}/actions/addSecurityRules": (_OCI_NSG,),
    f"DELETE {_CORE}/networkSecurityGroups/{{nsg_id}}": (_OCI_NSG,),
}
ENTRY = CloudPermissions(
    kind="IAM policy statements (for a group holding the API key's user)",
    summary=("six policy statements in the root compartment: manage instance-family and "
             "network-security-groups, use virtual-network-family and volume-family, inspect tenancies "
             "and compartments"),
    permissions=each(_OCI_CALLS), calls=_OCI_CALLS,
    document="\n".join(each(_OCI_CALLS)),
    sources=("https://docs.oracle.com/en-us/iaas/Content/Identity/Concepts/commonpolicies.htm "
             "(\"Let users launch compute instances\")",
             "https://docs.oracle.com/en-us/iaas/Content/Identity/Reference/corepolicyreference.htm",
             "https://docs.oracle.com/en-us/iaas/Content/Identity/Reference/iampolicyreference.htm"),
    notes=("Everything lives in the tenancy's root compartment (providers/oci.py), hence `in tenancy`.",
           "No `read app-catalog-listing`: the adapter launches platform (Ubuntu) images, not "
           "Marketplace ones.",
           "`use volume-family` (the boot volume a launch makes) and the two inspect statements (tenancy, "
           "region subscriptions, availability domains) " + UNCONFIRMED + ".",
           "Checked against the simulation only " + UNCONFIRMED + "."),
)

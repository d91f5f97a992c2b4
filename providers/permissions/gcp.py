"""Google Compute Engine: a custom role."""

from __future__ import annotations

import json

from providers.permissions.base import UNCONFIRMED, CloudPermissions, each

_GCE = "/compute/v1/projects/{project}"
_GCP_CALLS: dict[str, tuple[str, ...]] = {
    f"GET {_GCE}": ("compute.projects.get",),
    f"GET {_GCE}/aggregated/acceleratorTypes": ("compute.acceleratorTypes.list",),
    f"GET {_GCE}/aggregated/machineTypes": ("compute.machineTypes.list",),
    f"GET {_GCE}/aggregated/instances": ("compute.instances.list",),
    f"GET {_GCE}/zones/{{zone}}/instances/{{name}}": ("compute.instances.get",),
    f"GET {_GCE}/zones/{{zone}}/operations/{{name}}": ("compute.zoneOperations.get",),
    # The boot disk is made with the VM; the default (auto mode) network's subnet with an external
    # IP; ssh-keys/user-data metadata, a network tag for the firewall rule, labels for ownership.
    f"POST {_GCE}/zones/{{zone}}/instances": (
        "compute.instances.create", "compute.disks.create", "compute.subnetworks.use",
        "compute.subnetworks.useExternalIp", "compute.instances.setMetadata", "compute.instances.setTags",
        "compute.instances.setLabels", "compute.images.useReadOnly"),
    f"DELETE {_GCE}/zones/{{zone}}/instances/{{name}}": ("compute.instances.delete",),
    f"GET {_GCE}/global/firewalls": ("compute.firewalls.list",),
    f"POST {_GCE}/global/firewalls": ("compute.firewalls.create", "compute.networks.updatePolicy"),
    f"DELETE {_GCE}/global/firewalls/{{name}}": ("compute.firewalls.delete", "compute.networks.updatePolicy"),
}
# Used only when a Spot VM of ours stops or goes (providers/gcp_preemption.py), so no conformance
# check records it: the `compute.instances.preempted` operations tell a preemption from a stop.
_GCP_EXTRA = {"compute.globalOperations.list": (
    "globalOperations.aggregatedList of `compute.instances.preempted` operations, only when a Spot VM "
    "of ours is stopping, stopped or gone without our delete: how Compute Engine says it preempted "
    "it (and its 30 s notice); without it a preemption reads as a plain stop (providers/gcp_preemption.py)")}
_GCP_PERMISSIONS = (*each(_GCP_CALLS), *_GCP_EXTRA)
ENTRY = CloudPermissions(
    kind="custom IAM role (grant it to the service account on the project)",
    summary=(f"a custom role of {len(_GCP_PERMISSIONS)} compute.* permissions instead of Compute Admin; the "
             "closest predefined roles: Compute Instance Admin (v1) plus Compute Security Admin "
             "(firewall rules)"),
    permissions=_GCP_PERMISSIONS, calls=_GCP_CALLS,
    document=json.dumps({"title": "gpuprov", "stage": "GA", "includedPermissions": sorted(_GCP_PERMISSIONS)},
                        indent=2),
    extra=_GCP_EXTRA,
    sources=("https://cloud.google.com/compute/docs/instances/create-start-instance (permissions to create "
             "a VM: disks, subnetworks, metadata, tags, labels, images)",
             "https://cloud.google.com/compute/docs/access/iam-permissions (firewalls need "
             "compute.networks.updatePolicy)",
             "https://cloud.google.com/compute/docs/access/iam (roles/compute.instanceAdmin.v1, "
             "roles/compute.securityAdmin)"),
    notes=("compute.images.useReadOnly matters only for an --image from your own project: the default "
           "image is public (ubuntu-os-accelerator-images) " + UNCONFIRMED + ".",
           "No service account is attached to the VMs, so iam.serviceAccounts.actAs is not needed.",
           "Predefined roles: roles/compute.instanceAdmin.v1 + roles/compute.securityAdmin cover the set "
           + UNCONFIRMED + "; both grant far more.",
           "Checked against the simulation only " + UNCONFIRMED + "."),
)

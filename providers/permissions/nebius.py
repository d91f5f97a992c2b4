"""Nebius: a custom group with access permits."""

from __future__ import annotations

from providers.permissions.base import UNCONFIRMED, CloudPermissions, each

_NEB_PROJECT = "editor (access permit on the project)"
_NEB_TENANT = "viewer (access permit on the tenant)"
_NEB_CALLS: dict[str, tuple[str, ...]] = {
    "nebius.iam.v1.TokenExchangeService/Exchange": (),
    "nebius.iam.v1.ProfileService/Get": (),
    "nebius.iam.v2.ProjectService/Get": (_NEB_PROJECT,),
    "nebius.iam.v2.ProjectService/List": (_NEB_TENANT,),
    "nebius.billing.v1alpha1.CalculatorService/Estimate": (_NEB_PROJECT,),
    "nebius.compute.v1.PlatformService/List": (_NEB_PROJECT,),
    "nebius.compute.v1.ImageService/GetLatestByFamily": (_NEB_PROJECT,),
    "nebius.vpc.v1.SubnetService/List": (_NEB_PROJECT,),
    "nebius.compute.v1.InstanceService/Create": (_NEB_PROJECT,),
    "nebius.compute.v1.InstanceService/Get": (_NEB_PROJECT,),
    "nebius.compute.v1.InstanceService/GetByName": (_NEB_PROJECT,),
    "nebius.compute.v1.InstanceService/List": (_NEB_PROJECT,),
    "nebius.compute.v1.InstanceService/Delete": (_NEB_PROJECT,),
    "nebius.common.v1.OperationService/Get": (_NEB_PROJECT,),
}
ENTRY = CloudPermissions(
    kind="custom group with access permits (holding the service account)",
    summary=("a custom group with the editor role on the project (not the tenant-wide editors group) and "
             "viewer on the tenant; Nebius has no Compute-only role"),
    permissions=each(_NEB_CALLS), calls=_NEB_CALLS,
    document=("Administration → IAM → Create entity → Group (in the tenant), then Access permits:\n"
              f"  {_NEB_PROJECT}\n  {_NEB_TENANT}\nand add the service account to the group."),
    free={"nebius.iam.v1.TokenExchangeService/Exchange": "the service account's own authorized key "
                                                          "exchanged for a token: no role",
          "nebius.iam.v1.ProfileService/Get": "the caller's own profile " + UNCONFIRMED},
    sources=("https://docs.nebius.com/iam/authorization/roles (general roles auditor/viewer/editor/admin; "
             "the only service roles are Object Storage's)",
             "https://docs.nebius.com/iam/authorization/groups/manage (custom groups, access permits)"),
    notes=("Which role each call needs is not documented per method: project-level editor for compute, "
           "VPC, images and the billing calculator, tenant-level viewer for listing projects "
           + UNCONFIRMED + ".",
           "Checked against the simulation only " + UNCONFIRMED + "."),
)

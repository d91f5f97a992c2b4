"""AWS: an IAM policy."""

from __future__ import annotations

import json

from providers.permissions.base import UNCONFIRMED, CloudPermissions, each

_AWS_TAG = "gpuprov-installation"  # providers/aws.py TAG_INSTALLATION (tests/test_permissions.py)

_AWS_CALLS: dict[str, tuple[str, ...]] = {
    "sts:GetCallerIdentity": (),
    "ec2:DescribeInstances": ("ec2:DescribeInstances",),
    "ec2:DescribeInstanceTypes": ("ec2:DescribeInstanceTypes",),
    "ec2:DescribeInstanceTypeOfferings": ("ec2:DescribeInstanceTypeOfferings",),
    "ec2:DescribeSpotPriceHistory": ("ec2:DescribeSpotPriceHistory",),
    "ec2:DescribeImages": ("ec2:DescribeImages",),
    "ec2:DescribeSecurityGroups": ("ec2:DescribeSecurityGroups",),
    # Tags given in TagSpecifications need ec2:CreateTags as well (for that create action only).
    "ec2:RunInstances": ("ec2:RunInstances", "ec2:CreateTags"),
    "ec2:CreateSecurityGroup": ("ec2:CreateSecurityGroup", "ec2:CreateTags"),
    "ec2:AuthorizeSecurityGroupIngress": ("ec2:AuthorizeSecurityGroupIngress",),
    "ec2:TerminateInstances": ("ec2:TerminateInstances",),
    "ec2:DeleteSecurityGroup": ("ec2:DeleteSecurityGroup",),
}
# Made by the watch only (providers/aws_spot.py), for a running spot instance, so no conformance check
# records it: a spot request's status is where EC2 shows the two-minute interruption notice.
_AWS_EXTRA = {"ec2:DescribeSpotInstanceRequests": (
    "the watch reads a running spot instance's Spot request status: EC2's two-minute interruption "
    "notice (instance-terminated-no-capacity / marked-for-termination while the instance still runs); "
    "without it the notice is not seen, the interruption still is (providers/aws_spot.py)")}
_AWS_PERMISSIONS = (*each(_AWS_CALLS), *_AWS_EXTRA)
_AWS_OWN = {"Null": {f"aws:ResourceTag/{_AWS_TAG}": "false"}}
_AWS_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Sid": "Read", "Effect": "Allow", "Resource": "*", "Action": [
            "ec2:DescribeImages", "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
            "ec2:DescribeInstances", "ec2:DescribeSecurityGroups", "ec2:DescribeSpotInstanceRequests",
            "ec2:DescribeSpotPriceHistory"]},
        {"Sid": "Launch", "Effect": "Allow", "Resource": "*", "Action": [
            "ec2:AuthorizeSecurityGroupIngress", "ec2:CreateSecurityGroup", "ec2:RunInstances"]},
        {"Sid": "TagOnCreate", "Effect": "Allow", "Resource": "*", "Action": "ec2:CreateTags",
         "Condition": {"StringEquals": {"ec2:CreateAction": ["RunInstances", "CreateSecurityGroup"]}}},
        {"Sid": "RemoveOnlyOwn", "Effect": "Allow", "Resource": "*",
         "Action": ["ec2:DeleteSecurityGroup", "ec2:TerminateInstances"], "Condition": _AWS_OWN},
    ],
}

ENTRY = CloudPermissions(
    kind="IAM policy (attach to the access key's user)",
    summary=(f"an IAM policy of {len(_AWS_PERMISSIONS)} EC2 actions instead of EC2 full access: describe, "
             "run, create/authorize security groups, tag only at create, and terminate/delete only what "
             f"carries the `{_AWS_TAG}` tag"),
    permissions=_AWS_PERMISSIONS, calls=_AWS_CALLS, extra=_AWS_EXTRA,
    document=json.dumps(_AWS_POLICY, indent=2),
    free={"sts:GetCallerIdentity": "AWS: no permissions are required to call GetCallerIdentity "
                                   "(https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html)"},
    sources=("https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonec2.html",
             "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/supported-iam-actions-tagging.html "
             "(CreateTags with ec2:CreateAction for tag-on-create)"),
    notes=(f"The adapter tags every instance, volume and security group it makes with `{_AWS_TAG}` at "
           "creation, so terminate and delete are limited to resources carrying that tag. "
           "AuthorizeSecurityGroupIngress is left unconditioned: it also authorizes the new "
           "security-group-rule resource, which carries no tag yet " + UNCONFIRMED + ".",
           "Spot: an account that has never run a Spot Instance may need the EC2 Spot service-linked "
           "role created once by an administrator (`aws iam create-service-linked-role "
           "--aws-service-name spot.amazonaws.com`); the policy does not grant "
           "iam:CreateServiceLinkedRole " + UNCONFIRMED + ".",
           "Checked against the simulation only " + UNCONFIRMED + "."),
)

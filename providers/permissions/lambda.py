"""Lambda Cloud: an account-wide key."""

from __future__ import annotations

from providers.permissions.base import UNCONFIRMED, UNSCOPED, unscoped

ENTRY = unscoped(
    ("GET /instance-types", "GET /instances", "GET /instances/{instance_id}",
     "POST /instance-operations/launch", "POST /instance-operations/terminate", "GET /ssh-keys",
     "POST /ssh-keys", "DELETE /ssh-keys/{key_id}", "GET /firewall-rulesets", "POST /firewall-rulesets",
     "DELETE /firewall-rulesets/{ruleset_id}"),
    f"{UNSCOPED}: Lambda's API keys have full access to all Lambda API operations",
    ("https://docs.lambda.ai/public-cloud/access-security (\"API keys have full access to all Lambda API "
     "operations\")",),
    ("Use a workspace that holds nothing else if you want to fence it in: resources in one workspace "
     "cannot reach another's " + UNCONFIRMED + ".",))

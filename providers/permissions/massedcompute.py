"""Massed Compute: an account-wide key."""

from __future__ import annotations

from providers.permissions.base import UNCONFIRMED, UNSCOPED, unscoped

ENTRY = unscoped(
    ("POST /account/token/validation", "GET /gpu-inventory", "GET /images", "GET /instance",
                      "GET /instance/{instance_uuid}", "POST /instance/launch", "POST /instance/terminate",
                      "GET /ssh-keys", "POST /ssh-keys"),
    f"{UNSCOPED} {UNCONFIRMED}: no key scopes are documented that we found",
    ("/work/shared/research/provider-facts.md and PROVIDER-APIS.md (no key scopes noted); "
     "no vendor page on key permissions found " + UNCONFIRMED,))

"""Verda: account-wide client credentials."""

from __future__ import annotations

from providers.permissions.base import UNCONFIRMED, UNSCOPED, unscoped

ENTRY = unscoped(
    ("POST /oauth2/token", "GET /balance", "GET /instance-types", "GET /instance-availability",
              "GET /instances", "GET /instances/{instance_id}", "POST /instances", "PUT /instances",
              "GET /sshkeys", "POST /sshkeys", "GET /scripts", "POST /scripts", "DELETE /scripts/{script_id}",
              "GET /volumes"),
    f"{UNSCOPED} {UNCONFIRMED}: the client credentials act for the whole account; no narrower scope is "
    "documented that we found",
    ("/work/shared/research/provider-facts.md (Verda: OAuth2 client_credentials; the token answer has a "
     "`scope` field, no scopes documented)",))

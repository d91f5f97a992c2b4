"""Vast.ai: a scoped API key."""

from __future__ import annotations

import json

from providers.permissions.base import UNCONFIRMED, CloudPermissions, each

_VAST_CALLS: dict[str, tuple[str, ...]] = {
    "GET /api/v0/users/current/": ("user_read",),
    "POST /api/v0/bundles/": ("misc",),
    "PUT /api/v0/asks/{ask_id}/": ("instance_write",),
    "GET /api/v1/instances/": ("instance_read",),
    "GET /api/v0/instances/{instance_id}/": ("instance_read",),
    "DELETE /api/v0/instances/{instance_id}/": ("instance_write",),
    "GET /api/v0/instances/{instance_id}/ssh/": ("instance_read",),
    "POST /api/v0/instances/{instance_id}/ssh/": ("instance_write",),
}
ENTRY = CloudPermissions(
    kind="scoped API key (permission categories)",
    summary=("a scoped API key with misc, user_read, instance_read and instance_write (no billing, "
             "no user_write)"),
    permissions=each(_VAST_CALLS), calls=_VAST_CALLS,
    document=json.dumps({"api": {p: {} for p in ("misc", "user_read", "instance_read", "instance_write")}},
                        indent=2),
    sources=("https://docs.vast.ai/api-reference/permissions (categories; misc covers offer search)",
             "https://docs.vast.ai/api/permissions-and-authorization (the {\"api\": {...}} key JSON)"),
    notes=("Attaching a key to an instance (POST …/ssh/) as instance_write and reading them as "
           "instance_read " + UNCONFIRMED + ".",
           "Checked against the simulation only " + UNCONFIRMED + "."),
)

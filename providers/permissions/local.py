"""The local cloud: no account."""

from __future__ import annotations

from providers.permissions.base import no_account

ENTRY = no_account(
    "none: the simulation-only local cloud on this host, reached with its generated key",
    ("providers/local.py",),
    ("GET /account", "GET /offers", "GET /machines", "GET /machines/{machine_id}", "POST /machines",
     "DELETE /machines/{machine_id}"), "the simulation-only local cloud: no account")

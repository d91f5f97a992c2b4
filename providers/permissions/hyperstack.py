"""Hyperstack: an account-wide key."""

from __future__ import annotations

from providers.permissions.base import UNCONFIRMED, UNSCOPED, unscoped

ENTRY = unscoped(
    ("GET /auth/me", "GET /core/flavors", "GET /core/stocks", "GET /pricebook",
                   "GET /core/environments", "POST /core/environments", "GET /core/keypairs",
                   "POST /core/keypairs", "GET /core/virtual-machines", "GET /core/virtual-machines/{vm_id}",
                   "POST /core/virtual-machines", "DELETE /core/virtual-machines/{vm_id}"),
    f"{UNSCOPED} (a key acts as the user who made it); narrow the user instead, with an organization "
    "role allowing virtual machines, environments and key pairs",
    ("https://docs.hyperstack.cloud/docs/resource-management/api-keys (a key is personal to the user who "
     "created it)",
     "https://infrahub-doc.nexgencloud.com/docs/resource-management/organization (member roles grant "
     "per-resource permissions)"),
    ("Which role permissions the calls need is not documented in what we read " + UNCONFIRMED + ".",))

"""SSH fleets: the user's own key."""

from __future__ import annotations

from providers.permissions.base import no_account

ENTRY = no_account(
    "none at a cloud: the fleet's own SSH key and user, on hosts you run (that user needs "
    "passwordless sudo, as the SSH card says)",
    ("providers/ssh_fleet.py",))

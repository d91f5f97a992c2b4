"""What the studio's connect grid shows besides each provider's form: the seed's nine providers in the
seed's order (../shared/seeds "Connecting a cloud provider"), and the "billed to your account" note.

The nine are named here as the seed names them, never by cloud id (the registry is the one list of
ids): a registered cloud is one of them when its listing's `connect_name` (else `display_name`)
is the seed's name; the others are listed futures (providers/future.py). A cloud's tagline and
"How to connect" text are its own (`Listing.tagline`, `Listing.how_to_connect`, providers/listing.py),
followed by its least-privilege line (providers/permissions.py `connect_note`).
"""

from __future__ import annotations

from providers import listing as listings
from providers import permissions, registry
from providers.listing import Listing

# The seed's table, in its order: the grid shows these first, then every other registered cloud.
SEED_ORDER: tuple[str, ...] = ("AWS", "Azure", "GCP", "RunPod", "Modal", "Nebius", "Oracle Cloud (OCI)",
                               "Vast.ai", "SSH / On-prem")

# The seed's amber note, for every provider except SSH (providers/future.py: `billed=False`).
BILLED_NOTE = "Connecting lets the platform spin up GPU billed to your account at this provider."


def name_of(listing: Listing) -> str:
    """A cloud's name on the connect grid and its offers page: the seed's where it has one."""
    return listing.connect_name or listing.display_name or ""


def how_to(listing: Listing, cloud: str | None = None) -> str:
    """A cloud's "How to connect" text, a generic one for a cloud that declares none, then the least
    privilege its credentials need (`cloud`: its id; else found from the listing in the registry)."""
    text = listing.how_to_connect or (f"Create API credentials in your {name_of(listing)} account's "
                                      "console and paste them into the fields below; they are verified "
                                      "before anything is saved.")
    note = permissions.connect_note(cloud or _cloud_of(listing) or "")
    return f"{text} {note}" if note else text


def _cloud_of(listing: Listing) -> str | None:
    """The registered cloud whose adapter's listing `listing` is (the catalog passes listings, not ids)."""
    for entry in registry.entries():
        try:
            if listings.of(registry.adapter_class(entry.id)) == listing:
                return entry.id
        except ImportError:  # its SDK is not installed here: not the card being drawn
            continue
    return None

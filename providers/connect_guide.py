"""What the studio's connect grid shows besides each provider's form: the seed's nine providers in the
seed's order (../shared/seeds "Connecting a cloud provider"), and the "billed to your account" note.

The nine are named here as the seed names them, never by cloud id (the registry is the one list of
ids): a registered cloud is one of them when its listing's `connect_name` (else `display_name`)
is the seed's name; the others are listed futures (providers/future.py). A cloud's tagline and
"How to connect" text are its own (`Listing.tagline`, `Listing.how_to_connect`, providers/listing.py).
"""

from __future__ import annotations

from providers.listing import Listing

# The seed's table, in its order: the grid shows these first, then every other registered cloud.
SEED_ORDER: tuple[str, ...] = ("AWS", "Azure", "GCP", "RunPod", "Modal", "Nebius", "Oracle Cloud (OCI)",
                               "Vast.ai", "SSH / On-prem")

# The seed's amber note, for every provider except SSH (providers/future.py: `billed=False`).
BILLED_NOTE = "Connecting lets the platform spin up GPU billed to your account at this provider."


def name_of(listing: Listing) -> str:
    """A cloud's name on the connect grid and its offers page: the seed's where it has one."""
    return listing.connect_name or listing.display_name or ""


def how_to(listing: Listing) -> str:
    """A cloud's "How to connect" text; a generic one for a cloud that declares none."""
    return listing.how_to_connect or (f"Create API credentials in your {name_of(listing)} account's "
                                      "console and paste them into the fields below; they are verified "
                                      "before anything is saved.")

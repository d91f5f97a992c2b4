"""What the catalog (the connect grid) and the console show of a cloud: its one-line tagline, its name
where the grid's differs, and where its credentials are made.

Read only by them (api/routers/catalog.py, api/routers/providers.py, api/routers/clouds.py,
providers/connect_guide.py, providers/table.py) — never by workflows or planning, which read the
cloud's `Capabilities` (providers/base.py). So a wording change touches one adapter's `listing` and
nothing a workflow records: the copy never travels in an activity result into a history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from providers.base import CloudProvider


class Listing(BaseModel):
    """A cloud's copy for the catalog and the console (`CloudProvider.listing`)."""

    model_config = ConfigDict(frozen=True)

    # The cloud's name; None: its capabilities' `display_name`, the name its refusals give, so the
    # two cannot drift apart unless a listing says so.
    display_name: str | None = None
    tagline: str = ""  # one line for the connect grid (the studio seed's, where it names the cloud)
    # The connect grid's name for it where the seed's differs from display_name ("AWS", not "AWS EC2").
    connect_name: str | None = None
    how_to_connect: str = ""  # its connect page's "How to connect" text: where the credentials are made


def of(adapter: type[CloudProvider]) -> Listing:
    """`adapter`'s listing with its name filled in; an adapter that declares none (a test's or a
    plugin's cloud) is listed by its capabilities' name alone."""
    declared = adapter.listing or Listing()
    return declared.model_copy(update={"display_name": declared.display_name
                                       or adapter.capabilities.display_name})

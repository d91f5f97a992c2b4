"""Capacity memory's pure part: which scope a refused create is remembered under, and the plan's
order once remembered refusals are known (store/capacity.py keeps them; activities/cloud.py calls
these). Offers a live refusal covers go last, in their order, each with a note saying why; they are
still tried when nothing before them launches."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from providers.base import Offer
from store.capacity import Scope, aware
from store.models import CapacityRefusal

KIND_OF_ERROR = {"CapacityError": "capacity", "QuotaError": "quota"}  # ErrorKind value -> remembered kind


def refused_scope(details: Sequence[Any], offer: Offer, connection_id: str) -> Scope:
    """The scope a refused create of `offer` names (ApplicationError details, activities/errors.py), on
    the offer's connection; the offer's region when the cloud named none (a cloud-wide refusal is
    remembered for the region it was met in: another region may well have room)."""
    named: dict[str, Any] = {}
    if details and isinstance(details[0], dict) and isinstance(details[0].get("scope"), dict):
        named = details[0]["scope"]

    def text(name: str) -> str | None:
        value = named.get(name)
        return value if isinstance(value, str) and value else None

    return Scope(provider=offer.provider, connection_id=connection_id, region=text("region") or offer.region,
                 zone=text("zone"), instance_type=text("instance_type"))


def covers(row: CapacityRefusal, offer: Offer) -> bool:
    return (row.provider == offer.provider and row.connection_id == offer.connection_id
            and row.region == offer.region and row.zone in (None, offer.zone)
            and row.instance_type in (None, offer.instance_type))


def _clock(at: datetime) -> str:
    return aware(at).strftime("%H:%MZ")


def note(offer: Offer, row: CapacityRefusal) -> str:
    """e.g. "tried last: lambda gpu_1x_h100_pcie@us-east-1 — refused for capacity 3× since 04:12Z,
    remembered until 04:32Z"."""
    where = offer.region + (f"/{offer.zone}" if offer.zone else "")
    return (f"tried last: {offer.provider} {offer.instance_type}@{where} — refused for {row.kind} "
            f"{row.refusals}× since {_clock(row.first_at)}, remembered until {_clock(row.until)}")


def order_offers(offers: Sequence[Offer], refusals: Sequence[CapacityRefusal],
                 now: datetime) -> tuple[list[Offer], list[str]]:
    """`offers` with those a live refusal covers moved last (both parts in their own order), and a
    note per moved offer naming the refusal that moved it (the one remembered longest)."""
    live = [r for r in refusals if aware(r.until) > now]
    fresh: list[Offer] = []
    demoted: list[tuple[Offer, CapacityRefusal]] = []
    for offer in offers:
        covering = [r for r in live if covers(r, offer)]
        if covering:
            demoted.append((offer, max(covering, key=lambda r: (aware(r.until), r.refusals))))
        else:
            fresh.append(offer)
    return fresh + [o for o, _ in demoted], [note(o, r) for o, r in demoted]

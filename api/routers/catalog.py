"""The connect grid (`GET /providers/catalog`): every provider gpuprov supports or lists, each with
its card (name, tagline), its connect page's text and its credential form, generated from the typed
credentials model (providers/credentials.py) of its adapter — or, for the seed's providers without
an adapter yet, of providers/future.py (`available: false`).

Its own router, included before any `/providers/{id}` route, so `catalog` is never taken for an id."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.deps import SessionDep
from api.pagination import Page, PageDep, offset_page
from api.routers.clouds import support_of, support_results
from api.shared_bodies import CredentialFieldOut, SupportOut
from providers import connect_guide, future, listing, registry, support
from providers.credentials import Credentials


class CatalogFieldOut(CredentialFieldOut):
    """One field of a provider's connect form, as the connect page draws it. `secret`: its value is
    never shown back (nor pre-filled); a secret field's `default` is always null."""

    secret: bool = False


class CatalogProviderOut(BaseModel):
    """One card of the connect grid and what its connect page shows."""

    key: str = Field(description="the provider's id: `provider` of POST /api/compute/connections")
    name: str
    tagline: str
    how_to_connect: str = Field(description="provider-specific setup: where to create the key")
    billed_note: bool = Field(description="show the amber \"billed to your account\" note (all but SSH)")
    billed_note_text: str | None
    available: bool = Field(description="false: no adapter here yet (connecting it answers 422)")
    reason: str | None = None  # why it is not available
    credentials: list[CatalogFieldOut] = Field(description="the credential form, one entry per field")
    support: SupportOut | None = Field(default=None, description="its standing from the acceptance results "
                                                                 "(untested without an adapter)")

router = APIRouter(prefix="/providers", tags=["providers"])


def _form(model: type[Credentials]) -> list[CatalogFieldOut]:
    secret = model.secret_fields()
    rows: list[dict[str, Any]] = model.form()
    return [CatalogFieldOut(**{**row, "default": None if row["name"] in secret else row["default"]},
                            secret=row["name"] in secret) for row in rows]


def _card(key: str, name: str, tagline: str, how_to: str, model: type[Credentials] | None, *,
          available: bool, reason: str | None, billed: bool = True,
          standing: SupportOut | None = None) -> CatalogProviderOut:
    return CatalogProviderOut(key=key, name=name, tagline=tagline, how_to_connect=how_to, billed_note=billed,
                              billed_note_text=connect_guide.BILLED_NOTE if billed else None,
                              available=available, reason=reason,
                              credentials=_form(model) if model is not None else [], support=standing)


def _registered(key: str, results: list[support.AcceptanceResult]) -> CatalogProviderOut:
    """A cloud of the registry: its adapter's card and form; unavailable (with the reason) when its
    adapter cannot load here."""
    standing = support_of(key, results)
    try:
        adapter = registry.adapter_class(key)
    except ImportError as e:  # its module or SDK is not installed here
        return _card(key, key, "", f"{key} is not available in this installation.", None, available=False,
                     reason=f"not available in this installation: {e}", standing=standing)
    card = listing.of(adapter)
    return _card(key, connect_guide.name_of(card), card.tagline, connect_guide.how_to(card),
                 adapter.credentials_model, available=True, reason=None, standing=standing)


def _listed(future_provider: future.FutureProvider) -> CatalogProviderOut:
    p = future_provider
    return _card(p.key, p.name, p.tagline, p.how_to_connect, p.credentials_model, available=False,
                 reason=p.reason, billed=p.billed, standing=SupportOut.no_adapter("no adapter yet"))


def catalog(results: list[support.AcceptanceResult]) -> list[CatalogProviderOut]:
    """The seed's nine in its order (a registered cloud where one has the seed's name, else the
    listed future), then every other registered cloud (by id); `results`: what their support
    status is derived from (clouds.support_results)."""
    registered = [_registered(key, results) for key in registry.known()]
    by_name = {card.name: card for card in registered}
    futures = {p.name: p for p in future.FUTURE.values() if p.key not in by_name}
    # A seed cloud whose adapter cannot load here has no name to match: it is listed with the others.
    seeded = [by_name[name] if name in by_name else _listed(futures[name])
              for name in connect_guide.SEED_ORDER if name in by_name or name in futures]
    shown = {card.key for card in seeded}
    return seeded + [card for card in registered if card.key not in shown]


@router.get("/catalog", response_model=Page[CatalogProviderOut])
def list_catalog(page: PageDep, session: SessionDep) -> Page[CatalogProviderOut]:
    """The connect grid: every provider gpuprov supports — the seed's nine first, then every other
    registered cloud — with its tagline, how-to-connect text, whether the "billed to your account"
    note applies, and its credential form (field, label, kind: text / secret / file / toggle /
    select, default, required). `available: false`: no adapter here yet; connecting it answers 422."""
    cards = catalog(support_results(session))
    return offset_page("catalog", cards, page, query=",".join(c.key for c in cards))

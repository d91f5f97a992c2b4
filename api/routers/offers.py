"""Live offers (a read path: no workflow): of every connected cloud at once (`GET /offers`, the
studio's offers browser and `gpuprov offers`), or of one cloud (`GET /backends/{cloud}/offers`, the
backend's offers page), and the offer picked there as the backend's default (`POST .../pick`). Modal's
page is its GPU picker instead (api/routers/modal_picker.py, whose routes match first)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, status
from pydantic import BaseModel, Field

from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, in_thread, open_session
from api.errors import adapter_class, provider_http_error
from api.errors import shown as shown_value
from api.fields import CloudId, Printable, Strict, TableBackendId
from api.pagination import PageDep, offset_page
from api.shared_bodies import GpuOut, PickOut, gpu_label
from providers import connect_guide, listing, registry
from providers.base import Offer, OfferQuery, ProviderError
from providers.market import CloudAnswer, refusal
from store import connections, fleets, picks
from store.models import BackendPick, Connection
from store.secrets import SecretError


class OfferOut(BaseModel):
    """One live offer: launchable now unless `available` is false."""

    provider: str
    instance_type: str
    gpu: GpuOut | None  # None: a CPU-only machine
    vcpus: int
    memory_gib: float
    region: str
    zone: str | None
    price_per_hour: float  # USD
    spot: bool
    available: bool
    connection_id: str | None = None  # the connection that offered it (cross-cloud offers)

    @classmethod
    def of(cls, offer: Offer) -> OfferOut:
        gpu = offer.gpu
        return cls(provider=offer.provider, instance_type=offer.instance_type,
                   gpu=GpuOut(name=gpu.name, count=gpu.count, memory_gib=gpu.memory_gib) if gpu else None,
                   vcpus=offer.vcpus, memory_gib=offer.memory_gib, region=offer.region, zone=offer.zone,
                   price_per_hour=offer.price_per_hour, spot=offer.spot, available=offer.available,
                   connection_id=offer.connection_id)


class BackendOfferOut(OfferOut):
    """An offer with the offers table's columns: Instance, GPU, vCPUs, RAM, Region, $/hr (+ spot)."""

    instance: str = Field(description="the instance / machine type (= instance_type)")
    gpu_label: str | None = Field(description="`N× name (memory)`, or null for CPU-only")
    ram: str = Field(description="system memory for people, e.g. `64 GB` (memory_gib in GiB)")

    @classmethod
    def of(cls, offer: Offer) -> BackendOfferOut:
        base = OfferOut.of(offer)
        return cls(**base.model_dump(), instance=base.instance_type, gpu_label=gpu_label(base.gpu),
                   ram=f"{base.memory_gib:g} GB")


class PickCreate(Strict):
    """The offer picked in the offers table: the backend's default for this project from now on."""

    instance_type: Annotated[str, Field(min_length=1, max_length=200), Printable]
    region: Annotated[str, Field(min_length=1, max_length=64), Printable]
    spot: bool = False
    gpu: Annotated[str, Field(max_length=100), Printable] | None = Field(
        None, description="the GPU cell as shown (display only: the offer's own is stored)")


class BackendOffersPage(BaseModel):
    """The offers browser of one backend: its title, a page of offers cheapest first, and the
    offer picked as its default (null: none)."""

    title: str = Field(description="`{Provider} — Available Instances`")
    items: list[BackendOfferOut]
    next_cursor: str | None = None
    picked: PickOut | None = None

router = APIRouter(tags=["offers"])


class CloudAnswerOut(CloudAnswer):
    """What one connection said: `answered` (with how many offers), `failed` (why), `timeout`, or
    `skipped` (why it was not asked, e.g. it needs a region). `cached`: served from the short cache."""


class MarketPage(BaseModel):
    """One page of the merged offers, cheapest first, and every connection's answer."""

    items: list[OfferOut]
    next_cursor: str | None = None
    clouds: list[CloudAnswerOut]


def _connected(deps: AppDeps, project: str, cloud: str | None = None) -> list[Connection]:
    with open_session(deps) as session:
        return list(connections.connected(session, None if cloud is None else [cloud], project))


@router.get("/offers", response_model=MarketPage,
            responses={409: {"description": "no cloud (or no connection of `cloud`) is connected"},
                       422: {"description": "unknown cloud, or a bad filter"}})
async def list_all_offers(
    deps: DepsDep,
    caller: CallerDep,
    page: PageDep,
    spot: bool | None = None,
    gpu: Annotated[str | None, Query(min_length=1, max_length=40)] = None,
    region: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    gpu_count: Annotated[int | None, Query(ge=1, le=64)] = None,
    cloud: Annotated[CloudId | None, Query(description="only this cloud's connections")] = None,
) -> MarketPage:
    """Offers of every connected cloud (or of `cloud`'s connections: an unknown cloud is a 422),
    asked concurrently and merged cheapest first. A cloud that fails or is slow is reported in
    `clouds`, never waited on past its timeout; each connection's answer is reused for a short while
    (GPUPROV_OFFERS_CACHE_TTL_S)."""
    conns = await in_thread(_connected, deps, caller.project, cloud)
    if not conns and cloud is not None:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"no {cloud} connection: connect {cloud} first "
                            f"(gpuprov connect {cloud} --credential ...)")
    if not conns:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            "no cloud connected: connect one first "
                            "(gpuprov connect <cloud> --credential ...)")
    query = OfferQuery(gpu=gpu, gpu_count=gpu_count, region=region, spot=spot)
    sources = deps.market.sources(conns, deps.box, installation_id=deps.installation_id,
                                  allowed_endpoints=deps.allowed_endpoints)
    answer = await deps.market.offers(sources, query)
    fingerprint = f"{cloud or '*'}|{caller.project}|{query.model_dump_json()}"
    shown = offset_page("offers", [OfferOut.of(o) for o in answer.offers], page, query=fingerprint)
    return MarketPage(items=shown.items, next_cursor=shown.next_cursor,
                      clouds=[CloudAnswerOut(**a.model_dump()) for a in answer.clouds])


def no_connection(provider: str) -> HTTPException:
    """409: the project has no connection to `provider` (its offers and picks need one)."""
    return HTTPException(status.HTTP_409_CONFLICT, f"no {provider} connection: connect {provider} first "
                                                   f"(gpuprov connect {provider} --credential ...)")


def _connection(deps: AppDeps, project: str, provider: str) -> Connection:
    """The project's connection to `provider`: 409 when there is none, or its secret cannot be opened."""
    with open_session(deps) as session:
        conn = connections.connection_for(session, provider, project)
    if conn is None:
        raise no_connection(provider)
    try:
        connections.credentials_of(deps.box, conn)
    except SecretError as e:
        raise HTTPException(status.HTTP_409_CONFLICT, f"{provider} connection {conn.id}: {e}") from None
    return conn


def _picked(deps: AppDeps, project: str, provider: str) -> BackendPick | None:
    with open_session(deps) as session:
        return picks.get_pick(session, project, provider)


def _save_pick(deps: AppDeps, project: str, provider: str, offer: Offer) -> BackendPick:
    with open_session(deps) as session:
        return picks.save_pick(session, project=project, provider=provider, instance_type=offer.instance_type,
                               region=offer.region, spot=offer.spot,
                               gpu_label=BackendOfferOut.of(offer).gpu_label,
                               price_per_hour=offer.price_per_hour)


def _fleets(deps: AppDeps, project: str) -> list[fleets.SealedFleet]:
    with open_session(deps) as session:
        return [f for fleet_id in fleets.fleet_ids(session, project)
                if (f := fleets.sealed_fleet(session, fleet_id)) is not None]


async def _fleet_offers(deps: AppDeps, project: str, kind: str, query: OfferQuery) -> list[Offer]:
    """The free hosts of every fleet of the project (each fleet asked at once, its id as the
    offer's connection). A fleet with no free host adds none; when no fleet offers anything, a
    fleet's failure is the answer (502), else a query no fleet can serve (a region, spot: the same
    reason for each) is refused with it (422), as a cloud's own refusal of a query is."""
    found = await in_thread(_fleets, deps, project)
    if not found:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"no {kind} fleet in this project: save one first (POST /api/compute/fleets)")
    sources = deps.market.fleet_sources(kind, found, deps.box, installation_id=deps.installation_id,
                                        addresses=deps.fleet_addresses)
    answer = await deps.market.offers(sources, query)
    if answer.offers:
        return answer.offers
    failed = [a for a in answer.clouds
              if a.status not in ("answered", "skipped") and a.error != "CapacityError"]
    if failed:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY,
                            "; ".join(f"fleet {a.connection_id}: {a.reason}" for a in failed))
    if all(a.status == "skipped" for a in answer.clouds):
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            "; ".join(sorted({a.reason or "skipped" for a in answer.clouds})))
    return []


def _clear_pick(deps: AppDeps, project: str, provider: str) -> bool:
    with open_session(deps) as session:
        return picks.clear_pick(session, project, provider)


async def _live_offers(deps: AppDeps, project: str, provider: str, query: OfferQuery) -> list[Offer]:
    """The cloud's live offers for `query`, asked through the project's connection (a fleet kind:
    through every fleet of the project)."""
    adapter = adapter_class(provider)  # an adapter that cannot load here -> 422 with the reason
    if registry.is_fleet(provider):
        return await _fleet_offers(deps, project, provider, query)
    why = refusal(adapter.capabilities, query)
    if why is not None:  # refused before the connection is read: as planning across clouds does
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, why)
    conn = await in_thread(_connection, deps, project, provider)
    # The connection's adapter and the offers cache, as the cross-cloud page asks (providers/market.py):
    # requests at once share one call, and one the page stops waiting for goes on, its answer the next
    # request's.
    market = deps.market
    source, = market.sources([conn], deps.box, installation_id=deps.installation_id,
                             allowed_endpoints=deps.allowed_endpoints)

    async def fetch() -> list[Offer]:
        return await (await source.adapter()).offers(query)

    try:
        offers, _ = await asyncio.wait_for(market.cache.get_or_fetch(market.cache.key(source, query), fetch),
                                           market.timeout_s)
    except TimeoutError:
        raise HTTPException(status.HTTP_504_GATEWAY_TIMEOUT,
                            f"{provider} has not answered within {market.timeout_s:g} s (it is still "
                            "asked: try again shortly)") from None
    except ProviderError as e:
        raise provider_http_error(provider, e) from None
    return offers


def title_of(provider: str) -> str:
    """The offers page's title, `{Provider} — Available Instances` (the connect grid's name)."""
    return f"{connect_guide.name_of(listing.of(adapter_class(provider)))} — Available Instances"


_BACKEND_ERRORS: dict[int | str, dict[str, Any]] = {
    409: {"description": "not connected, or the cloud refused the stored credentials"},
    422: {"description": "unknown cloud, or a query the cloud refused"},
    429: {"description": "the cloud asked to slow down (Retry-After)"},
    502: {"description": "the cloud failed"},
    504: {"description": "the cloud has not answered in GPUPROV_OFFERS_TIMEOUT_S (still asked: try again)"},
}


@router.get("/backends/{provider}/offers", response_model=BackendOffersPage, responses=_BACKEND_ERRORS)
async def list_offers(
    provider: Annotated[TableBackendId, Path()],
    deps: DepsDep,
    caller: CallerDep,
    page: PageDep,
    spot: bool | None = None,
    gpu: Annotated[str | None, Query(min_length=1, max_length=40)] = None,
    region: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    gpu_count: Annotated[int | None, Query(ge=1, le=64)] = None,
) -> BackendOffersPage:
    """The offers browser of one backend: its title, live offers cheapest first with the table's
    columns (instance, GPU `N× name (memory)` or null for CPU-only, vCPUs, RAM, region, $/hr, spot),
    and the offer picked as its default in this project (`picked`). The cloud's answer is reused for
    GPUPROV_OFFERS_CACHE_TTL_S, as the cross-cloud page's is; pages are slices of that one answer.
    A cloud slower than GPUPROV_OFFERS_TIMEOUT_S is a 504, and still asked: try again."""
    query = OfferQuery(gpu=gpu, gpu_count=gpu_count, region=region, spot=spot)
    found = await _live_offers(deps, caller.project, provider, query)
    fingerprint = f"{provider}|{query.model_dump_json()}"
    shown = offset_page("offers", [BackendOfferOut.of(o) for o in found], page, query=fingerprint)
    picked = await in_thread(_picked, deps, caller.project, provider)
    return BackendOffersPage(title=title_of(provider), items=shown.items, next_cursor=shown.next_cursor,
                             picked=PickOut.of(picked) if picked is not None else None)


def _pick_query(provider: str, body: PickCreate) -> OfferQuery:
    """The query whose answer holds the picked offer. The page's own (no filter: every default region,
    spot and not) for an offer in a default region — its answer is the table just shown, still kept
    GPUPROV_OFFERS_CACHE_TTL_S, so a click costs no second call to the cloud (a region and spot of
    its own was a cold one each time, past the page's timeout on a busy box); else its region's."""
    defaults = adapter_class(provider).capabilities.default_regions
    return OfferQuery() if not defaults or body.region in defaults else OfferQuery(region=body.region)


@router.post("/backends/{provider}/pick", response_model=PickOut,
             responses={**_BACKEND_ERRORS,
                        422: {"description": "unknown cloud, or the offer is not among its current offers"}})
async def pick_offer(provider: Annotated[TableBackendId, Path()], body: PickCreate, deps: DepsDep,
                     caller: CallerDep) -> PickOut:
    """Make an offer of the table this backend's default in this project: a later allocation naming
    the backend (`cloud`) with no GPU and no instance type plans on that instance type in that
    region (and spot if it is a spot offer). The offer must be among the cloud's current offers (422
    otherwise); its price and GPU are taken from the cloud's answer, not from the request."""
    found = await _live_offers(deps, caller.project, provider, _pick_query(provider, body))
    offer = next((o for o in found if o.instance_type == body.instance_type and o.region == body.region
                  and o.spot == body.spot), None)
    if offer is None:
        kind = "spot " if body.spot else ""
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            f"{provider} offers no {kind}{shown_value(body.instance_type)} in "
                            f"{shown_value(body.region)} now: pick one of GET "
                            f"/api/compute/backends/{provider}/offers")
    return PickOut.of(await in_thread(_save_pick, deps, caller.project, provider, offer))


@router.get("/backends/{provider}/pick", response_model=PickOut,
            responses={404: {"description": "no offer is picked for this backend in this project"},
                       422: {"description": "unknown cloud"}})
async def get_pick(provider: Annotated[TableBackendId, Path()], deps: DepsDep, caller: CallerDep) -> PickOut:
    """The backend's default offer in this project (`picked` of GET .../offers) without asking the
    cloud for its offers: the offers page echoes it on load, before anything is fetched. Needs no
    connection."""
    adapter_class(provider)  # an unknown or unloadable cloud -> 422 with the reason
    picked = await in_thread(_picked, deps, caller.project, provider)
    if picked is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no offer is picked for {provider} in this project")
    return PickOut.of(picked)


@router.delete("/backends/{provider}/pick", status_code=status.HTTP_204_NO_CONTENT,
               responses={404: {"description": "no offer is picked for this backend in this project"},
                          422: {"description": "unknown cloud"}})
async def clear_pick(provider: Annotated[TableBackendId, Path()], deps: DepsDep, caller: CallerDep) -> None:
    """Forget the backend's default offer in this project: later allocations naming the backend
    with no GPU plan across all its offers again. Needs no connection (a disconnected backend's
    pick can be cleared too)."""
    adapter_class(provider)  # an unknown or unloadable cloud -> 422 with the reason
    if not await in_thread(_clear_pick, deps, caller.project, provider):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no offer is picked for {provider} in this project")

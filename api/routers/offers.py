"""Live offers (a read path: no workflow): of every connected cloud at once (`GET /offers`, the
studio's offers browser and `gpuprov offers`), or of one cloud (`GET /backends/{cloud}/offers`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status
from pydantic import BaseModel

from api.deps import AppDeps, CallerDep, DepsDep, in_thread, open_session
from api.errors import adapter_class, provider_http_error
from api.pagination import Page, PageDep, offset_page
from api.schemas import CloudId, OfferOut
from providers import registry
from providers.base import ConnectionOptions, OfferQuery, ProviderError
from providers.market import CloudAnswer
from store import repo
from store.models import Connection
from store.secrets import SecretError

router = APIRouter(tags=["offers"])


class CloudAnswerOut(CloudAnswer):
    """What one connection said: `answered` (with how many offers), `failed` (why), `timeout`, or
    `skipped` (why it was not asked, e.g. it needs a region). `cached`: served from the short cache."""


class MarketPage(BaseModel):
    """One page of the merged offers, cheapest first, and every connection's answer."""

    items: list[OfferOut]
    next_cursor: str | None = None
    clouds: list[CloudAnswerOut]


def _connected(deps: AppDeps, project: str) -> list[Connection]:
    with open_session(deps) as session:
        return list(repo.connected(session, None, project))


@router.get("/offers", response_model=MarketPage,
            responses={409: {"description": "no cloud is connected"}})
async def list_all_offers(
    deps: DepsDep,
    caller: CallerDep,
    page: PageDep,
    spot: bool | None = None,
    gpu: Annotated[str | None, Query(min_length=1, max_length=40)] = None,
    region: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    gpu_count: Annotated[int | None, Query(ge=1, le=64)] = None,
) -> MarketPage:
    """Offers of every connected cloud, asked concurrently and merged cheapest first. A cloud that
    fails or is slow is reported in `clouds`, never waited on past its timeout; each connection's
    answer is reused for a short while (GPUPROV_OFFERS_CACHE_TTL_S)."""
    conns = await in_thread(_connected, deps, caller.project)
    if not conns:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            "no cloud connected: connect one first "
                            "(gpuprov connect <cloud> --credential ...)")
    query = OfferQuery(gpu=gpu, gpu_count=gpu_count, region=region, spot=spot)
    sources = deps.market.sources(conns, deps.box, installation_id=deps.installation_id,
                                  allowed_endpoints=deps.allowed_endpoints)
    answer = await deps.market.offers(sources, query)
    fingerprint = f"*|{caller.project}|{query.model_dump_json()}"
    shown = offset_page("offers", [OfferOut.of(o) for o in answer.offers], page, query=fingerprint)
    return MarketPage(items=shown.items, next_cursor=shown.next_cursor,
                      clouds=[CloudAnswerOut(**a.model_dump()) for a in answer.clouds])


def _connection(deps: AppDeps, project: str,
                provider: str) -> tuple[str, dict[str, object], ConnectionOptions]:
    """The project's connection's id, decrypted credentials and options (409 when there is none)."""
    with open_session(deps) as session:
        conn = repo.connection_for(session, provider, project)
    if conn is None:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"no {provider} connection: connect {provider} first "
                            f"(gpuprov connect {provider} --credential ...)")
    try:
        credentials = repo.credentials_of(deps.box, conn)
    except SecretError as e:
        raise HTTPException(status.HTTP_409_CONFLICT, f"{provider} connection {conn.id}: {e}") from None
    options = ConnectionOptions(endpoint=conn.endpoint, ca_bundle=conn.ca_bundle)
    return conn.id, credentials, options


@router.get("/backends/{provider}/offers", response_model=Page[OfferOut],
            responses={409: {"description": "not connected, or the cloud refused the stored credentials"},
                       422: {"description": "unknown cloud, or a query the cloud refused"},
                       429: {"description": "the cloud asked to slow down (Retry-After)"},
                       502: {"description": "the cloud failed"}})
async def list_offers(
    provider: Annotated[CloudId, Path()],
    deps: DepsDep,
    caller: CallerDep,
    page: PageDep,
    spot: bool | None = None,
    gpu: Annotated[str | None, Query(min_length=1, max_length=40)] = None,
    region: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
    gpu_count: Annotated[int | None, Query(ge=1, le=64)] = None,
) -> Page[OfferOut]:
    """Live offers, cheapest first. Computed per request: pages are slices of that one answer."""
    adapter_class(provider)  # an adapter that cannot load here -> 422 with the reason
    conn_id, credentials, options = await in_thread(_connection, deps, caller.project, provider)
    query = OfferQuery(gpu=gpu, gpu_count=gpu_count, region=region, spot=spot)
    try:
        async with registry.build(provider, credentials, options=options,
                                  installation_id=deps.installation_id,
                                  allowed_endpoints=deps.allowed_endpoints) as cloud:
            found = await cloud.offers(query)
    except ProviderError as e:
        raise provider_http_error(provider, e) from None
    fingerprint = f"{provider}|{query.model_dump_json()}"
    return offset_page("offers", [OfferOut.of(o) for o in found], page, query=fingerprint)

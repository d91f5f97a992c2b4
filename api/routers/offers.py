"""Live offers of one cloud, read through its adapter (a read path: no workflow)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status

from api.deps import AppDeps, CallerDep, DepsDep, in_thread, open_session
from api.errors import adapter_class, provider_http_error
from api.pagination import Page, PageDep, offset_page
from api.schemas import CloudId, OfferOut
from providers import registry
from providers.base import ConnectionOptions, OfferQuery, ProviderError
from store import repo
from store.secrets import SecretError

router = APIRouter(prefix="/backends", tags=["offers"])


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


@router.get("/{provider}/offers", response_model=Page[OfferOut],
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

"""Live offers of one cloud, read through its adapter (a read path: no workflow)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Query, status
from sqlmodel import Session

from api.deps import AppDeps, get_deps, get_session
from api.errors import adapter_class, provider_http_error
from providers import registry
from providers.base import Offer, OfferQuery, ProviderError
from store import repo
from store.secrets import SecretError

router = APIRouter(prefix="/backends", tags=["offers"])


@router.get("/{provider}/offers", response_model=list[Offer],
            responses={404: {"description": "unknown cloud"}, 409: {"description": "not connected"},
                       502: {"description": "the cloud failed"}})
async def list_offers(
    provider: str,
    spot: bool | None = None,
    gpu: str | None = Query(default=None, min_length=1, max_length=40),  # noqa: B008
    region: str | None = Query(default=None, min_length=1, max_length=64),  # noqa: B008
    gpu_count: int | None = Query(default=None, ge=1, le=64),  # noqa: B008
    deps: AppDeps = Depends(get_deps),  # noqa: B008
    session: Session = Depends(get_session),  # noqa: B008
) -> list[Offer]:
    adapter_class(provider)  # unknown cloud -> 422 with the list
    conn = repo.connection_for(session, provider)
    if conn is None:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"no {provider} connection: connect {provider} first "
                            f"(gpuprov connect {provider} --credential api_key=...)")
    try:
        credentials = repo.credentials_of(deps.box, conn)
    except SecretError as e:
        raise HTTPException(status.HTTP_409_CONFLICT, f"{provider} connection {conn.id}: {e}") from None
    query = OfferQuery(gpu=gpu, gpu_count=gpu_count, region=region, spot=spot)
    try:
        async with registry.build(provider, credentials, endpoint=conn.endpoint,
                                  installation_id=deps.installation_id) as cloud:
            return await cloud.offers(query)
    except ProviderError as e:
        raise provider_http_error(provider, e) from None

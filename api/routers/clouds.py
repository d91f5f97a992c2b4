"""The clouds this installation knows (the registry): capabilities and the connect form of each."""

from __future__ import annotations

from fastapi import APIRouter

from api.pagination import Page, PageDep, bad_cursor, decode_cursor, encode_cursor
from api.schemas import CloudOut
from providers import registry

router = APIRouter(prefix="/clouds", tags=["clouds"])


def _cloud(cloud: str) -> CloudOut:
    try:
        return CloudOut.of(cloud, registry.adapter_class(cloud))
    except ImportError as e:  # its module or SDK is not installed here
        return CloudOut.unavailable(cloud, f"not available in this installation: {e}")


@router.get("", response_model=Page[CloudOut])
def list_clouds(page: PageDep) -> Page[CloudOut]:
    """Every registered cloud, by id: what it can do and what connecting it takes."""
    known = registry.known()
    after = None
    if page.cursor is not None:
        after = decode_cursor(page.cursor, "clouds").get("i")
        if not isinstance(after, str):
            raise bad_cursor("its position is malformed")
    ids = [c for c in known if after is None or c > after]
    shown = ids[:page.limit]
    following = encode_cursor("clouds", i=shown[-1]) if len(ids) > page.limit else None
    return Page(items=[_cloud(c) for c in shown], next_cursor=following)

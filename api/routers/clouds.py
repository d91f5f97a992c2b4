"""The clouds this installation knows (the registry): capabilities, the connect form and the support
status (from the committed acceptance results, providers/support.py) of each."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field
from sqlmodel import Session

from api.deps import SessionDep
from api.pagination import Page, PageDep, bad_cursor, decode_cursor, encode_cursor
from api.shared_bodies import CredentialFieldOut, SupportOut
from providers import listing, registry, support
from providers.base import Capabilities, CloudProvider, SelfEnd
from store import acceptance_runs


class CapabilitiesOut(BaseModel):
    """What a cloud can do, checked before any planning."""

    k3s: str  # cloud-init | ssh | none
    k3s_reason: str | None
    k8s_api: bool
    ports: bool
    ports_reason: str | None
    spot: bool
    custom_image: bool
    login_user: str
    side_resources: list[str]
    regions: list[str]  # empty: any region the cloud names
    max_lifetime_h: float | None = None  # the longest max_hours it takes; None: it takes none
    self_end: SelfEnd | None = None  # how a machine whose lease ran out ends its own bill there

    @classmethod
    def of(cls, caps: Capabilities) -> CapabilitiesOut:
        return cls(k3s=caps.k3s, k3s_reason=caps.k3s_reason, k8s_api=caps.k8s_api, ports=caps.ports,
                   ports_reason=caps.ports_reason, spot=caps.spot, custom_image=caps.custom_image,
                   login_user=caps.login_user, side_resources=list(caps.side_resources),
                   regions=list(caps.regions), max_lifetime_h=caps.max_lifetime_h, self_end=caps.self_end)


class CloudOut(BaseModel):
    id: str
    display_name: str
    available: bool = True  # False: its adapter (or SDK) is not installed here; `reason` says why
    reason: str | None = None
    capabilities: CapabilitiesOut | None
    credentials: list[CredentialFieldOut] = Field(default_factory=list,
                                                  description="the connect form, one entry per field")
    support: SupportOut | None = Field(default=None, description="its standing from the acceptance results; "
                                                                 "null: its adapter's source is not here")

    @classmethod
    def of(cls, cloud: str, adapter: type[CloudProvider], support: SupportOut | None = None) -> CloudOut:
        caps = adapter.capabilities
        return cls(id=cloud, display_name=listing.of(adapter).display_name or cloud,
                   capabilities=CapabilitiesOut.of(caps),
                   credentials=[CredentialFieldOut(**f) for f in adapter.credentials_model.form()],
                   support=support)

    @classmethod
    def unavailable(cls, cloud: str, reason: str, support: SupportOut | None = None) -> CloudOut:
        return cls(id=cloud, display_name=cloud, available=False, reason=reason, capabilities=None,
                   support=support)

router = APIRouter(prefix="/clouds", tags=["clouds"])


def support_results(session: Session) -> list[support.AcceptanceResult]:
    """What a cloud's support status is derived from here: the committed results file's runs and
    the acceptance runs this deployment recorded (gpuprov acceptance run: a simulated account's run
    can make a cloud read `simulated`, never `supported`)."""
    return [*support.load(), *acceptance_runs.results(session)]


def support_of(cloud: str, results: list[support.AcceptanceResult]) -> SupportOut | None:
    """The cloud's support status from `results`; None when its adapter's source cannot be read."""
    try:
        return SupportOut.of(support.status(cloud, results))
    except (ImportError, OSError):
        return None


def _cloud(cloud: str, results: list[support.AcceptanceResult]) -> CloudOut:
    standing = support_of(cloud, results)
    try:
        return CloudOut.of(cloud, registry.adapter_class(cloud), standing)
    except ImportError as e:  # its module or SDK is not installed here
        return CloudOut.unavailable(cloud, f"not available in this installation: {e}", standing)


@router.get("", response_model=Page[CloudOut])
def list_clouds(page: PageDep, session: SessionDep) -> Page[CloudOut]:
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
    results = support_results(session)
    return Page(items=[_cloud(c, results) for c in shown], next_cursor=following)

"""Where an allocation may be planned: the project's connections a request allows, each checked
against its cloud's capabilities before any workflow exists. Shared by every route that allocates
(instances, jobs)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import HTTPException, status
from sqlmodel import Session

from api.deps import AppDeps, open_session
from api.errors import adapter_class, shown
from api.shared_bodies import InstanceCreate
from messages.allocation import CloudTarget
from messages.enums import ConnectionStatus
from providers import registry
from providers.base import InvalidRequest, LaunchRequirements, Unsupported
from store import connections, fleets
from store.models import Connection


@dataclass
class Targets:
    """The connections planning may use, and why any named or connected cloud was left out."""

    targets: list[CloudTarget]
    notes: list[str] = field(default_factory=list)


def refusal(cloud: str, req: LaunchRequirements) -> str | None:
    """Why `cloud` cannot serve a request needing `req` (its own words), or None."""
    try:
        caps = adapter_class(cloud).capabilities
    except HTTPException as e:  # its adapter cannot load in this installation
        return str(e.detail)
    try:
        caps.check(req)
    except (Unsupported, InvalidRequest) as e:  # InvalidRequest: an image not in the cloud's form
        return e.message
    if caps.region_required and req.region is None:
        return f"{caps.display_name} needs a region"
    return None


def requirements(body: InstanceCreate) -> LaunchRequirements:
    return LaunchRequirements(spot=body.spot, ports=body.ports, image=body.image, region=body.region,
                              k3s=body.k3s, max_hours=body.max_hours)


def _candidates(session: Session, project: str,
                body: InstanceCreate) -> tuple[list[str] | None, list[Connection]]:
    """The clouds the request named (None: it named none) and the project's connections they may use."""
    if body.connection_id is not None:
        conn = connections.get_connection(session, body.connection_id)
        if conn is None or conn.project != project:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no connection {shown(body.connection_id)}")
        if conn.status != ConnectionStatus.CONNECTED:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                                f"connection {conn.id!r} is {conn.status}: it takes no new allocations")
        return [conn.provider], [conn]
    named = [body.cloud] if body.cloud is not None else body.clouds
    return named, list(connections.connected(session, named, project))


def resolve(deps: AppDeps, project: str, body: InstanceCreate) -> Targets:
    """Every connection planning may use, checked against each cloud's capabilities before any
    workflow exists. A cloud that refuses is skipped with its reason as a note, unless it was the
    only one named (then the request is a 422 with that reason). Sync: call through `in_thread`."""
    with open_session(deps) as session:
        named, conns = _candidates(session, project, body)
        # A fleet kind named (`ssh`): every fleet of the project, its id as the target's connection.
        fleet_targets = [CloudTarget(connection_id=fleet_id, cloud=kind)
                         for kind in named or [] if registry.is_fleet(kind)
                         for fleet_id in fleets.fleet_ids(session, project)]
    clouds = list(named) if named is not None else sorted({c.provider for c in conns})
    reasons = {cloud: why for cloud in clouds if (why := refusal(cloud, requirements(body))) is not None}
    if named is not None and len(named) == 1 and reasons:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, reasons[named[0]])
    if not conns and not fleet_targets:
        if named is not None and len(named) == 1 and registry.is_fleet(named[0]):
            raise HTTPException(status.HTTP_409_CONFLICT,
                                f"no {named[0]} fleet in this project: save one first "
                                "(POST /api/compute/fleets)")
        if named is None:
            raise HTTPException(status.HTTP_409_CONFLICT, "no cloud connected: connect one first "
                                                          "(gpuprov connect <cloud> --credential ...)")
        if len(named) == 1:
            raise HTTPException(status.HTTP_409_CONFLICT,
                                f"no {named[0]} connection: connect {named[0]} first "
                                f"(gpuprov connect {named[0]} --credential ...)")
        raise HTTPException(status.HTTP_409_CONFLICT, f"none of {', '.join(named)} is connected: "
                                                      "connect one first (gpuprov connect <cloud> ...)")
    connected = {c.provider for c in conns} | {t.cloud for t in fleet_targets}
    for cloud in clouds:
        if cloud not in connected and cloud not in reasons:
            reasons[cloud] = "not connected"
    targets = [CloudTarget(connection_id=c.id, cloud=c.provider) for c in conns if c.provider not in reasons]
    targets += [t for t in fleet_targets if t.cloud not in reasons]
    if not targets:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "no cloud can serve this request: "
                            + "; ".join(f"{cloud}: {why}" for cloud, why in reasons.items()))
    return Targets(targets=targets, notes=[f"skipped {cloud}: {why}" for cloud, why in reasons.items()])

"""The SSH host keys gpuprov pinned for a machine, as the user's own SSH needs them.

A cloud machine's key is pinned on its Instance row at its first login (activities/machine_ssh.py),
for one machine: `host_key_machine` names it (the attempt key and the cloud's instance id), so a pin
left from an earlier attempt's machine is not this machine's. A fleet host's key (and its bastion's)
is the fleet's probe's pin (fleet_host.host_key, fleet.bastion_host_key).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from store.models import Fleet, FleetHost, Instance
from store.records import bound_records


def machine_of(row: Instance) -> str:
    """The machine an Instance row's pin belongs to: its attempt key and the cloud's instance id."""
    return f"{row.key or ''}/{row.cloud_instance_id or ''}"


def pinned_key(row: Instance) -> str | None:
    """The cloud machine's pinned host key (OpenSSH line); None: not seen yet (or another machine's)."""
    return row.host_key if row.host_key and row.host_key_machine == machine_of(row) else None


def known_hosts_line(host: str, port: int, key_line: str) -> str:
    """`host keytype base64` (`[host]:port …` off port 22), as OpenSSH's known_hosts has it."""
    keytype, blob = key_line.split()[:2]
    name = host if port == 22 else f"[{host}]:{port}"
    return f"{name} {keytype} {blob}"


@dataclass(frozen=True)
class BastionRoute:
    host: str
    port: int
    user: str
    host_key: str | None  # pinned (OpenSSH line); None: not yet


@dataclass(frozen=True)
class MachineRoute:
    host_key: str | None  # the machine's pinned key; None: not seen yet
    bastion: BastionRoute | None = None


def route_of(session: Session, row: Instance, *, fleet: bool) -> MachineRoute:
    """How the user's SSH reaches the instance's machine, pinned: a fleet host's (`fleet`: the row's
    connection is a fleet) with its bastion, else the cloud machine's own pin."""
    if not fleet:
        return MachineRoute(host_key=pinned_key(row))
    f = session.get(Fleet, row.connection_id)
    if f is None or row.ssh_host is None:
        return MachineRoute(host_key=None)
    host = session.exec(select(FleetHost).where(FleetHost.fleet_id == f.id,
                                                FleetHost.host == row.ssh_host)).first()
    return _fleet_route(f, host)


def _fleet_route(f: Any, host: Any | None) -> MachineRoute:
    """The route through fleet `f` to `host` (a Fleet and a FleetHost, or records of the columns
    that _FLEETS and _HOSTS read of them)."""
    bastion = None
    if f.bastion_host:
        bastion = BastionRoute(host=f.bastion_host, port=f.bastion_port or 22, user=f.bastion_user or f.user,
                               host_key=f.bastion_host_key)
    return MachineRoute(host_key=host.host_key if host is not None else None, bastion=bastion)


def fleet_routes(session: Session, rows: Sequence[Instance]) -> dict[str, MachineRoute]:
    """`route_of(…, fleet=True)` of every row (fleet instances), by instance id, in two queries
    whatever the number of rows: a list page asked once per row (an N+1)."""
    if not rows:
        return {}
    fleet_ids = sorted({r.connection_id for r in rows})
    fleets = {f.id: f for f in bound_records(session, _FLEETS, {"ids": fleet_ids})}
    hosts: dict[tuple[str, str], Any] = {}
    if fleets:
        names = sorted({r.ssh_host for r in rows if r.ssh_host})
        for h in bound_records(session, _HOSTS, {"fleet_ids": sorted(fleets), "names": names}):
            hosts.setdefault((h.fleet_id, h.host), h)  # the first, as route_of's .first()
    routes = {}
    for row in rows:
        f = fleets.get(row.connection_id)
        if f is None or row.ssh_host is None:
            routes[row.id] = MachineRoute(host_key=None)
            continue
        routes[row.id] = _fleet_route(f, hosts.get((f.id, row.ssh_host)))
    return routes


# fleet_routes' two reads, built once (`bound_records`: the instances list asks at every console
# refresh): what _fleet_route reads of the fleets and of their hosts named.
_FLEETS = sa.select(col(Fleet.id), col(Fleet.user), col(Fleet.bastion_host), col(Fleet.bastion_port),
                    col(Fleet.bastion_user), col(Fleet.bastion_host_key)).where(
    col(Fleet.id).in_(sa.bindparam("ids", expanding=True)))
_HOSTS = sa.select(col(FleetHost.fleet_id), col(FleetHost.host), col(FleetHost.host_key)).where(
    col(FleetHost.fleet_id).in_(sa.bindparam("fleet_ids", expanding=True)),
    col(FleetHost.host).in_(sa.bindparam("names", expanding=True))).order_by(col(FleetHost.position))

"""Query helpers for SSH fleets (store/models.py Fleet, FleetHost). Private keys go in and out only
through a SecretBox: rows hold Fernet ciphertext of the OpenSSH text."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, delete, select

from messages.fleet import HostProbe
from store.db import commit_unless_gone
from store.models import Fleet, FleetHost, utcnow
from store.records import bound_records
from store.secrets import SecretBox


@dataclass(frozen=True)
class Bastion:
    host: str
    port: int
    user: str
    private_key: str | None  # OpenSSH text; None: the fleet's key


def get_fleet(session: Session, project: str, fleet_id: str) -> Fleet | None:
    """The project's fleet of that id; None for an unknown id or another project's."""
    row = session.get(Fleet, fleet_id)
    return row if row is not None and row.project == project else None


def hosts_of(session: Session, fleet_id: str) -> Sequence[FleetHost]:
    return session.exec(select(FleetHost).where(FleetHost.fleet_id == fleet_id)
                        .order_by(col(FleetHost.position))).all()


def probe_targets(session: Session, fleet_ids: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """(fleet id, its latest probe id) of every fleet of every project (or those named), oldest first:
    what a scheduled re-probe probes. A fleet never saved through the API (no probe id) is skipped."""
    stmt = select(Fleet).where(col(Fleet.probe_id).is_not(None))
    if fleet_ids is not None:
        stmt = stmt.where(col(Fleet.id).in_(list(fleet_ids)))
    rows = session.exec(stmt.order_by(col(Fleet.created_at), col(Fleet.id))).all()
    return [(f.id, f.probe_id) for f in rows if f.probe_id is not None]


# What a fleet's health shows of each host (api/routers/providers.py).
HOST_HEALTH_COLUMNS: tuple[Any, ...] = (FleetHost.fleet_id, FleetHost.host, FleetHost.probed_at,
                                        FleetHost.reachable, FleetHost.reason, FleetHost.gpu_count)
# Built once (`bound_records`: the providers list asks at every console refresh).
_HOSTS_OF_FLEETS = sa.select(*HOST_HEALTH_COLUMNS).where(
    col(FleetHost.fleet_id).in_(sa.bindparam("fleet_ids", expanding=True))).order_by(col(FleetHost.position))


def host_health_by_fleet(session: Session, fleet_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The hosts of each fleet named, in their order, as records of HOST_HEALTH_COLUMNS: one query."""
    found: dict[str, list[Any]] = {f: [] for f in fleet_ids}
    if fleet_ids:
        for h in bound_records(session, _HOSTS_OF_FLEETS, {"fleet_ids": list(fleet_ids)}):
            found[h.fleet_id].append(h)
    return found


def save_fleet(session: Session, box: SecretBox, *, fleet_id: str, project: str, name: str, user: str,
               port: int, hosts: Sequence[str], private_key: str | None, bastion: Bastion | None,
               new_host_id: Callable[[], str], probe_id: str | None = None) -> Fleet:
    """Insert or replace a fleet's configuration and commit. `private_key` None keeps the saved key
    (and the saved bastion key when the bastion gives none). Hosts kept by name keep their last
    probe and their pinned host key (the bastion's pin stays while its host and port do);
    `new_host_id` is a callable giving ids for new ones."""
    row = session.get(Fleet, fleet_id)
    if row is None:
        assert private_key is not None, "a new fleet needs a key"
        row = Fleet(id=fleet_id, project=project, name=name, secret=box.seal_text(private_key))
    elif private_key is not None:
        row.secret = box.seal_text(private_key)
    row.name, row.user, row.port, row.probe_id = name, user, port, probe_id
    same_bastion = bastion is not None and (bastion.host, bastion.port) == (row.bastion_host,
                                                                             row.bastion_port)
    if not same_bastion:
        row.bastion_host_key = None  # another bastion (or none): its key is pinned afresh
    if bastion is None:
        row.bastion_host = row.bastion_port = row.bastion_user = row.bastion_secret = None
    else:
        # No key given: the same bastion keeps the key saved for it; another one uses the fleet's.
        row.bastion_secret = (box.seal_text(bastion.private_key) if bastion.private_key
                              else row.bastion_secret if same_bastion else None)
        row.bastion_host, row.bastion_port, row.bastion_user = bastion.host, bastion.port, bastion.user
    session.add(row)
    saved = {h.host: h for h in hosts_of(session, fleet_id)}
    for position, name_ in enumerate(hosts):
        host = saved.pop(name_, None)
        if host is None:
            host = FleetHost(id=new_host_id(), fleet_id=fleet_id, position=position,
                             host=name_)
        host.position = position
        session.add(host)
    for gone in saved.values():
        session.delete(gone)
    session.commit()
    session.refresh(row)
    return row


def forget_host_keys(session: Session, fleet: Fleet, hosts: Sequence[str], *, bastion: bool,
                     probe_id: str) -> list[str]:
    """Re-trust: drop the pinned keys of `hosts` (by name) and, if `bastion`, the bastion's, so the
    next probe pins what they present now; `probe_id` becomes the fleet's latest probe (an older
    probe still running records nothing). Returns the names not in the fleet (nothing is changed
    then). Commits."""
    saved = {h.host: h for h in hosts_of(session, fleet.id)}
    unknown = [h for h in hosts if h not in saved]
    if unknown:
        return unknown
    for name in hosts:
        saved[name].host_key = saved[name].host_key_pinned_at = None
        session.add(saved[name])
    if bastion:
        fleet.bastion_host_key = None
    fleet.probe_id = probe_id
    session.add(fleet)
    session.commit()
    return []


def delete_fleet(session: Session, fleet_id: str) -> None:
    """Drop the configuration (hosts are not touched: gpuprov only forgets them). Commits."""
    session.exec(delete(FleetHost).where(col(FleetHost.fleet_id) == fleet_id))  # type: ignore[call-overload]
    row = session.get(Fleet, fleet_id)
    if row is not None:
        session.delete(row)
    session.commit()


def record_probe(session: Session, probe: HostProbe, probe_id: str) -> bool:
    """Store a host's answer to probe `probe_id`. Skipped (False) when the host was removed meanwhile
    or a later save started another probe: an older probe never overwrites a newer one's answer."""
    host = session.get(FleetHost, probe.host_id)
    fleet = session.get(Fleet, host.fleet_id) if host is not None else None
    if host is None or fleet is None or fleet.probe_id != probe_id:
        return False
    host.probed_at = utcnow()
    host.reachable, host.reason = probe.reachable, probe.reason
    host.gpu_vendor, host.gpu_name, host.gpu_count = probe.gpu_vendor, probe.gpu_name, probe.gpu_count
    host.gpu_memory_gb, host.gpu_summary = probe.gpu_memory_gb, probe.gpu_summary
    host.docker, host.sudo, host.tcp_forwarding = probe.docker, probe.sudo, probe.tcp_forwarding
    if host.host_key is None and probe.reachable and probe.host_key:  # trust on first use
        host.host_key, host.host_key_pinned_at = probe.host_key, host.probed_at
    if fleet.bastion_host_key is None and probe.bastion_host_key:
        fleet.bastion_host_key = probe.bastion_host_key
        session.add(fleet)
    session.add(host)
    return commit_unless_gone(session)  # deleted between the reads above and this write: skipped too


@dataclass(frozen=True)
class SealedFleet:
    """What the fleet adapter is built from, still sealed: read in one session, opened later."""

    id: str
    project: str
    fingerprint: str  # changes when the key, hosts, user, port or bastion change
    fields: dict[str, object]  # the adapter's credentials, private keys still sealed
    sealed: dict[str, bytes]  # credential field -> sealed key text
    # The pinned SSH host keys (the probe's, trust on first use): host -> OpenSSH line; the bastion's.
    host_keys: dict[str, str] = field(default_factory=dict)
    bastion_host_key: str | None = None


def sealed_fleet(session: Session, fleet_id: str) -> SealedFleet | None:
    """The fleet as the SSH fleet adapter's credentials (providers/future.py SshFleetCredentials),
    keys sealed; None for an unknown id."""
    row = session.get(Fleet, fleet_id)
    if row is None:
        return None
    rows = hosts_of(session, fleet_id)
    hosts = "\n".join(h.host for h in rows)
    host_keys = {h.host: h.host_key for h in rows if h.host_key}
    fields: dict[str, object] = {"ssh_user": row.user, "ssh_port": row.port, "hosts": hosts}
    if row.bastion_host:
        fields.update(bastion_host=row.bastion_host, bastion_port=row.bastion_port or 22,
                      bastion_user=row.bastion_user)
    sealed = {"private_key": row.secret}
    if row.bastion_host and row.bastion_secret:
        sealed["bastion_private_key"] = row.bastion_secret
    h = hashlib.sha256()
    pins = repr((sorted(host_keys.items()), row.bastion_host_key)).encode()
    for part in (row.secret, row.bastion_secret or b"", repr(sorted(fields.items())).encode(), pins):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return SealedFleet(id=row.id, project=row.project, fingerprint=h.hexdigest(), fields=fields,
                       sealed=sealed, host_keys=host_keys, bastion_host_key=row.bastion_host_key)


def open_fleet(box: SecretBox, fleet: SealedFleet) -> dict[str, object]:
    """The adapter's credentials in clear (for the adapter only: never logged, never returned)."""
    return {**fleet.fields, **{name: box.open_text(value) for name, value in fleet.sealed.items()}}


def fleet_ids(session: Session, project: str) -> list[str]:
    """The project's fleets, oldest first (the order planning asks them in)."""
    return list(session.exec(select(Fleet.id).where(Fleet.project == project)
                             .order_by(col(Fleet.created_at), col(Fleet.id))).all())


def all_fleet_ids(session: Session) -> list[str]:
    """Every fleet of every project (the sweep's)."""
    return list(session.exec(select(Fleet.id).order_by(col(Fleet.created_at), col(Fleet.id))).all())

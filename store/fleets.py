"""Query helpers for SSH fleets (store/models.py Fleet, FleetHost). Private keys go in and out only
through a SecretBox: rows hold Fernet ciphertext of the OpenSSH text."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlmodel import Session, col, delete, select

from messages.fleet import HostProbe
from store.models import Fleet, FleetHost, utcnow
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


def save_fleet(session: Session, box: SecretBox, *, fleet_id: str, project: str, name: str, user: str,
               port: int, hosts: Sequence[str], private_key: str | None, bastion: Bastion | None,
               new_host_id: Callable[[], str], probe_id: str | None = None) -> Fleet:
    """Insert or replace a fleet's configuration and commit. `private_key` None keeps the saved key
    (and the saved bastion key when the bastion gives none). Hosts kept by name keep their last
    probe; `new_host_id` is a callable giving ids for new ones."""
    row = session.get(Fleet, fleet_id)
    if row is None:
        assert private_key is not None, "a new fleet needs a key"
        row = Fleet(id=fleet_id, project=project, name=name, secret=box.seal_text(private_key))
    elif private_key is not None:
        row.secret = box.seal_text(private_key)
    row.name, row.user, row.port, row.probe_id = name, user, port, probe_id
    if bastion is None:
        row.bastion_host = row.bastion_port = row.bastion_user = row.bastion_secret = None
    else:
        row.bastion_host, row.bastion_port, row.bastion_user = bastion.host, bastion.port, bastion.user
        row.bastion_secret = box.seal_text(bastion.private_key) if bastion.private_key else None
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
    session.add(host)
    session.commit()
    return True


@dataclass(frozen=True)
class SealedFleet:
    """What the fleet adapter is built from, still sealed: read in one session, opened later."""

    id: str
    project: str
    fingerprint: str  # changes when the key, hosts, user, port or bastion change
    fields: dict[str, object]  # the adapter's credentials, private keys still sealed
    sealed: dict[str, bytes]  # credential field -> sealed key text


def sealed_fleet(session: Session, fleet_id: str) -> SealedFleet | None:
    """The fleet as the SSH fleet adapter's credentials (providers/future.py SshFleetCredentials),
    keys sealed; None for an unknown id."""
    row = session.get(Fleet, fleet_id)
    if row is None:
        return None
    hosts = "\n".join(h.host for h in hosts_of(session, fleet_id))
    fields: dict[str, object] = {"ssh_user": row.user, "ssh_port": row.port, "hosts": hosts}
    if row.bastion_host:
        fields.update(bastion_host=row.bastion_host, bastion_port=row.bastion_port or 22,
                      bastion_user=row.bastion_user)
    sealed = {"private_key": row.secret}
    if row.bastion_host and row.bastion_secret:
        sealed["bastion_private_key"] = row.bastion_secret
    h = hashlib.sha256()
    for part in (row.secret, row.bastion_secret or b"", repr(sorted(fields.items())).encode()):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return SealedFleet(id=row.id, project=row.project, fingerprint=h.hexdigest(), fields=fields,
                       sealed=sealed)


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

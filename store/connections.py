"""Connections (store/models.py Connection): a project's credentials for a cloud, their status and
last health check, and the live instances each one holds.

Functions take an open Session and commit only where they say so, so a caller can group writes.
Credentials go in and out only through a SecretBox: the row holds ciphertext.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, func, select

from messages.enums import ConnectionStatus
from store.ids import new_id
from store.instances import is_live
from store.models import Connection, Instance
from store.projects import DEFAULT_PROJECT
from store.secrets import SecretBox


def add_connection(session: Session, box: SecretBox, *, provider: str, name: str,
                   credentials: dict[str, Any], endpoint: str | None = None, ca_bundle: str | None = None,
                   account: str | None = None, project: str = DEFAULT_PROJECT) -> Connection:
    """Insert a connection with encrypted credentials and commit it (tests, bench; the service
    saves verified connections through `save_connection`)."""
    return save_connection(session, connection_id=new_id(), provider=provider, name=name,
                           secret=box.seal(credentials), endpoint=endpoint, ca_bundle=ca_bundle,
                           account=account, project=project)


def save_connection(session: Session, *, connection_id: str, provider: str, name: str, secret: bytes,
                    endpoint: str | None, ca_bundle: str | None, account: str | None,
                    project: str = DEFAULT_PROJECT) -> Connection:
    """Insert a verified connection, once: a retried save finds the row and leaves it."""
    row = session.get(Connection, connection_id)
    if row is None:
        row = Connection(id=connection_id, project=project, provider=provider, name=name, endpoint=endpoint,
                         ca_bundle=ca_bundle, account=account, status=ConnectionStatus.CONNECTED,
                         secret=secret)
        session.add(row)
        session.commit()
    return row


def credentials_of(box: SecretBox, connection: Connection) -> dict[str, Any]:
    """Decrypt a connection's credentials (raises SecretError with a wrong key)."""
    return box.open(connection.secret)


def fingerprint(connection: Connection) -> str:
    """A digest of what an adapter is built from (cloud, sealed credentials, endpoint, CA): it
    changes when the connection is re-keyed or re-pointed, so caches of the old one are dropped."""
    h = hashlib.sha256(connection.provider.encode())
    endpoint, ca_bundle = connection.endpoint or "", connection.ca_bundle or ""
    for part in (connection.secret, endpoint.encode(), ca_bundle.encode()):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def list_connections(session: Session) -> Sequence[Connection]:
    return session.exec(select(Connection).order_by(col(Connection.created_at), col(Connection.id))).all()


def get_connection(session: Session, connection_id: str) -> Connection | None:
    return session.get(Connection, connection_id)


def connection_for(session: Session, provider: str, project: str = DEFAULT_PROJECT) -> Connection | None:
    """The newest connected connection of `provider` in `project`, or None."""
    stmt = (select(Connection)
            .where(Connection.provider == provider, Connection.project == project,
                   Connection.status == ConnectionStatus.CONNECTED)
            .order_by(col(Connection.created_at).desc(), col(Connection.id).desc()))
    return session.exec(stmt).first()


def connected(session: Session, providers: Collection[str] | None = None,
              project: str = DEFAULT_PROJECT) -> Sequence[Connection]:
    """Connected connections of `project` (of `providers`, or of every cloud), newest first (the
    order in which `connection_for` prefers them)."""
    stmt = select(Connection).where(Connection.status == ConnectionStatus.CONNECTED,
                                    Connection.project == project)
    if providers is not None:
        stmt = stmt.where(col(Connection.provider).in_(list(providers)))
    return session.exec(stmt.order_by(col(Connection.created_at).desc(), col(Connection.id).desc())).all()


def any_connected(session: Session, project: str) -> bool:
    """Whether `project` has a connected connection: one id read, no row built (the spend card asks
    at every refresh)."""
    return session.connection().execute(_ANY_CONNECTED, {"project": project}).first() is not None


# Built once, run on the session's connection: building it and the ORM's execute path cost more
# than the read (spend's card: 10 % of its request's server time).
_ANY_CONNECTED = sa.select(col(Connection.id)).where(
    col(Connection.status) == ConnectionStatus.CONNECTED.value,
    col(Connection.project) == sa.bindparam("project")).limit(1)


def connected_anywhere(session: Session,
                       connection_ids: Collection[str] | None = None) -> Sequence[Connection]:
    """Connected connections of every project (of `connection_ids`, or all), oldest first (the
    health check's targets)."""
    stmt = select(Connection).where(Connection.status == ConnectionStatus.CONNECTED)
    if connection_ids is not None:
        stmt = stmt.where(col(Connection.id).in_(list(connection_ids)))
    return session.exec(stmt.order_by(col(Connection.created_at), col(Connection.id))).all()


def record_health(session: Session, connection_id: str, *, status: str, reason: str | None,
                  checked_at: datetime, latency_ms: int | None) -> Connection | None:
    """Set a connection's last health check (not committed: the caller groups them); None when the
    connection is gone. Its `status` (connected/removing) is not touched."""
    row = session.get(Connection, connection_id)
    if row is None:
        return None
    row.health_status, row.health_reason = status, reason
    row.health_checked_at, row.health_latency_ms = checked_at, latency_ms
    session.add(row)
    return row


def live_totals(session: Session, project: str,
                connection_ids: Collection[str]) -> dict[str, tuple[int, float]]:
    """Connection id -> (how many live instances, their summed $/hr), of the project's connections,
    in one query; connections with none are absent. An instance whose price is not known yet adds
    to the count, not the sum."""
    if not connection_ids:
        return {}
    rows = session.connection().execute(_live_totals_statement(),
                                        {"project": project, "connection_ids": list(connection_ids)})
    return {cid: (int(n), float(cost or 0.0)) for cid, n, cost in rows}


@functools.cache
def _live_totals_statement() -> sa.Select[str, int, float | None]:
    """`live_totals`' statement, built once (building it cost more than running it). It reads the
    project's live rows' (project, connection_id, price_per_hour, status) index alone (0032)."""
    total = func.coalesce(func.sum(Instance.price_per_hour), 0.0)
    return (sa.select(col(Instance.connection_id), func.count(), total)
            .where(col(Instance.project) == sa.bindparam("project"),
                   col(Instance.connection_id).in_(sa.bindparam("connection_ids", expanding=True)),
                   is_live())
            .group_by(col(Instance.connection_id)))


def mark_connection(session: Session, connection_id: str, *, status: str, account: str | None = None,
                    error: str | None = None) -> Connection | None:
    """Set a connection's status (e.g. `removing`), account and error, and commit."""
    row = session.get(Connection, connection_id)
    if row is None:
        return None
    row.status, row.account, row.error = status, account, error
    session.add(row)
    session.commit()
    return row


def delete_connection(session: Session, connection_id: str) -> bool:
    row = session.get(Connection, connection_id)
    if row is None:
        return False
    session.delete(row)
    session.commit()
    return True

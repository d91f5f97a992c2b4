"""Query helpers over the SQL projection, shared by the API, the CLI and activities.

Functions take an open Session and commit only where they say so, so a caller can group
writes. Credentials go in and out only through a SecretBox: the row holds ciphertext.
"""

from __future__ import annotations

import hashlib
import secrets as _random
from collections.abc import Collection, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select

from messages.enums import AllocationStatus, ConnectionStatus
from store.models import (
    ApiToken,
    Attempt,
    BackendPick,
    Connection,
    CreateSend,
    IdempotencyRecord,
    Instance,
    InstanceEvent,
    Project,
    utcnow,
)
from store.secrets import SecretBox

_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
DEFAULT_PROJECT = "default"  # exists in every database (migration 0007)

# Instance statuses while a cloud machine may exist (or be about to).
LIVE_STATUSES = frozenset(s.value for s in AllocationStatus if s.live)


def new_id(length: int = 10) -> str:
    """A short random id of [a-z0-9], starting with a letter (safe as a cloud name/tag)."""
    first = _random.choice(_ALPHABET[:26])
    return first + "".join(_random.choice(_ALPHABET) for _ in range(length - 1))


# --------------------------------------------------------------------------- connections


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


def live_totals(session: Session, connection_ids: Collection[str]) -> dict[str, tuple[int, float]]:
    """Connection id -> (how many live instances, their summed $/hr), in one query; connections
    with none are absent. An instance whose price is not known yet adds to the count, not the sum."""
    if not connection_ids:
        return {}
    total = func.coalesce(func.sum(Instance.price_per_hour), 0.0)
    stmt = (select(Instance.connection_id, func.count(), total)
            .where(col(Instance.connection_id).in_(list(connection_ids)),
                   col(Instance.status).in_(list(LIVE_STATUSES)))
            .group_by(col(Instance.connection_id)))
    return {cid: (int(n), float(cost or 0.0)) for cid, n, cost in session.exec(stmt).all()}


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


# --------------------------------------------------------------------------- instances


def list_instances(session: Session, *, project: str | None = None, status: str | None = None,
                   connection_id: str | None = None) -> Sequence[Instance]:
    stmt = select(Instance)
    if project is not None:
        stmt = stmt.where(Instance.project == project)
    if status is not None:
        stmt = stmt.where(Instance.status == status)
    if connection_id is not None:
        stmt = stmt.where(Instance.connection_id == connection_id)
    return session.exec(stmt.order_by(col(Instance.created_at).desc(), col(Instance.id))).all()


def live_instances(session: Session, connection_id: str) -> list[Instance]:
    """Instances of a connection that may still hold (or be about to hold) a cloud machine."""
    return [i for i in list_instances(session, connection_id=connection_id) if i.status in LIVE_STATUSES]


def get_instance(session: Session, instance_id: str) -> Instance | None:
    return session.get(Instance, instance_id)


def insert_instance_if_absent(session: Session, row: Instance) -> bool:
    """Insert `row` unless its id exists (the allocation's workflow may have written it first:
    whichever comes first wins, the other completes it) and commit. True if this call inserted it."""
    if session.get(Instance, row.id) is not None:
        return False
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # written concurrently by the workflow's record activity
        session.rollback()
        return False
    return True


def update_instance(session: Session, instance_id: str, **fields: Any) -> Instance | None:
    """Set fields on an instance row (bumping updated_at) and commit. Unknown fields raise."""
    row = session.get(Instance, instance_id)
    if row is None:
        return None
    for name, value in fields.items():
        if name not in Instance.model_fields:
            raise AttributeError(f"Instance has no field {name!r}")
        setattr(row, name, value)
    row.updated_at = utcnow()
    session.add(row)
    session.commit()
    return row


def attempts_of(session: Session, instance_id: str) -> Sequence[Attempt]:
    stmt = select(Attempt).where(Attempt.instance_id == instance_id).order_by(col(Attempt.seq))
    return session.exec(stmt).all()


def events_of(session: Session, instance_id: str, after: int = 0) -> Sequence[InstanceEvent]:
    """Status/phase transitions in order; `after` skips those already seen (by event id)."""
    stmt = (select(InstanceEvent)
            .where(InstanceEvent.instance_id == instance_id, col(InstanceEvent.id) > after)
            .order_by(col(InstanceEvent.id)))
    return session.exec(stmt).all()


def record_attempt(session: Session, attempt: Attempt, *, commit: bool = True) -> Attempt:
    """Insert or update the attempt (instance_id, seq): activities retry, rows must not double.
    An update keeps the row's `at` (when the attempt began). `commit=False` leaves the commit to
    a caller writing more in the same transaction."""
    stmt = select(Attempt).where(Attempt.instance_id == attempt.instance_id, Attempt.seq == attempt.seq)
    row = session.exec(stmt).first()
    if row is None:
        row = attempt
    else:
        for name in ("provider", "instance_type", "region", "spot", "price_per_hour", "outcome", "reason"):
            setattr(row, name, getattr(attempt, name))
    session.add(row)
    if commit:
        session.commit()
    return row


def mark_phases(session: Session, instance_id: str, marks: Sequence[tuple[str, str]], *,
                commit: bool = True) -> None:
    """Move the row through (status, phase) marks in order, one event per change, and commit
    (`commit=False`: the caller commits, with whatever else belongs in the same transaction).
    A retried call changes nothing (each mark equal to the row's state is skipped)."""
    row = session.get(Instance, instance_id)
    if row is None or not marks:
        return
    for status, phase in marks:
        if (row.status, row.phase) != (status, phase):
            session.add(InstanceEvent(instance_id=instance_id, status=status, phase=phase))
            row.status, row.phase = status, phase
    row.updated_at = utcnow()
    session.add(row)
    if commit:
        session.commit()


# --------------------------------------------------------------------------- idempotency keys


def find_idempotency_key(session: Session, scope: str, key_hash: str) -> IdempotencyRecord | None:
    return session.get(IdempotencyRecord, (scope, key_hash))


def claim_idempotency_key(session: Session, *, scope: str, key_hash: str, fingerprint: str,
                          resource_id: str) -> IdempotencyRecord:
    """Record the first use of a key and commit; when it was used before (or a concurrent request
    won the race), the record as first written. The caller compares fingerprints."""
    found = session.get(IdempotencyRecord, (scope, key_hash))
    if found is not None:
        return found
    row = IdempotencyRecord(scope=scope, key_hash=key_hash, fingerprint=fingerprint, resource_id=resource_id)
    session.add(row)
    try:
        session.commit()
        return row
    except IntegrityError:  # a concurrent first use committed before us: read the winner's row
        session.rollback()
    winner = session.get(IdempotencyRecord, (scope, key_hash), populate_existing=True)
    assert winner is not None, "an idempotency key's record vanished"
    return winner


def release_idempotency_key(session: Session, *, scope: str, key_hash: str, fingerprint: str) -> None:
    """Forget a key's use whose request made nothing (its record, if it is still that request's)."""
    found = session.get(IdempotencyRecord, (scope, key_hash))
    if found is not None and found.fingerprint == fingerprint:
        session.delete(found)
        session.commit()


# --------------------------------------------------------------------------- creates in flight


def create_sent(session: Session, key: str) -> None:
    """A create under `key` is about to be sent (commits before the request goes out)."""
    row = session.get(CreateSend, key) or CreateSend(key=key, sent_at=utcnow())
    row.sent_at, row.answered_at = utcnow(), None
    session.add(row)
    session.commit()


def create_answered(session: Session, key: str) -> None:
    """The cloud answered that create (success or a definite refusal): nothing is in flight."""
    row = session.get(CreateSend, key)
    if row is not None:
        row.answered_at = utcnow()
        session.add(row)
        session.commit()


def create_doubted(session: Session, key: str) -> None:
    """A create sent under `key` got no answer (or its worker died before it came): that launch may
    still land, even after the in-flight window. Kept once set (the twin hunt reads it)."""
    row = session.get(CreateSend, key)
    if row is not None and row.doubted_at is None:
        row.doubted_at = utcnow()
        session.add(row)
        session.commit()


def doubted_keys(session: Session, keys: Collection[str]) -> dict[str, datetime]:
    """Of `keys`, those a create was sent under in doubt, and when that was first known."""
    if not keys:
        return {}
    rows = session.exec(select(CreateSend).where(col(CreateSend.key).in_(list(keys)),
                                                 col(CreateSend.doubted_at).is_not(None))).all()
    return {r.key: _aware(r.doubted_at) for r in rows if r.doubted_at is not None}


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # SQLite drops the zone


def create_in_flight_since(session: Session, key: str) -> datetime | None:
    """When the unanswered create under `key` was sent; None when none is in doubt."""
    row = session.get(CreateSend, key)
    if row is None or row.answered_at is not None:
        return None
    sent = row.sent_at
    return sent if sent.tzinfo is not None else sent.replace(tzinfo=UTC)  # SQLite drops the zone


# --------------------------------------------------------------------------- projects and tokens


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def get_project(session: Session, project: str) -> Project | None:
    return session.get(Project, project)


def add_project(session: Session, project: str) -> Project | None:
    """Create a project and commit; None when it exists already."""
    if session.get(Project, project) is not None:
        return None
    row = Project(id=project)
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # created concurrently
        session.rollback()
        return None
    return row


def add_token(session: Session, project: str, label: str | None) -> tuple[ApiToken, str]:
    """A new token of `project` (committed) and its value, which is not kept: shown once."""
    value = "gpt_" + _random.token_urlsafe(32)
    row = ApiToken(id=new_id(), project=project, token_hash=token_hash(value), label=label)
    session.add(row)
    session.commit()
    return row, value


def project_of_token(session: Session, token: str) -> str | None:
    """The project of a live (unrevoked) token, or None."""
    row = session.exec(select(ApiToken).where(ApiToken.token_hash == token_hash(token))).first()
    if row is None or row.revoked_at is not None:
        return None
    return row.project


def revoke_token(session: Session, project: str, token_id: str) -> ApiToken | None:
    """Revoke a token of `project` and commit (a revoked one stays revoked); None if it has none such."""
    row = session.get(ApiToken, token_id)
    if row is None or row.project != project:
        return None
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.add(row)
        session.commit()
    return row


# --------------------------------------------------------------------------- backend defaults (picks)


def get_pick(session: Session, project: str, provider: str) -> BackendPick | None:
    """The offer `project` picked as `provider`'s default, or None."""
    return session.get(BackendPick, (project, provider))


def clear_pick(session: Session, project: str, provider: str) -> bool:
    """Forget `project`'s default offer for `provider` and commit; False when there was none."""
    row = session.get(BackendPick, (project, provider))
    if row is None:
        return False
    session.delete(row)
    session.commit()
    return True


def save_pick(session: Session, *, project: str, provider: str, instance_type: str, region: str, spot: bool,
              gpu_label: str | None, price_per_hour: float | None) -> BackendPick:
    """Make this offer `provider`'s default in `project` (replacing any earlier pick) and commit."""
    row = session.get(BackendPick, (project, provider))
    if row is None:
        row = BackendPick(project=project, provider=provider, instance_type=instance_type, region=region)
    row.instance_type, row.region, row.spot = instance_type, region, spot
    row.gpu_label, row.price_per_hour, row.picked_at = gpu_label, price_per_hour, utcnow()
    session.add(row)
    try:
        session.commit()
    except IntegrityError:  # a concurrent first pick inserted it: this one replaces it
        session.rollback()
        return save_pick(session, project=project, provider=provider, instance_type=instance_type,
                         region=region, spot=spot, gpu_label=gpu_label, price_per_hour=price_per_hour)
    session.refresh(row)
    return row

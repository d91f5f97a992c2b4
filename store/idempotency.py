"""Idempotency keys (store/models.py IdempotencyRecord): the first use of a client's key per scope,
so a retried request finds what the first one made (api/idempotency.py)."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from store.models import IdempotencyRecord


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

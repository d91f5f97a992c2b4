"""Creates in flight (store/models.py CreateSend): a cloud create about to be sent, answered, or left
in doubt (no answer came), by its key — what the twin hunt and the in-flight window read."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlmodel import Session, col, select

from store.clock import aware
from store.models import CreateSend, utcnow


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
    return {r.key: aware(r.doubted_at) for r in rows if r.doubted_at is not None}


def sends_under(session: Session, key: str) -> tuple[bool, datetime | None]:
    """Whether a create was ever sent under `key` (a send is recorded before it leaves: with none,
    nothing can exist under the key), and when the unanswered one was sent (None: none in doubt)."""
    row = session.get(CreateSend, key)
    if row is None:
        return False, None
    if row.answered_at is not None:
        return True, None
    return True, aware(row.sent_at)

"""The clock rows are stamped with: aware UTC (store/models.py re-exports it)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(at: datetime) -> datetime:
    """`at` with its zone: SQLite hands timezone-aware columns back naive, and every time stored is UTC."""
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)

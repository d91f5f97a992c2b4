"""The clock rows are stamped with: aware UTC (store/models.py re-exports it)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)

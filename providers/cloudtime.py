"""The cloud's own creation time of a machine, read from whatever shape its API writes it in.

Adapters put it on `InstanceRef.created_at`; the spend ledger starts there when a create's answer was
lost and the machine was found later. A missing or unreadable value is None, never an error: a
timestamp the ledger can do without must not fail a create or a sweep."""

from __future__ import annotations

from datetime import UTC, datetime

# Epoch values above this are milliseconds (1e11 s is the year 5138).
_MS_EPOCH = 1e11


def created_at(value: object) -> datetime | None:
    """`value` as an aware UTC datetime: a datetime (an SDK's; naive read as UTC), epoch seconds or
    milliseconds (a number or a numeric string), or an ISO 8601 / RFC 3339 string (any offset, `Z`,
    up to 7 fractional digits as Azure writes them). None when absent or unreadable."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, datetime):
        return (value if value.tzinfo is not None else value.replace(tzinfo=UTC)).astimezone(UTC)
    if isinstance(value, int | float):
        return _epoch(float(value))
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        return _epoch(float(text))
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).astimezone(UTC)


def _epoch(seconds: float) -> datetime | None:
    if seconds <= 0:  # 0 is how some APIs write "not set"
        return None
    try:
        return datetime.fromtimestamp(seconds / 1000 if seconds > _MS_EPOCH else seconds, UTC)
    except (OverflowError, OSError, ValueError):
        return None

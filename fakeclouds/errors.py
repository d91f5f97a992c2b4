"""Errors the engine raises. Each facade translates them into its provider's error format."""

from __future__ import annotations


class CloudError(Exception):
    """Base: something the simulated cloud refuses."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unauthorized(CloudError):
    pass


class NotFound(CloudError):
    pass


class Invalid(CloudError):
    """Malformed or impossible request: unknown type/region/key, bad name, ..."""


class NameConflict(CloudError):
    pass


class NoCapacity(CloudError):
    def __init__(self, message: str, region: str | None = None) -> None:
        super().__init__(message)
        self.region = region


class QuotaExceeded(CloudError):
    pass


class RateLimit(CloudError):
    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ServerFault(CloudError):
    """An injected 5xx."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


class LostResponse(CloudError):
    """The call took effect but its answer never made it back (served as a 504)."""

"""Errors the engine raises. Each facade translates them into its provider's error format."""

from __future__ import annotations

from typing import Any


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


class BadBody(Invalid):
    """A request body that is not JSON (`fault` "json"), not a JSON object ("object"), or does not
    fit the facade's model ("model"), as `fakeclouds/bodies.py` reads it. `problems` holds pydantic's
    errors for vendors that list every violation (RunPod's 422 `errors`, FastAPI-style `detail`);
    `model` what the body was read as, for vendors that refuse each kind differently."""

    def __init__(self, message: str, fault: str, problems: list[dict[str, Any]] | None = None,
                 model: type | None = None) -> None:
        super().__init__(message)
        self.fault, self.problems, self.model = fault, problems or [], model

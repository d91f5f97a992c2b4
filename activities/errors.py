"""ProviderError -> ApplicationError, so workflows act on the taxonomy by error type."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from temporalio.exceptions import ApplicationError

from providers.base import CapacityError, ProviderError, QuotaError, RateLimited

# Retrying the same call cannot help: the workflow fails over (capacity/quota) or stops.
FAILOVER_TYPES = frozenset({"CapacityError", "QuotaError"})


def to_application_error(e: ProviderError) -> ApplicationError:
    scope = e.scope if isinstance(e, CapacityError | QuotaError) else None
    details = {"kind": e.kind, "message": e.message, "scope": scope}
    if isinstance(e, RateLimited):
        return ApplicationError(e.message, details, type=e.kind,
                                next_retry_delay=timedelta(seconds=max(e.retry_after, 0.1)))
    non_retryable = (not e.retryable) or e.kind in FAILOVER_TYPES
    return ApplicationError(e.message, details, type=e.kind, non_retryable=non_retryable)


@contextmanager
def provider_errors() -> Iterator[None]:
    try:
        yield
    except ProviderError as e:
        raise to_application_error(e) from None

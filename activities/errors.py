"""ProviderError -> ApplicationError, so workflows act on the taxonomy by error type (ErrorKind)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from temporalio.exceptions import ApplicationError

from messages.enums import ErrorKind
from providers.base import CapacityError, ProviderError, QuotaError, RateLimited


def to_application_error(e: ProviderError) -> ApplicationError:
    kind = ErrorKind(e.kind)
    scope = e.scope.model_dump() if isinstance(e, CapacityError | QuotaError) else None
    details = {"kind": kind.value, "message": e.message, "scope": scope}
    if isinstance(e, RateLimited):
        return ApplicationError(e.message, details, type=kind,
                                next_retry_delay=timedelta(seconds=max(e.retry_after, 0.1)))
    # Capacity and quota: retrying the same call cannot help; the workflow fails over instead.
    non_retryable = (not e.retryable) or kind.fails_over
    return ApplicationError(e.message, details, type=kind, non_retryable=non_retryable)


@contextmanager
def provider_errors() -> Iterator[None]:
    try:
        yield
    except ProviderError as e:
        raise to_application_error(e) from None

"""Reading Temporal failures: the reason a user sees and the error type workflows act on."""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError


def failure_reason(err: BaseException) -> str:
    """The innermost message: the cloud's or the activity's own words."""
    while isinstance(err, ActivityError) and err.cause is not None:
        err = err.cause
    return getattr(err, "message", None) or str(err) or type(err).__name__


def failure_type(err: BaseException) -> str | None:
    """The ApplicationError type (e.g. "CapacityError") behind an activity failure."""
    cause = err.cause if isinstance(err, ActivityError) else err
    return cause.type if isinstance(cause, ApplicationError) else None

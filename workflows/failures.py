"""Reading Temporal failures: the reason a user sees and the error type workflows act on."""

from __future__ import annotations

from temporalio.exceptions import ActivityError, ApplicationError

from messages.enums import ErrorKind


def failure_reason(err: BaseException) -> str:
    """The innermost message: the cloud's or the activity's own words."""
    while isinstance(err, ActivityError) and err.cause is not None:
        err = err.cause
    return getattr(err, "message", None) or str(err) or type(err).__name__


def failure_kind(err: BaseException) -> ErrorKind | None:
    """The ErrorKind (e.g. CapacityError) behind an activity failure; None when it is not one of ours."""
    cause = err.cause if isinstance(err, ActivityError) else err
    if isinstance(cause, ApplicationError) and cause.type:
        try:
            return ErrorKind(cause.type)
        except ValueError:
            return None
    return None

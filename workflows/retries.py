"""The retry policies activities run under, by name: one place to read how hard each kind of call
is tried, and one to change it. (A policy is not part of a workflow's recorded commands: changing
one changes open runs' next attempts, not their replay.)"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy


def backoff(max_interval_s: float, attempts: int = 0) -> RetryPolicy:
    """Cloud and SSH calls: 1 s, doubling up to `max_interval_s` (the request's timing); `attempts`
    0 tries until the activity's own timeout ends it, N gives up after N."""
    return RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                       maximum_interval=timedelta(seconds=max_interval_s), maximum_attempts=attempts)


def until_done(max_interval_s: float) -> RetryPolicy:
    """Work that must finish (a teardown): tried without limit, at most `max_interval_s` apart."""
    return RetryPolicy(maximum_interval=timedelta(seconds=max_interval_s))


# Database reads and writes of a scheduled run: a few quick tries, then the run fails and the
# Schedule's next run starts anew.
DATABASE = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                       maximum_interval=timedelta(seconds=10), maximum_attempts=5)

# A call whose failure is its answer (a health check, a policy's webhook): not repeated on its own
# failure; the one retry covers a worker lost mid-call.
ONCE_MORE = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=2)

# A one-shot verification (credentials, a fleet's hosts): three quick tries, so a blip is not a
# refusal and a refusal is not held up.
QUICK = RetryPolicy(maximum_interval=timedelta(seconds=5), maximum_attempts=3)

# Work the user is waiting on, within the workflow's own time limit: quick tries without a count.
PERSISTENT = RetryPolicy(maximum_interval=timedelta(seconds=5))

# A round that runs again on its own schedule (the watch): never retried within the round.
NEVER = RetryPolicy(maximum_attempts=1)

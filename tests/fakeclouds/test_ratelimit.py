"""The documented-limit counter every simulated cloud shares (fakeclouds/ratelimit.py). Time is
passed in, never slept: these tests do not depend on the machine's speed."""

from __future__ import annotations

import pytest

from fakeclouds.errors import RateLimit
from fakeclouds.ratelimit import Limit, RateLimiter, identity

ME = identity("Bearer a", "127.0.0.1")
OTHER_TOKEN = identity("Bearer b", "127.0.0.1")


def test_a_sliding_window_refuses_the_call_over_the_limit_and_says_when_to_come_back() -> None:
    limiter = RateLimiter(time_scale=1.0)
    launches = (Limit(calls=1, per_s=12.0, ops=frozenset({"create"})),)
    limiter.check("lambda", launches, ME, "create", now=100.0)
    with pytest.raises(RateLimit) as refused:
        limiter.check("lambda", launches, ME, "create", now=105.0)
    assert refused.value.retry_after == pytest.approx(7.0)
    limiter.check("lambda", launches, ME, "list", now=105.0)  # another op: not counted
    limiter.check("lambda", launches, OTHER_TOKEN, "create", now=105.0)  # another token: its own budget
    limiter.check("lambda", launches, ME, "create", now=112.0)  # the window has passed


def test_a_refused_call_is_not_counted() -> None:
    limiter = RateLimiter(time_scale=1.0)
    both = (Limit(calls=1, per_s=1.0), Limit(calls=5, per_s=60.0))
    limiter.check("x", both, ME, "get", now=0.0)
    for t in (0.1, 0.2, 0.3):
        with pytest.raises(RateLimit):
            limiter.check("x", both, ME, "get", now=t)
    for t in (1.0, 2.0, 3.0, 4.0):  # the refusals above did not use up the per-minute budget
        limiter.check("x", both, ME, "get", now=t)
    with pytest.raises(RateLimit):
        limiter.check("x", both, ME, "get", now=5.0)


def test_a_block_after_the_limit_refuses_everything_for_its_duration() -> None:
    limiter = RateLimiter(time_scale=1.0)
    per_ip = (Limit(calls=2, per_s=60.0, by="ip", block_s=60.0),)
    limiter.check("hyperstack", per_ip, ME, "list", now=0.0)
    limiter.check("hyperstack", per_ip, OTHER_TOKEN, "list", now=1.0)  # same address: same budget
    with pytest.raises(RateLimit) as refused:
        limiter.check("hyperstack", per_ip, ME, "list", now=2.0)
    assert refused.value.retry_after == pytest.approx(60.0)
    with pytest.raises(RateLimit):  # the window alone would have let this one through
        limiter.check("hyperstack", per_ip, ME, "list", now=61.5)
    limiter.check("hyperstack", per_ip, ME, "list", now=62.5)


def test_time_scale_shortens_windows_and_zero_turns_limits_off() -> None:
    limiter = RateLimiter(time_scale=0.01)
    launches = (Limit(calls=1, per_s=12.0),)
    limiter.check("lambda", launches, ME, "create", now=0.0)
    with pytest.raises(RateLimit) as refused:
        limiter.check("lambda", launches, ME, "create", now=0.1)
    assert refused.value.retry_after == pytest.approx(0.02)
    limiter.check("lambda", launches, ME, "create", now=0.12)
    limiter.time_scale = 0.0
    for _ in range(10):
        limiter.check("lambda", launches, ME, "create", now=0.13)


def test_identity_keeps_no_credential_in_clear() -> None:
    who = identity("Bearer secret-token-value", "10.0.0.1")
    assert "secret" not in who["token"] and who["ip"] == "10.0.0.1"

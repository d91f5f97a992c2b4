"""Documented API rate limits, enforced the way each cloud documents them.

A facade declares its limits (`Facade.rate_limits`); every call through `common.make_call` (or
`check_rate`, for facades that route calls themselves) is counted against them per identity —
the caller's token, or its address where the cloud limits per IP (Hyperstack) — in a sliding
window. Over a limit the call is refused with `RateLimit(retry_after)` and has no effect; the
facade renders that in its cloud's own 429 format.

Windows are documented real-time durations scaled by the engine's `time_scale`: 1.0 runs them at
real speed (`make run`, and the one test of Lambda's pacing), 0.01 runs a 12 s window in 0.12 s,
0 turns every limit off.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from fakeclouds.errors import RateLimit


@dataclass(frozen=True)
class Limit:
    """At most `calls` calls per `per_s` seconds, counted per `by` over `ops` (empty: every op)."""

    calls: int
    per_s: float
    ops: frozenset[str] = frozenset()
    by: Literal["token", "ip"] = "token"
    # Once exceeded, every call of that identity is refused for this long (Hyperstack: "all API
    # calls for the next minute will be blocked"); 0: only calls over the window are refused.
    block_s: float = 0.0
    what: str = "API rate limit"  # how the cloud's docs name it, quoted in the refusal

    def applies_to(self, op: str) -> bool:
        return not self.ops or op in self.ops


class RateLimiter:
    """Sliding-window counters; all on the server's one event loop, so no locking."""

    def __init__(self, time_scale: float = 1.0) -> None:
        self.time_scale = time_scale
        self._hits: dict[tuple[str, int, str], deque[float]] = {}
        self._blocked: dict[tuple[str, int, str], float] = {}

    def check(self, facade: str, limits: Sequence[Limit], identity: dict[str, str], op: str,
              now: float | None = None) -> None:
        """Count this call, or raise RateLimit (the call is not counted) when a limit is reached."""
        if self.time_scale <= 0 or not limits:
            return
        now = time.monotonic() if now is None else now
        counted: list[deque[float]] = []
        for i, limit in enumerate(limits):
            if not limit.applies_to(op):
                continue
            key = (facade, i, identity.get(limit.by, ""))
            until = self._blocked.get(key, 0.0)
            if now < until:
                raise RateLimit(f"{limit.what} exceeded: calls are blocked for a while", until - now)
            window = limit.per_s * self.time_scale
            hits = self._hits.setdefault(key, deque())
            while hits and hits[0] <= now - window:
                hits.popleft()
            if len(hits) >= limit.calls:
                retry_after = hits[0] + window - now
                if limit.block_s:
                    retry_after = limit.block_s * self.time_scale
                    self._blocked[key] = now + retry_after
                raise RateLimit(f"{limit.what} exceeded ({limit.calls} per {limit.per_s:g} s)", retry_after)
            counted.append(hits)
        for hits in counted:
            hits.append(now)

    def usage(self, facade: str, limits: Sequence[Limit], index: int, identity: dict[str, str],
              now: float | None = None) -> tuple[int, float]:
        """(calls counted in window `index` of `limits` for `identity`, seconds until the oldest of
        them leaves it; 0 when none): for clouds that report their limits in response headers."""
        limit = limits[index]
        hits = self._hits.get((facade, index, identity.get(limit.by, "")))
        if not hits or self.time_scale <= 0:
            return 0, 0.0
        now = time.monotonic() if now is None else now
        window = limit.per_s * self.time_scale
        live = [t for t in hits if t > now - window]
        return len(live), (live[0] + window - now) if live else 0.0

    def reset(self) -> None:
        self._hits.clear()
        self._blocked.clear()


def identity(authorization: str | None, client_host: str | None) -> dict[str, str]:
    """Who a call is counted against: a digest of its credentials (never kept in clear), its address."""
    token = hashlib.sha256((authorization or "").encode()).hexdigest()[:16]
    return {"token": token, "ip": client_host or ""}

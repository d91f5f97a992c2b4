"""Fault injection: rules added through the admin API, consumed by matching calls.

A rule matches a call by facade and op ("*" matches any) and, for `capacity`/`quota`
with a `region`, only calls in that region. Each match uses up one of its `times`
(-1 = forever). Kinds that only make sense for a launch (capacity, quota,
stuck_booting, die_after_boot, preempt) are only consumed by `create` calls.
`preempt`: the cloud takes the machine back `seconds` after boot (it is gone, and stops
billing; a facade whose cloud reports preemption shows it as such, e.g. Lambda's `preempted`,
EC2's `Server.SpotInstanceTermination`), without a notice. With an interruption notice first
(AWS's two minutes, GCP's thirty seconds): the admin's preempt, `notice_s` (fakeclouds/preemption.py).
`barrier`: each of the `times` matching calls is held before it takes effect until all of them
have arrived (or `seconds` have passed, default BARRIER_MAX_S): two racing creates both pass their
lookups before either launch lands, however slow the machine — no fixed sleep to guess.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from fakeclouds.errors import Invalid, LostResponse, NoCapacity, QuotaExceeded, RateLimit, ServerFault

KINDS = ("capacity", "quota", "rate_limit", "server_error", "latency", "lose_response",
         "stuck_booting", "die_after_boot", "preempt", "barrier", "ignore_delete")
# side_resources: calls on per-machine side resources a facade keeps (firewall rules, security groups).
OPS = ("create", "get", "list", "terminate", "offers", "verify", "ssh_keys", "side_resources", "*")
_CREATE_ONLY = {"capacity", "quota", "stuck_booting", "die_after_boot", "preempt"}
_REFUSALS = {"capacity", "quota", "rate_limit", "server_error"}
_ids = itertools.count(1)
BARRIER_MAX_S = 30.0  # a barrier whose other calls never come lets its calls go after this


@dataclass
class FaultRule:
    facade: str
    op: str
    kind: str
    times: int = 1
    region: str | None = None  # capacity / quota: only this region
    retry_after: float = 1.0  # rate_limit
    status: int = 500  # server_error: 500 or 503
    seconds: float = 0.0  # latency; die_after_boot, preempt: how long after boot
    when: str = "before"  # latency: "before" or "after" the call takes effect
    id: int = field(default_factory=lambda: next(_ids))
    hits: int = 0
    _all_in: asyncio.Event | None = field(default=None, init=False, repr=False, compare=False)  # barrier

    @classmethod
    def build(cls, facade: str, op: str, kind: str, times: int = 1, *, facades: Collection[str],
              **params: Any) -> FaultRule:
        """A validated rule; `facades` are the names it may target (the engine's), besides "*"."""
        if facade != "*" and facade not in facades:
            raise Invalid(f"facade must be '*' or one of {sorted(facades)}, not {facade!r}")
        if op not in OPS:
            raise Invalid(f"op must be one of {OPS}, not {op!r}")
        if kind not in KINDS:
            raise Invalid(f"kind must be one of {KINDS}, not {kind!r}")
        if times == 0 or times < -1:
            raise Invalid("times must be >= 1, or -1 for forever")
        allowed = {"region", "retry_after", "status", "seconds", "when"}
        unknown = set(params) - allowed
        if unknown:
            raise Invalid(f"unknown fault parameter(s): {', '.join(sorted(unknown))}")
        rule = cls(facade=facade, op=op, kind=kind, times=times, **params)
        if rule.when not in ("before", "after"):
            raise Invalid("when must be 'before' or 'after'")
        if rule.kind == "server_error" and rule.status not in (500, 502, 503):
            raise Invalid("server_error status must be 500, 502 or 503")
        if rule.seconds < 0 or rule.retry_after < 0:
            raise Invalid("seconds/retry_after must be >= 0")
        if rule.kind == "barrier" and rule.times < 2:
            raise Invalid("a barrier holds `times` calls until all have arrived: times must be >= 2")
        return rule

    async def held(self) -> None:
        """barrier: wait until every call it counts has drawn it (or its time is up)."""
        if self._all_in is None:
            self._all_in = asyncio.Event()
        if self.times == 0:  # the last call drew it (take() counts down, then forgets the rule)
            self._all_in.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_in.wait(), self.seconds or BARRIER_MAX_S)

    def matches(self, facade: str, op: str, region: str | None) -> bool:
        if self.facade not in ("*", facade) or self.op not in ("*", op):
            return False
        if self.kind in _CREATE_ONLY and op != "create":
            return False
        if self.region is not None and self.kind in ("capacity", "quota") and self.region != region:
            return False
        return True

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("id", "facade", "op", "kind", "times", "hits", "region",
                                              "retry_after", "status", "seconds", "when")}


@dataclass
class CallPlan:
    """The rules one call drew. The facade runs before(), the effect, then after()."""

    rules: list[FaultRule]

    def _of(self, kind: str) -> list[FaultRule]:
        return [r for r in self.rules if r.kind == kind]

    @property
    def stuck_booting(self) -> bool:
        return bool(self._of("stuck_booting"))

    @property
    def die_after_boot(self) -> float | None:
        rules = self._of("die_after_boot")
        return rules[0].seconds if rules else None

    @property
    def ignores_delete(self) -> bool:
        """A delete answered as done that the cloud never did (the resource stays listed)."""
        return bool(self._of("ignore_delete"))

    @property
    def preempt_after(self) -> float | None:
        rules = self._of("preempt")
        return rules[0].seconds if rules else None

    async def before(self) -> None:
        for r in self.rules:
            if r.kind == "latency" and r.when == "before":
                await asyncio.sleep(r.seconds)
            if r.kind == "barrier":
                await r.held()
        for r in self.rules:
            if r.kind == "rate_limit":
                raise RateLimit("rate limit exceeded (injected)", r.retry_after)
            if r.kind == "server_error":
                raise ServerFault("internal error (injected)", r.status)
            if r.kind == "capacity":
                raise NoCapacity("not enough capacity to fulfil the request (injected)", r.region)
            if r.kind == "quota":
                raise QuotaExceeded("quota exceeded (injected)")

    async def after(self) -> None:
        for r in self.rules:
            if r.kind == "latency" and r.when == "after":
                await asyncio.sleep(r.seconds)
        if self._of("lose_response"):
            raise LostResponse("the call took effect but its response was lost (injected)")


class FaultBook:
    def __init__(self) -> None:
        self.rules: list[FaultRule] = []

    def add(self, rule: FaultRule) -> FaultRule:
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def take(self, facade: str, op: str, region: str | None = None) -> CallPlan:
        """The rules this call draws: every matching modifier, but at most one refusal (the
        oldest), so rules added in turn hit successive calls."""
        drawn: list[FaultRule] = []
        refused = False
        for rule in list(self.rules):
            if rule.matches(facade, op, region):
                if rule.kind in _REFUSALS:
                    if refused:
                        continue
                    refused = True
                rule.hits += 1
                drawn.append(rule)
                if rule.times > 0:
                    rule.times -= 1
                    if rule.times == 0:
                        self.rules.remove(rule)
        return CallPlan(drawn)

"""The worker's Prometheus series (README: Metrics) and where they are measured: cloud API calls,
their errors and latency, per cloud and operation (every adapter an activity gets from
ActivityDeps.provider is `instrument`ed once, where ProviderCache builds it); waits for a cloud's
rate limits (a pacer's wait, providers/pacing.py; a RateLimited's retry_after, which Temporal waits
out before retrying); time to ready per cloud (activities/records.py); sweep actions
(activities/sweep.py) and the watch's rounds and losses (`watch_round`, `watch_lost`).

One registry per process (REGISTRY, not prometheus_client's global one): tests read exact values
from it, and nothing a library registers globally leaks into the worker's /metrics. `serve(port)`
exposes it on 127.0.0.1, or on another address behind the admin token (activities/metrics_http.py).

Every label value is bounded: a cloud is one of the registry's ids (else `other`), an operation one
of VERBS, an error kind a ProviderError class of providers/base.py, a sweep action one of
SWEEP_ACTIONS, why a machine was lost one of LOST_WHY. Never an id, a credential, a command or free text."""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from datetime import datetime
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.registry import Collector

from activities import metrics_http
from providers import pacing, registry
from providers.base import (
    AuthError,
    CapacityError,
    InvalidRequest,
    ProviderError,
    QuotaError,
    RateLimited,
    Transient,
    Unsupported,
)
from store.clock import aware

REGISTRY = CollectorRegistry()
OTHER = "other"

# The CloudProvider verbs (providers/base.py) measured: what activities ask a cloud.
VERBS = ("offers", "create", "get", "terminate", "list_owned", "list_machines", "find", "find_all", "release",
         "verify")
ERROR_KINDS = tuple(c.__name__ for c in (CapacityError, QuotaError, RateLimited, AuthError, InvalidRequest,
                                         Unsupported, Transient))
WAIT_SOURCES = ("pacer", "retry_after")  # our own pacing; the cloud's RateLimited asking us to wait
SWEEP_ACTIONS = ("seen_orphan", "seen_duplicate", "removed_orphan", "removed_duplicate")

CLOUD_CALLS = Counter("gpuprov_cloud_calls", "Cloud API calls (CloudProvider verbs) by cloud and operation.",
                      ["cloud", "operation"], registry=REGISTRY)
CLOUD_ERRORS = Counter("gpuprov_cloud_errors", "Cloud API calls that raised, by ProviderError kind.",
                       ["cloud", "operation", "kind"], registry=REGISTRY)
CLOUD_SECONDS = Histogram("gpuprov_cloud_call_seconds", "Cloud API call latency (seconds).",
                          ["cloud", "operation"], registry=REGISTRY,
                          buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300))
RATE_LIMIT_WAITS = Counter("gpuprov_rate_limit_waits", "Waits for a cloud's rate limit, by source.",
                           ["cloud", "source"], registry=REGISTRY)
RATE_LIMIT_SECONDS = Counter("gpuprov_rate_limit_wait_seconds", "Seconds waited for a cloud's rate limit.",
                             ["cloud", "source"], registry=REGISTRY)
TIME_TO_READY = Histogram("gpuprov_time_to_ready_seconds",
                          "From an allocation's request (its row) to ready, per cloud (seconds).",
                          ["cloud"], registry=REGISTRY,
                          buckets=(5, 10, 20, 30, 60, 120, 180, 300, 600, 900, 1800, 3600))
SWEEP_ACTIONS_TOTAL = Counter("gpuprov_sweep_actions", "Sweep actions: orphans and duplicates seen, removed.",
                              ["cloud", "action"], registry=REGISTRY)
WATCH_ROUNDS = Counter("gpuprov_watch_rounds", "Watch rounds (one connection's machines checked).",
                       ["cloud"], registry=REGISTRY)
WATCH_CALLS = Counter("gpuprov_watch_cloud_calls", "Cloud calls the watch's rounds made.", ["cloud"],
                      registry=REGISTRY)
LEASE_NOT_RENEWED = Counter("gpuprov_lease_not_renewed",
                            "Watch rounds that could not renew a machine's lease (its dead-man switch).",
                            ["cloud"], registry=REGISTRY)
WATCH_LOST = Counter("gpuprov_watch_machines_lost",
                     "Machines the watch found lost (gone, preempted, broken), by why.", ["cloud", "why"],
                     registry=REGISTRY)
LOST_WHY = ("preempted", "lost")  # the cloud's API said it reclaimed the machine; any other loss


def cloud_label(cloud: str | None) -> str:
    """`cloud` when an adapter or fleet kind of that id exists, else `other`."""
    return cloud if cloud is not None and cloud in registry.placeable() else OTHER


def error_kind(e: BaseException) -> str:
    if isinstance(e, ProviderError):
        return e.kind if e.kind in ERROR_KINDS else "ProviderError"
    if isinstance(e, asyncio.CancelledError):
        return "cancelled"  # the activity was cancelled or its heartbeat wait gave up
    return "unexpected"  # a bug: adapters raise only ProviderError


# --------------------------------------------------------------------------- cloud calls

P = TypeVar("P")
_IN_CALL: ContextVar[bool] = ContextVar("gpuprov_cloud_call", default=False)
_METERED = "_gpuprov_metered"


def instrument(adapter: P) -> P:
    """`adapter`, each verb it has measured: its own attributes shadow the class's methods, so it is
    still the same object (isinstance, its other attributes). A verb that calls another (the default
    `find` lists with `list_owned`) counts once, as the outer one. Idempotent."""
    if getattr(adapter, _METERED, False):
        return adapter
    cloud = cloud_label(getattr(adapter, "id", None))
    try:
        for verb in VERBS:
            method = getattr(adapter, verb, None)
            if method is not None and inspect.iscoroutinefunction(method):
                setattr(adapter, verb, _metered(method, cloud, verb))
        setattr(adapter, _METERED, True)
    except AttributeError:  # an object that takes no attributes (__slots__): left unmeasured
        pass
    return adapter


def _metered(method: Callable[..., Awaitable[Any]], cloud: str, verb: str) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(*args: Any, **kwargs: Any) -> Any:
        if _IN_CALL.get():
            return await method(*args, **kwargs)
        token = _IN_CALL.set(True)
        started = time.monotonic()
        try:
            return await method(*args, **kwargs)
        except BaseException as e:
            CLOUD_ERRORS.labels(cloud, verb, error_kind(e)).inc()
            if isinstance(e, RateLimited):
                rate_limit_wait(cloud, "retry_after", e.retry_after)
            raise
        finally:
            _IN_CALL.reset(token)
            CLOUD_CALLS.labels(cloud, verb).inc()
            CLOUD_SECONDS.labels(cloud, verb).observe(time.monotonic() - started)

    return call


def rate_limit_wait(cloud: str, source: str, seconds: float) -> None:
    source = source if source in WAIT_SOURCES else OTHER
    RATE_LIMIT_WAITS.labels(cloud_label(cloud), source).inc()
    RATE_LIMIT_SECONDS.labels(cloud_label(cloud), source).inc(max(seconds, 0.0))


def _pacer_waited(cloud: str, seconds: float) -> None:
    rate_limit_wait(cloud, "pacer", seconds)


pacing.on_wait = _pacer_waited  # every pacer of this process reports its waits here


# --------------------------------------------------------------------------- allocations, sweep, watch


def ready(cloud: str, requested_at: datetime, ready_at: datetime) -> None:
    """An allocation became ready (recorded once, when its row first reads ready)."""
    seconds = (aware(ready_at) - aware(requested_at)).total_seconds()
    TIME_TO_READY.labels(cloud_label(cloud)).observe(max(seconds, 0.0))


def sweep_action(cloud: str, action: str) -> None:
    """One of SWEEP_ACTIONS on a machine (or side resource) of `cloud`."""
    SWEEP_ACTIONS_TOTAL.labels(cloud_label(cloud), action if action in SWEEP_ACTIONS else OTHER).inc()


def watch_round(cloud: str, calls: int) -> None:
    """The watch checked one connection of `cloud`, with `calls` cloud calls (a listing, gets...)."""
    WATCH_ROUNDS.labels(cloud_label(cloud)).inc()
    WATCH_CALLS.labels(cloud_label(cloud)).inc(max(calls, 0))


def watch_lost(cloud: str, machines: int = 1, *, preempted: bool = False) -> None:
    """The watch found `machines` of `cloud` lost: `why` is `preempted` when the cloud said it
    reclaimed them (InstanceStatus.preempted), else `lost`."""
    WATCH_LOST.labels(cloud_label(cloud), "preempted" if preempted else "lost").inc(max(machines, 0))


def lease_not_renewed(cloud: str) -> None:
    """A watch round could not write a machine's lease (activities/lease.py NOT_RENEWED)."""
    LEASE_NOT_RENEWED.labels(cloud_label(cloud)).inc()


# The series of cloud calls and rate-limit waits: what the API process also serves of this registry
# (its own offers calls: api/routers/metrics.py), the worker's other series being the worker's.
CLOUD_CALL_FAMILIES = frozenset({"gpuprov_cloud_calls", "gpuprov_cloud_errors", "gpuprov_cloud_call_seconds",
                                 "gpuprov_rate_limit_waits", "gpuprov_rate_limit_wait_seconds"})


class CloudCallsCollector(Collector):
    """The cloud-call and rate-limit series only, for a registry of its own: this process's — or,
    where the API runs in several processes that write them to one directory (PROMETHEUS_MULTIPROC_DIR,
    api/serve.py), every one of those processes' summed (a dead one's counts too: a counter that
    fell when a process exits would read as a reset)."""

    def collect(self) -> Any:
        shared = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if shared:
            from prometheus_client.multiprocess import MultiProcessCollector

            families = MultiProcessCollector(None, shared).collect()
        else:
            families = REGISTRY.collect()
        return (f for f in families if f.name in CLOUD_CALL_FAMILIES)


def value(name: str, **labels: str) -> float:
    """A sample's current value in REGISTRY (0 when it was never set): for tests and checks."""
    found = REGISTRY.get_sample_value(name, labels)
    return 0.0 if found is None else found


def serve(port: int, *, also: Collector | None = None, addr: str = "127.0.0.1",
          token: str | None = None) -> Any:
    """REGISTRY (and `also`: the Temporal SDK's metrics) at http://addr:port/metrics, on a daemon
    thread: loopback only, unless `token` guards it (activities/metrics_http.py). Returns the server."""
    server = metrics_http.serve(REGISTRY, port, addr=addr, token=token)  # refuses before registering
    if also is not None:
        REGISTRY.register(also)
    return server

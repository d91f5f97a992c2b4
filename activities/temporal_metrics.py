"""The Temporal SDK's own metrics (its Runtime's telemetry: task slots, poll and schedule-to-start
latencies, RPCs...) on the worker's /metrics, beside gpuprov's (activities/metrics.py): the Runtime
records into a MetricBuffer, drained here into Prometheus families — one endpoint, one port.

Label values are bounded like gpuprov's: only the SDK's known attributes are kept, and a task queue
other than this worker's own (its sticky queue carries a per-process id) reads `other`."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    MetricBuffer,
    MetricBufferDurationFormat,
    Runtime,
    TelemetryConfig,
)

BUFFER_SIZE = 100_000  # updates between drains (the SDK drops updates past it)
DRAIN_EVERY_S = 2.0
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
ATTRIBUTES = frozenset({"namespace", "task_queue", "workflow_type", "activity_type", "worker_type",
                        "operation", "poller_type", "status_code", "eager", "service_name", "failure_reason",
                        "query_type", "nexus_service", "nexus_operation", "slot_type"})
_NAME = re.compile(r"[^a-zA-Z0-9_]")

Labels = tuple[tuple[str, str], ...]


class TemporalSdkMetrics(Collector):
    """Drains `buffer` (also on each scrape) and keeps the running values: counters summed, gauges
    as last set, histograms bucketed."""

    def __init__(self, buffer: MetricBuffer, task_queues: Iterable[str]) -> None:
        self.buffer = buffer
        self.task_queues = frozenset(task_queues)
        self._lock = threading.Lock()
        self._docs: dict[str, tuple[int, str]] = {}  # name -> (kind, description)
        self._values: dict[tuple[str, Labels], float] = {}
        self._histograms: dict[tuple[str, Labels], list[float]] = {}  # bucket counts..., count, sum

    def labels(self, attributes: Any) -> Labels:
        kept = []
        for key, value in sorted(dict(attributes).items()):
            if key not in ATTRIBUTES:
                continue
            text = str(value)
            if key == "task_queue" and text not in self.task_queues:
                text = "other"
            kept.append((key, text))
        return tuple(kept)

    def drain(self) -> None:
        with self._lock:
            for update in self.buffer.retrieve_updates():
                metric = update.metric
                name = _NAME.sub("_", metric.name)
                self._docs.setdefault(name, (metric.kind, metric.description or metric.name))
                key = (name, self.labels(update.attributes))
                if metric.kind == BUFFERED_METRIC_KIND_COUNTER:
                    self._values[key] = self._values.get(key, 0.0) + float(update.value)
                elif metric.kind == BUFFERED_METRIC_KIND_GAUGE:
                    self._values[key] = float(update.value)
                else:
                    counts = self._histograms.setdefault(key, [0.0] * (len(BUCKETS) + 2))
                    for i, bound in enumerate(BUCKETS):
                        if update.value <= bound:
                            counts[i] += 1
                    counts[-2] += 1
                    counts[-1] += float(update.value)

    def collect(self) -> Iterator[Metric]:
        self.drain()
        with self._lock:
            families: dict[str, Metric] = {}
            for name, (kind, doc) in self._docs.items():
                if kind == BUFFERED_METRIC_KIND_COUNTER:
                    families[name] = CounterMetricFamily(name, doc)
                elif kind == BUFFERED_METRIC_KIND_GAUGE:
                    families[name] = GaugeMetricFamily(name, doc)
                else:
                    families[name] = HistogramMetricFamily(name, doc)
            for (name, labels), v in self._values.items():
                family = families[name]
                sample = family.name + ("_total" if isinstance(family, CounterMetricFamily) else "")
                family.add_sample(sample, dict(labels), v)
            for (name, labels), counts in self._histograms.items():
                family, base = families[name], dict(labels)
                bounds, cumulative = (*BUCKETS, float("inf")), (*counts[:len(BUCKETS)], counts[-2])
                for bound, n in zip(bounds, cumulative, strict=True):
                    family.add_sample(name + "_bucket", {**base, "le": _le(bound)}, n)
                family.add_sample(name + "_count", base, counts[-2])
                family.add_sample(name + "_sum", base, counts[-1])
            found = list(families.values())
        yield from found

    def drain_forever(self, stop: threading.Event) -> None:
        """Drain every DRAIN_EVERY_S until `stop` (a daemon thread): the buffer never fills between
        scrapes, however rare they are."""
        while not stop.wait(DRAIN_EVERY_S):
            self.drain()


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def buffered_runtime() -> tuple[Runtime, MetricBuffer]:
    """A Runtime whose metrics go to a buffer (durations in seconds), and the buffer."""
    buffer = MetricBuffer(BUFFER_SIZE, duration_format=MetricBufferDurationFormat.SECONDS)
    return Runtime(telemetry=TelemetryConfig(metrics=buffer)), buffer

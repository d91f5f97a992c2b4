"""Prometheus metrics (README: Metrics): the API's /metrics takes the admin token only and counts the
database at scrape time; the worker's series measure every cloud call in one place; every label
value is bounded (a known cloud, verb, kind, status, phase or project slug, else `other`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import Session
from temporalio.runtime import BUFFERED_METRIC_KIND_COUNTER, BUFFERED_METRIC_KIND_HISTOGRAM

from activities import metrics
from activities.connections import ConnectionActivities
from activities.deps import ActivityDeps
from activities.temporal_metrics import TemporalSdkMetrics
from messages.connection import ConnectRequest
from providers import pacing
from providers.base import InstanceRef, OfferQuery, RateLimited, Transient
from providers.credentials import ApiKeyCredentials
from store.metrics import DatabaseCollector
from store.models import Instance, Job, Project
from store.secrets import SecretBox
from tests.api.conftest import GOOD_KEY, FakeCloud, connect_fake, make_project


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def at(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def test_the_api_metrics_need_the_admin_token(client: httpx.AsyncClient) -> None:
    project_token = await make_project(client, "tenant-a")
    admin = client.headers.pop("Authorization")
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = await client.get("/metrics", headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
    r = await client.get("/metrics", headers={"Authorization": f"Bearer {project_token}"})
    assert r.status_code == 403 and "admin token" in r.json()["detail"]
    r = await client.get("/metrics", headers={"Authorization": admin})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "gpuprov_allocations" in r.text
    assert "/metrics" not in (await client.get("/openapi.json")).json()["paths"]


async def test_the_api_serves_its_own_offers_calls_and_nothing_else_of_the_worker(
        client: httpx.AsyncClient) -> None:
    """The offers pages ask the clouds from the API process: its /metrics counts those calls (one
    cloud's page and the cross-cloud one), their errors and latency — and none of the worker's
    other series (time to ready, the watch, the sweep), which only the worker measures."""
    await connect_fake(client)

    async def scraped() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        r = await client.get("/metrics")
        assert r.status_code == 200, r.text
        assert "gpuprov_time_to_ready" not in r.text and "gpuprov_watch" not in r.text
        return samples(r.text)

    before = await scraped()
    offers = dict(cloud="fakecloud", operation="offers")
    # Three queries, three calls: the pages share the offers cache, an answer per query.
    assert (await client.get("/api/compute/backends/fakecloud/offers?gpu=A10")).status_code == 200
    assert (await client.get("/api/compute/offers")).json()["clouds"][0]["cached"] is False
    FakeCloud.FAIL = Transient("upstream 503")
    assert (await client.get("/api/compute/backends/fakecloud/offers?gpu=H100")).status_code == 502
    after = await scraped()
    for name, more in (("gpuprov_cloud_calls_total", 3), ("gpuprov_cloud_call_seconds_count", 3)):
        assert at(after, name, **offers) == at(before, name, **offers) + more, name
    failed = dict(offers, kind="Transient")
    errors_before = at(before, "gpuprov_cloud_errors_total", **failed)
    assert at(after, "gpuprov_cloud_errors_total", **failed) == errors_before + 1


def _instance(iid: str, project: str, status: str, phase: str, price: float | None) -> Instance:
    return Instance(id=iid, project=project, provider="fakecloud", connection_id="c", workflow_id=f"wf-{iid}",
                    status=status, phase=phase, price_per_hour=price)


async def test_database_gauges_count_rows_and_bound_every_label(client: httpx.AsyncClient,
                                                                 engine: sa.Engine) -> None:
    await make_project(client, "vision")
    with Session(engine) as s:
        s.add(Project(id="Not A Slug!"))  # never made by the API (PROJECT_PATTERN): read as `other`
        s.add_all([_instance("i1", "vision", "ready", "ready", 1.25),
                   _instance("i2", "vision", "provisioning", "create", 0.5),
                   _instance("i3", "vision", "terminated", "terminated", 9.0),  # no longer bills
                   _instance("i4", "default", "ready", "ready", None),
                   _instance("i5", "Not A Slug!", "weird-status", "weird-phase", 3.0),
                   _instance("i6", "Not A Slug!", "ready", "ready", 2.0)])
        s.add(Job(id="j1", name="x", type="sft", command="secret-looking command", requested_by="admin",
                  workflow_id="job-j1", status="queued"))
        s.commit()
    r = await client.get("/metrics")
    assert r.status_code == 200, r.text
    found = samples(r.text)
    assert at(found, "gpuprov_allocations", status="ready") == 3
    assert at(found, "gpuprov_allocations", status="provisioning") == 1
    assert at(found, "gpuprov_allocations", status="terminated") == 1
    assert at(found, "gpuprov_allocations", status="other") == 1
    assert at(found, "gpuprov_allocations", status="lost") == 0 and ("gpuprov_allocations", frozenset(
        {("status", "lost")})) in found  # every status is present, 0 when none
    assert at(found, "gpuprov_allocations_by_phase", phase="ready") == 3
    assert at(found, "gpuprov_allocations_by_phase", phase="other") == 1
    assert at(found, "gpuprov_jobs", status="queued") == 1
    assert at(found, "gpuprov_jobs", status="running") == 0
    assert at(found, "gpuprov_running_usd_per_hour", project="vision") == 1.75
    assert at(found, "gpuprov_running_usd_per_hour", project="default") == 0
    assert at(found, "gpuprov_running_usd_per_hour", project="other") == 2.0  # i5's status is not live
    labels = {value for _, pairs in found for _, value in pairs}
    assert not labels & {"i1", "i5", "j1", "Not A Slug!", "weird-status", "weird-phase", "wf-i1", "c"}
    assert "secret-looking command" not in r.text


def test_the_database_collector_reads_a_fresh_count_each_scrape(engine: sa.Engine) -> None:
    collector = DatabaseCollector(engine)

    def ready() -> float:
        family = next(f for f in collector.collect() if f.name == "gpuprov_allocations")
        return next(s.value for s in family.samples if s.labels == {"status": "ready"})

    assert ready() == 0
    with Session(engine) as s:
        s.add(_instance("i1", "default", "ready", "ready", 1.0))
        s.commit()
    assert ready() == 1


# --------------------------------------------------------------------------- the worker's series


def adapter() -> FakeCloud:
    return metrics.instrument(FakeCloud(ApiKeyCredentials(api_key=GOOD_KEY), installation_id="inst0001"))


def calls(operation: str) -> float:
    return metrics.value("gpuprov_cloud_calls_total", cloud="fakecloud", operation=operation)


def errors(operation: str, kind: str) -> float:
    return metrics.value("gpuprov_cloud_errors_total", cloud="fakecloud", operation=operation, kind=kind)


async def test_cloud_calls_are_counted_once_per_verb_with_their_errors_and_latency() -> None:
    p = adapter()
    assert metrics.instrument(p) is p and isinstance(p, FakeCloud)  # the same object, still its class
    before = {op: calls(op) for op in ("offers", "find", "list_owned", "verify")}
    latency = metrics.value("gpuprov_cloud_call_seconds_count", cloud="fakecloud", operation="offers")
    await p.offers(OfferQuery())
    assert await p.find("some-key") is None  # the default find lists with list_owned: counted as find
    assert calls("offers") == before["offers"] + 1 and calls("find") == before["find"] + 1
    assert calls("list_owned") == before["list_owned"]
    timed = metrics.value("gpuprov_cloud_call_seconds_count", cloud="fakecloud", operation="offers")
    assert timed == latency + 1

    transient = errors("offers", "Transient")
    FakeCloud.FAIL = Transient("a 503")
    with pytest.raises(Transient):
        await p.offers(OfferQuery())
    assert errors("offers", "Transient") == transient + 1 and calls("offers") == before["offers"] + 2

    waits = metrics.value("gpuprov_rate_limit_waits_total", cloud="fakecloud", source="retry_after")
    waited = metrics.value("gpuprov_rate_limit_wait_seconds_total", cloud="fakecloud", source="retry_after")
    FakeCloud.FAIL = RateLimited("slow down", retry_after=7.5)
    with pytest.raises(RateLimited):
        await p.offers(OfferQuery())
    seen = metrics.value("gpuprov_rate_limit_waits_total", cloud="fakecloud", source="retry_after")
    assert seen == waits + 1
    assert metrics.value("gpuprov_rate_limit_wait_seconds_total", cloud="fakecloud",
                         source="retry_after") == waited + 7.5
    with pytest.raises(NotImplementedError):
        await p.get(InstanceRef(provider="fakecloud", instance_id="i-1", key="k"))
    assert errors("get", "unexpected") >= 1


async def test_the_connect_verify_call_is_counted_with_its_error(engine: sa.Engine, box: SecretBox) -> None:
    """VERIFY_CREDENTIALS builds its own one-off adapter (not the worker's cached one): measured too."""
    acts = ConnectionActivities(ActivityDeps(engine=engine, box=box, installation_id="inst0001"))

    def request(key: str) -> ConnectRequest:
        return ConnectRequest(connection_id="c1", provider="fakecloud", name="n",
                              sealed_credentials=box.seal({"api_key": key}).decode())

    verified, refused = calls("verify"), errors("verify", "AuthError")
    assert (await acts.verify_credentials(request(GOOD_KEY))).ok
    assert calls("verify") == verified + 1 and errors("verify", "AuthError") == refused
    assert not (await acts.verify_credentials(request("wrong"))).ok
    assert calls("verify") == verified + 2 and errors("verify", "AuthError") == refused + 1


async def test_a_pacer_wait_is_counted_for_its_cloud() -> None:
    pacer = pacing.Pacer(0.05, scale=1.0, cloud="fakecloud")
    waits = metrics.value("gpuprov_rate_limit_waits_total", cloud="fakecloud", source="pacer")
    for _ in range(2):
        async with pacer.slot():
            pass
    assert metrics.value("gpuprov_rate_limit_waits_total", cloud="fakecloud", source="pacer") == waits + 1


def test_labels_are_bounded() -> None:
    assert metrics.cloud_label("fakecloud") == "fakecloud" and metrics.cloud_label("i-0123456789") == "other"
    assert metrics.cloud_label(None) == "other"
    before = metrics.value("gpuprov_sweep_actions_total", cloud="other", action="other")
    metrics.sweep_action("al-secret-id", "rm -rf /")
    assert metrics.value("gpuprov_sweep_actions_total", cloud="other", action="other") == before + 1
    lost = metrics.value("gpuprov_watch_machines_lost_total", cloud="fakecloud", why="lost")
    rounds = metrics.value("gpuprov_watch_rounds_total", cloud="fakecloud")
    watch_calls = metrics.value("gpuprov_watch_cloud_calls_total", cloud="fakecloud")
    metrics.watch_round("fakecloud", 3)
    metrics.watch_lost("fakecloud")
    assert metrics.value("gpuprov_watch_machines_lost_total", cloud="fakecloud", why="lost") == lost + 1
    assert metrics.value("gpuprov_watch_rounds_total", cloud="fakecloud") == rounds + 1
    assert metrics.value("gpuprov_watch_cloud_calls_total", cloud="fakecloud") == watch_calls + 3
    def ready(**labels: str) -> float:
        return metrics.value("gpuprov_time_to_ready_seconds_bucket", cloud="fakecloud", **labels)

    count = metrics.value("gpuprov_time_to_ready_seconds_count", cloud="fakecloud")
    under_30, under_60 = ready(le="30.0"), ready(le="60.0")
    now = datetime.now(UTC)
    metrics.ready("fakecloud", (now - timedelta(seconds=42)).replace(tzinfo=None), now)  # SQLite: naive
    assert metrics.value("gpuprov_time_to_ready_seconds_count", cloud="fakecloud") == count + 1
    assert (ready(le="30.0"), ready(le="60.0")) == (under_30, under_60 + 1)


# --------------------------------------------------------------------------- the Temporal SDK's


@dataclass(frozen=True)
class _Metric:
    name: str
    kind: int
    description: str | None = None
    unit: str | None = None


@dataclass
class _Update:
    metric: _Metric
    value: float
    attributes: dict[str, Any]


@dataclass
class _Buffer:
    updates: list[_Update] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def retrieve_updates(self) -> list[_Update]:
        with self.lock:
            found, self.updates = self.updates, []
        return found


def test_the_sdk_metrics_are_summed_bucketed_and_their_task_queues_bounded() -> None:
    polls = _Metric("temporal_long_request", BUFFERED_METRIC_KIND_COUNTER, "long polls")
    latency = _Metric("temporal_activity_execution_latency", BUFFERED_METRIC_KIND_HISTOGRAM)
    own = {"task_queue": "gpuprov", "namespace": "default", "run_id": "0b9c-secret"}
    sticky = {"task_queue": "gpuprov-host-9f1c2a3b4c5d6e7f", "namespace": "default"}
    buffer = _Buffer([_Update(polls, 2, own), _Update(polls, 3, own), _Update(polls, 1, sticky),
                      _Update(latency, 0.2, own), _Update(latency, 40, own)])
    sdk = TemporalSdkMetrics(buffer, ["gpuprov"])  # type: ignore[arg-type]
    found = {(s.name, frozenset(s.labels.items())): s.value for f in sdk.collect() for s in f.samples}
    base = {("namespace", "default"), ("task_queue", "gpuprov")}
    assert found[("temporal_long_request_total", frozenset(base))] == 5
    assert found[("temporal_long_request_total", frozenset({("namespace", "default"),
                                                            ("task_queue", "other")}))] == 1
    assert found[("temporal_activity_execution_latency_count", frozenset(base))] == 2
    assert found[("temporal_activity_execution_latency_bucket", frozenset({*base, ("le", "0.25")}))] == 1
    assert found[("temporal_activity_execution_latency_bucket", frozenset({*base, ("le", "+Inf")}))] == 2
    assert not any("0b9c-secret" in str(labels) or "9f1c2a" in str(labels) for _, labels in found)

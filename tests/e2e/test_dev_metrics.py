"""Both /metrics endpoints of a running `gpuprov dev` (the suite's shared run, tests/devstack.py; this
file sorts before test_make_run.py, whose last test stops it): one allocation on the local cloud to
ready and then terminated moves exactly the series it should, by exactly one allocation.

The run is shared (the console's browser tests used it first), so values are compared with a scrape
taken just before: each series' change is asserted exactly. No label value is an id or a secret."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import devstack
from tests.devstack import SharedDev
from tests.eventually import eventually_sync

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:+/-]*$")  # every label value we allow: no spaces, no text


@pytest.fixture(scope="module")
def dev(shared_dev: SharedDev, tmp_path_factory: pytest.TempPathFactory,
        module_processes: None) -> Iterator[SharedDev]:
    """The shared run, or one of this file's own when it was stopped already."""
    own = None if shared_dev.alive() else devstack.start(tmp_path_factory.mktemp("metrics"))
    try:
        yield own or shared_dev
    finally:
        if own is not None:
            own.run.interrupt()


def scrape(url: str, token: str | None = None) -> tuple[Samples, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.get(url, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    found = {(s.name, frozenset(s.labels.items())): s.value
             for family in text_string_to_metric_families(r.text) for s in family.samples}
    return found, r.text


def at(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def instance(dev: SharedDev, iid: str) -> dict[str, Any]:
    r = httpx.get(f"{dev.url}/api/compute/instances/{iid}", headers={"Authorization": f"Bearer {dev.token}"},
                  timeout=30)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def settled(dev: SharedDev, iid: str, done: tuple[str, ...]) -> dict[str, Any]:
    """The instance once its status is one of `done`."""
    def check() -> dict[str, Any] | None:
        body = instance(dev, iid)
        return body if body["status"] in done else None

    return eventually_sync(check, within=180, what=f"{iid} {' or '.join(done)}")


def test_one_allocation_moves_each_series_by_exactly_one(dev: SharedDev) -> None:
    started = time.monotonic()
    port = dev.ports["GPUPROV_WORKER_METRICS_PORT"]
    worker_url = f"http://127.0.0.1:{port}/metrics"
    assert dev.run.wait_for(r"Worker metrics\s+(\S+)").group(1) == worker_url
    api_url = f"{dev.url}/metrics"
    assert httpx.get(api_url, timeout=30).status_code == 401
    api0, _ = scrape(api_url, dev.token)
    worker0, _ = scrape(worker_url)

    r = httpx.post(f"{dev.url}/api/compute/instances", headers={"Authorization": f"Bearer {dev.token}"},
                   json={"cloud": "local", "k3s": False, "ssh_public_keys": [dev.public.read_text().strip()]},
                   timeout=60)
    assert r.status_code == 202, r.text
    iid = r.json()["id"]
    ready = settled(dev, iid, ("ready", "failed"))
    assert ready["status"] == "ready", ready
    price = ready["price_per_hour"]

    api1, api_text = scrape(api_url, dev.token)
    assert at(api1, "gpuprov_allocations", status="ready") == at(
        api0, "gpuprov_allocations", status="ready") + 1
    assert at(api1, "gpuprov_allocations_by_phase", phase="ready") == at(
        api0, "gpuprov_allocations_by_phase", phase="ready") + 1
    assert {k: v for k, v in api1.items() if k[0] == "gpuprov_jobs"} == {
        k: v for k, v in api0.items() if k[0] == "gpuprov_jobs"}  # no job moved
    assert at(api1, "gpuprov_running_usd_per_hour", project="default") == pytest.approx(
        at(api0, "gpuprov_running_usd_per_hour", project="default") + price)

    def worker_saw_ready() -> Samples | None:
        found, _ = scrape(worker_url)
        moved = at(found, "gpuprov_time_to_ready_seconds_count", cloud="local") - at(
            worker0, "gpuprov_time_to_ready_seconds_count", cloud="local")
        return found if moved == 1 else None

    worker1 = eventually_sync(worker_saw_ready, within=30, what="time to ready observed")
    for name, labels in (("gpuprov_cloud_calls_total", {"cloud": "local", "operation": "create"}),
                         ("gpuprov_time_to_ready_seconds_count", {"cloud": "local"})):
        assert at(worker1, name, **labels) == at(worker0, name, **labels) + 1, (name, labels)
    create_errors = sum(v for (n, labels), v in worker1.items() if n == "gpuprov_cloud_errors_total"
                        and ("operation", "create") in labels and ("cloud", "local") in labels)
    assert create_errors == sum(v for (n, labels), v in worker0.items() if n == "gpuprov_cloud_errors_total"
                                and ("operation", "create") in labels and ("cloud", "local") in labels)
    assert any(name.startswith("temporal_") for name, _ in worker1), "the Temporal SDK's metrics"

    r = httpx.post(f"{dev.url}/api/compute/instances/{iid}/terminate",
                   headers={"Authorization": f"Bearer {dev.token}"}, timeout=60)
    assert r.status_code == 202, r.text
    assert settled(dev, iid, ("terminated", "failed", "lost"))["status"] == "terminated"
    api2, api_text2 = scrape(api_url, dev.token)
    assert at(api2, "gpuprov_allocations", status="ready") == at(api0, "gpuprov_allocations", status="ready")
    assert at(api2, "gpuprov_allocations", status="terminated") == at(
        api0, "gpuprov_allocations", status="terminated") + 1
    assert at(api2, "gpuprov_running_usd_per_hour", project="default") == pytest.approx(
        at(api0, "gpuprov_running_usd_per_hour", project="default"))
    worker2, worker_text = scrape(worker_url)
    local = {"cloud": "local"}
    assert at(worker2, "gpuprov_cloud_calls_total", operation="release", **local) == at(
        worker0, "gpuprov_cloud_calls_total", operation="release", **local) + 1
    assert at(worker2, "gpuprov_cloud_calls_total", operation="terminate", **local) >= at(
        worker0, "gpuprov_cloud_calls_total", operation="terminate", **local) + 1

    # No label value is an id or a secret: none names the allocation, its machine, its key or a token.
    secrets = {iid, dev.token, str(ready.get("cloud_instance_id") or iid), ready["id"]}
    for text in (api_text, api_text2, worker_text):
        assert not [s for s in secrets if s and s in text]
    for name, pairs in [*api2, *worker2]:
        for key, value in pairs:
            assert value == "+Inf" or LABEL.match(value) or key == "le", (name, key, value)
    print(f"metrics e2e: {time.monotonic() - started:.1f}s")


def offers_served(dev: SharedDev) -> int:
    """How many offers searches the simulated local cloud has served (its own count, fakeclouds/calls.py)."""
    admin = f"http://127.0.0.1:{dev.ports['GPUPROV_LOCALCLOUD_PORT']}/_fake"
    counts = httpx.get(f"{admin}/calls", timeout=30).json()["counts"]
    return int(counts.get("local", {}).get("GET /offers", 0))


def test_the_apis_offers_calls_are_counted_whichever_process_answered(dev: SharedDev) -> None:
    """`gpuprov dev` runs the API in GPUPROV_API_WORKERS (2) processes on one port: each request and
    each scrape lands on either. Every one of the offers pages' cloud calls is in every scrape: the
    series moves by exactly the searches the cloud served."""
    api_url = f"{dev.url}/metrics"
    headers = {"Authorization": f"Bearer {dev.token}"}
    offers = {"cloud": "local", "operation": "offers"}
    before, _ = scrape(api_url, dev.token)
    served_before = offers_served(dev)
    queries = 6
    # A connection each: the kernel hands each to one of the processes. A query each: the pages
    # reuse a cloud's answer to the same query (the offers cache), asking it once. A 504 (the cloud
    # not answered within GPUPROV_OFFERS_TIMEOUT_S on a busy host, still asked) is asked again, as
    # the page does. A re-ask on the other process waits for the first call's answer (the offers
    # cache's turn), or asks too when it could not take the turn in time: the cloud's count says.
    for gpus in range(1, queries + 1):
        def ask(gpus: int = gpus) -> httpx.Response:
            return httpx.get(f"{dev.url}/api/compute/backends/local/offers", params={"gpu_count": gpus},
                             headers=headers, timeout=60)

        r = eventually_sync(ask, until=lambda r: r is not None and r.status_code != 504, within=120,
                            what=f"offers for {gpus} GPUs")
        assert r.status_code == 200, r.text

    def all_counted() -> int | None:  # a search asked twice may end after the answer that was served
        asked = offers_served(dev) - served_before
        found, _ = scrape(api_url, dev.token)
        return asked if at(found, "gpuprov_cloud_call_seconds_count", **offers) == at(
            before, "gpuprov_cloud_call_seconds_count", **offers) + asked else None

    asked = eventually_sync(all_counted, within=60, what="every offers search the cloud served counted")
    assert asked >= queries
    for _ in range(3):  # three scrapes, each on a connection of its own: all read the same total
        after, _ = scrape(api_url, dev.token)
        assert at(after, "gpuprov_cloud_calls_total", **offers) == at(
            before, "gpuprov_cloud_calls_total", **offers) + asked
        assert at(after, "gpuprov_cloud_call_seconds_count", **offers) == at(
            before, "gpuprov_cloud_call_seconds_count", **offers) + asked

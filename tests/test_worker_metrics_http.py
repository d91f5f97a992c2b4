"""The worker's /metrics server (activities/metrics_http.py): open on loopback, behind the admin token
anywhere else, and never bound off loopback without one."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter

from activities import metrics, metrics_http


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("gpuprov_probe_total", "a series to find", registry=registry).inc(3)
    return registry


@pytest.fixture
def servers() -> Iterator[list[metrics_http.WSGIServer]]:
    started: list[metrics_http.WSGIServer] = []
    yield started
    for server in started:
        server.shutdown()
        server.server_close()


def url(server: metrics_http.WSGIServer) -> str:
    return f"http://127.0.0.1:{server.server_port}/metrics"


def test_on_loopback_anyone_on_the_host_may_scrape(registry: CollectorRegistry,
                                                   servers: list[metrics_http.WSGIServer]) -> None:
    servers.append(server := metrics_http.serve(registry, 0))
    r = httpx.get(url(server))
    assert r.status_code == 200 and "gpuprov_probe_total 3.0" in r.text


def test_a_token_guards_every_scrape(registry: CollectorRegistry,
                                     servers: list[metrics_http.WSGIServer]) -> None:
    servers.append(server := metrics_http.serve(registry, 0, addr="127.0.0.1", token="admin-t0ken"))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "admin-t0ken"},
                    {"Authorization": "Basic admin-t0ken"}, {"Authorization": "Bearer admin-t0ke"}):
        r = httpx.get(url(server), headers=headers)
        assert (r.status_code, r.headers["www-authenticate"]) == (401, "Bearer"), headers
        assert "gpuprov_probe_total" not in r.text and "admin-t0ken" not in r.text
    for scheme in ("Bearer", "bearer"):
        r = httpx.get(url(server), headers={"Authorization": f"{scheme} admin-t0ken"})
        assert r.status_code == 200 and "gpuprov_probe_total 3.0" in r.text


def test_off_loopback_without_a_token_nothing_binds(registry: CollectorRegistry,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    bound: list[str] = []
    monkeypatch.setattr(metrics_http, "make_server", lambda addr, *a, **k: bound.append(addr))
    for addr in ("0.0.0.0", "::", "localhost"):  # a name is not taken for loopback
        with pytest.raises(metrics_http.MetricsAddressError, match="GPUPROV_API_TOKEN"):
            metrics_http.serve(registry, 9464, addr=addr)
    with pytest.raises(metrics_http.MetricsAddressError):
        metrics.serve(9464, addr="0.0.0.0")  # the worker's entry: refused before its registry grows
    assert bound == []
    addresses = ("127.0.0.1", "127.3.2.1", "::1", "0.0.0.0", "10.0.0.1")
    assert [metrics_http.is_loopback(a) for a in addresses] == [True, True, True, False, False]
    # What the worker asks before it builds anything (worker.serve_metrics): the admin token off loopback.
    assert [metrics_http.guard_for(a, "tok") for a in ("127.0.0.1", "::1", "0.0.0.0")] == [None, None, "tok"]
    for token in (None, ""):
        with pytest.raises(metrics_http.MetricsAddressError):
            metrics_http.guard_for("0.0.0.0", token)


def test_an_ipv6_loopback_address_is_served(registry: CollectorRegistry,
                                            servers: list[metrics_http.WSGIServer]) -> None:
    servers.append(server := metrics_http.serve(registry, 0, addr="::1"))
    r = httpx.get(f"http://[::1]:{server.server_port}/metrics")
    assert r.status_code == 200 and "gpuprov_probe_total 3.0" in r.text

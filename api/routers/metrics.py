"""`GET /metrics`: Prometheus text format for an operator's scraper (README: Metrics). The
installation's admin token only — 401 without a valid token, 403 for a project token: the series
cover every project (each project's running $/hr), which one tenant must not read of another.

What it serves is the database's gauges (store/metrics.py: allocations by status and by phase, jobs
by status, running $/hr per project), counted on each scrape into a registry of this request's own
(never prometheus_client's global one), and the API's own cloud calls (the offers pages ask the
clouds: calls, errors, latency and rate-limit waits, as activities/metrics.py measures the worker's)
— every API process's summed where `python -m api.serve` runs several (CloudCallsCollector).
The worker's own series are on its own /metrics (activities/metrics.py, metrics_http.py). Not in the OpenAPI
description: its body is not JSON, and it is an operator's endpoint, not the API's."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from activities.metrics import CloudCallsCollector
from api.auth import require_admin_token
from api.deps import DepsDep
from store.metrics import DatabaseCollector

PATH = "/metrics"

router = APIRouter()


@router.get(PATH, include_in_schema=False, dependencies=[Depends(require_admin_token)])
def metrics(deps: DepsDep) -> Response:
    """Sync: the collector reads the database, so FastAPI runs it on its threadpool."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(deps.engine))
    registry.register(CloudCallsCollector())
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST,
                    headers={"Cache-Control": "no-store"})

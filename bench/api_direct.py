"""Where one console list's time goes, called in this process (no HTTP, no other client): the
busiest lists' route functions on a database seeded as `bench.api_scale` seeds it, median ms.

    python -m bench.api_direct [--backend sqlite|postgresql|both] [--rows 10000] [--calls 100]

The instances page is timed by phase (the keyset fetch, the fleet hosts' routes, the rows' fields,
pydantic's validation, the JSON); the Workload Queue's page and a job's detail whole. For the
latency under concurrent clients, see `python -m bench.api_scale`."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa
from sqlmodel import Session

from api.auth import Caller
from api.pagination import PageQuery
from api.routers import instances as instance_routes
from api.routers import workloads as workload_routes
from bench import api_scale
from providers import registry
from store import host_keys, migrate
from store.db import make_engine
from store.models import Instance

PHASES = ("fetch", "routes", "fields", "validate", "json")


def instances_page(session: Session, project: str) -> dict[str, float]:
    """One `GET /instances?status=active&limit=200`, as list_instances makes it: ms per phase."""
    marks = [time.perf_counter()]
    stmt, params = instance_routes.list_query(project, instance_routes.ACTIVE)
    found, following = instance_routes.KEYSET.fetch_built(session, stmt, params, PageQuery(limit=200))
    rows = cast(list[Instance], found)
    marks.append(time.perf_counter())
    routes = host_keys.fleet_routes(session, [r for r in rows if registry.is_fleet(r.provider)])
    marks.append(time.perf_counter())
    now, self_end = datetime.now(UTC), cache(instance_routes._self_end)
    items = [instance_routes.instance_fields(r, routes.get(r.id), now=now, self_end=self_end) for r in rows]
    marks.append(time.perf_counter())
    page = instance_routes.INSTANCE_PAGE.validate_python({"items": items, "next_cursor": following})
    marks.append(time.perf_counter())
    instance_routes.INSTANCE_PAGE.dump_json(page, by_alias=True)
    marks.append(time.perf_counter())
    return {name: (b - a) * 1000 for name, a, b in zip(PHASES, marks[:-1], marks[1:], strict=True)}


def median_ms(engine: sa.Engine, call: Callable[[Session], Any], calls: int) -> float:
    """The median of `calls` calls, each in a session of its own, after a few not counted."""
    samples = []
    for n in range(calls + 10):
        with Session(engine) as session:
            t0 = time.perf_counter()
            call(session)
            if n >= 10:
                samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def run(backend: str, rows: int, calls: int) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="gpuprov-bench-direct-") as tmp, \
            api_scale.database(backend, Path(tmp)) as url:
        engine = make_engine(url)
        try:
            migrate.upgrade(engine)
            seeded = api_scale.seed(engine, rows)
            project = api_scale.MEASURED
            caller = Caller(admin=False, project=project)
            phases: dict[str, list[float]] = {name: [] for name in PHASES}
            for n in range(calls + 10):
                with Session(engine) as session:
                    timed = instances_page(session, project)
                if n >= 10:
                    for name, ms in timed.items():
                        phases[name].append(ms)
            queue = median_ms(engine, lambda s: workload_routes.list_workloads(
                s, caller, PageQuery(limit=200), workload_routes.WorkloadFilter.ALL), calls)
            detail = median_ms(engine, lambda s: workload_routes.get_workload(
                f"{workload_routes.JOB_PREFIX}{seeded.job_id}", s, caller), calls)
        finally:
            engine.dispose()
    shown = "  ".join(f"{name} {statistics.median(v):.2f}" for name, v in phases.items())
    return [f"(api direct) {backend:<10}  instances page of 200, ms by phase: {shown}",
            f"(api direct) {backend:<10}  workloads page of 200 {queue:.2f} ms, "
            f"a job's detail {detail:.2f} ms"]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.api_direct", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    for backend in ("sqlite", "postgresql") if args.backend == "both" else (args.backend,):
        print("\n".join(run(backend, args.rows, args.calls)), flush=True)


if __name__ == "__main__":
    main()

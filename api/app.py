"""The FastAPI application: `create_app(deps)` for tests, `build_app()` for uvicorn
(`uvicorn --factory api.app:build_app`), which migrates the database first."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import Depends, FastAPI

import logsafe
from api.auth import require_token
from api.console import pages as console_pages
from api.console import session as console_session
from api.deps import AppDeps, deps_from_settings
from api.errors import install_error_handlers
from api.frozen_heap import FrozenWhenWarm, long_lived_frozen
from api.guard import EdgeGuard
from api.openapi import install_openapi
from api.query_params import known_query
from api.routers import (
    acceptance,
    budget,
    capacity,
    catalog,
    clouds,
    codec,
    connections,
    defaults,
    fleets,
    idle_policy,
    instances,
    jobs,
    kubeconfig,
    limits,
    metrics,
    modal_picker,
    offers,
    policies,
    pools,
    projects,
    providers,
    queue,
    retired,
    spend,
    workloads,
)

API_PREFIX = "/api/compute"


def create_app(deps: AppDeps) -> FastAPI:
    """The app, serving `deps`. Everything in it reads them from `app.state.deps` when a request
    comes (routes, the edge guard, the codec's CORS), never from what it was built with."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        long_lived_frozen()
        yield
        await app.state.deps.market.aclose()  # the offers page's adapters and their HTTP pools

    app = FastAPI(
        lifespan=lifespan,
        title="gpuprov",
        version="0.2.0",
        description="GPU provisioning across clouds on Temporal workflows. "
                    "Every /api route needs `Authorization: Bearer <token>`: the installation's admin "
                    "token (any project, chosen with `X-Project`, default `default`) or a project token "
                    "(its own project only; another project's objects answer 404). "
                    "Every list is paginated: `?limit=1..200&cursor=<next_cursor of the previous page>` "
                    "answers `{items, next_cursor}`; a null `next_cursor` marks the last page. "
                    "Every error answers `{detail, errors?}` (ErrorOut): `detail` says why; "
                    "`errors` lists the invalid fields of a 422.",
    )
    app.state.deps = deps
    install_error_handlers(app)
    install_openapi(app)  # built on first use: it covers every route, also those added below
    # `catalog` first: its GET /providers/catalog must match before /providers/{id} routes could;
    # `modal_picker` before `offers`: Modal's /backends/modal/... before /backends/{provider}/...
    for module in (catalog, clouds, connections, providers, modal_picker, offers, instances, spend, fleets,
                   policies, idle_policy, budget, workloads, jobs, limits, pools, queue, defaults, retired,
                   acceptance, kubeconfig, capacity):
        app.include_router(module.router, prefix=API_PREFIX, dependencies=[Depends(require_token),
                                                                           Depends(known_query)])
    app.include_router(projects.router, prefix="/api", dependencies=[Depends(require_token),
                                                                     Depends(known_query)])
    # The Compute console: its sign-in (a bearer token or its cookie; api/console/session.py) and pages.
    app.include_router(console_session.router, prefix="/api", dependencies=[Depends(known_query)])
    app.include_router(console_pages.router)
    # The Temporal Web UI's codec endpoint: its own auth (admin bearer or session cookie) and CORS.
    app.include_router(codec.router, prefix=codec.PREFIX)
    # Prometheus /metrics: the admin token only (api/routers/metrics.py), outside the OpenAPI description.
    app.include_router(metrics.router)
    app.add_middleware(codec.CodecCors)
    app.add_middleware(FrozenWhenWarm)  # counts the requests the guard admits
    # Added last of the middlewares: the outermost, so it decides before any other reads the body.
    app.add_middleware(EdgeGuard)

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness for `gpuprov dev` and load balancers (no auth, no secrets)."""
        return {"status": "ok"}

    return app


def build_app() -> FastAPI:
    """The app for uvicorn (`uvicorn --factory api.app:build_app`): migrates the database first."""
    from activities.deps import share_pacing
    from api.serve import stop_with_launcher
    from settings import get_settings, private_home

    stop_with_launcher()  # one of `python -m api.serve`'s processes: not beyond its launcher
    logsafe.configure_uvicorn()  # uvicorn has set up its logging by now
    home = private_home(get_settings().home)  # before the database, token or key is written there
    deps = deps_from_settings()
    share_pacing(home, deps.engine)  # a key's budget, shared with the host's and other hosts' processes
    return create_app(deps)

"""The FastAPI application: `create_app(deps)` for tests, `build_app()` for uvicorn
(`uvicorn --factory api.app:build_app`), which migrates the database first."""

from __future__ import annotations

from functools import partial

from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError

import logsafe
from api.deps import AppDeps, deps_from_settings, require_token, token_is_valid
from api.errors import request_validation_handler
from api.guard import EdgeGuard
from api.routers import clouds, connections, instances, offers

API_PREFIX = "/api/compute"


def create_app(deps: AppDeps) -> FastAPI:
    app = FastAPI(
        title="gpuprov",
        version="0.2.0",
        description="GPU provisioning across clouds on Temporal workflows. "
                    "Every /api/compute route needs `Authorization: Bearer <token>`. "
                    "Every list is paginated: `?limit=1..200&cursor=<next_cursor of the previous page>` "
                    "answers `{items, next_cursor}`; a null `next_cursor` marks the last page.",
    )
    app.state.deps = deps
    app.add_exception_handler(RequestValidationError, request_validation_handler)
    # Added last of the middlewares: the outermost, so it decides before any other reads the body.
    app.add_middleware(EdgeGuard, token_ok=partial(token_is_valid, deps))
    for module in (clouds, connections, offers, instances):
        app.include_router(module.router, prefix=API_PREFIX, dependencies=[Depends(require_token)])

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness for `gpuprov dev` and load balancers (no auth, no secrets)."""
        return {"status": "ok"}

    return app


def build_app() -> FastAPI:
    """The app for uvicorn (`uvicorn --factory api.app:build_app`): migrates the database first."""
    logsafe.configure_uvicorn()  # uvicorn has set up its logging by now
    return create_app(deps_from_settings())

"""The FastAPI application: `create_app(deps)` for tests, `build_app()` for uvicorn
(`uvicorn --factory api.app:build_app`), which migrates the database first."""

from __future__ import annotations

from fastapi import Depends, FastAPI

from api.deps import AppDeps, deps_from_settings, require_token
from api.errors import install_error_handlers
from api.openapi import install_openapi
from api.routers import clouds, connections, instances, offers

API_PREFIX = "/api/compute"


def create_app(deps: AppDeps) -> FastAPI:
    app = FastAPI(
        title="gpuprov",
        version="0.2.0",
        description="GPU provisioning across clouds on Temporal workflows. "
                    "Every /api/compute route needs `Authorization: Bearer <token>`. "
                    "Every list is paginated: `?limit=1..200&cursor=<next_cursor of the previous page>` "
                    "answers `{items, next_cursor}`; a null `next_cursor` marks the last page. "
                    "Every error answers `{detail, errors?}` (ErrorOut): `detail` says why; "
                    "`errors` lists the invalid fields of a 422.",
    )
    app.state.deps = deps
    install_error_handlers(app)
    install_openapi(app)  # built on first use: it covers every route, also those added below
    for module in (clouds, connections, offers, instances):
        app.include_router(module.router, prefix=API_PREFIX, dependencies=[Depends(require_token)])

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness for `gpuprov dev` and load balancers (no auth, no secrets)."""
        return {"status": "ok"}

    return app


def build_app() -> FastAPI:
    """The app for uvicorn (`uvicorn --factory api.app:build_app`): migrates the database first."""
    return create_app(deps_from_settings())

"""The API's wiring: what it needs from outside — database, secret box, token, Temporal — in one
injectable object (`AppDeps`, stored on app.state), and the FastAPI dependencies that hand it and
database sessions out. Authentication is api/auth.py; the Temporal gateway api/temporal.py."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import sqlalchemy as sa
from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from sqlmodel import Session

from api.market import Market
from api.temporal import TemporalGateway, WorkflowGateway
from messages.allocation import Timing
from providers.fleet_addresses import FleetAddresses
from settings import home_value
from store.db import ReadSession
from store.secrets import SecretBox

P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class AppDeps:
    engine: sa.Engine
    box: SecretBox
    api_token: str
    installation_id: str
    workflows: WorkflowGateway
    connect_timeout_s: float = 60.0
    codec_cors_origins: tuple[str, ...] = ("http://127.0.0.1:8233",)  # the Temporal Web UI's
    codec_session_ttl_s: float = 12 * 3600
    console_session_ttl_s: float = 12 * 3600  # a Compute console sign-in (GPUPROV_CONSOLE_SESSION_TTL_S)
    # URL prefixes a connection's endpoint may use besides its cloud's documented hosts
    # (GPUPROV_ALLOWED_ENDPOINTS; providers/endpoints.py).
    allowed_endpoints: tuple[str, ...] = ()
    # Where a policy's webhook may POST (GPUPROV_WEBHOOK_ALLOWLIST), and how often a condition
    # policy's Schedule evaluates it (GPUPROV_POLICY_INTERVAL_S).
    webhook_allowlist: tuple[str, ...] = ()
    policy_interval_s: float = 60.0
    # Which addresses a fleet's hosts may have (GPUPROV_FLEET_ALLOWED_NETWORKS and this installation's
    # own services: providers/fleet_addresses.py).
    fleet_addresses: FleetAddresses = field(default_factory=FleetAddresses)
    # The cross-cloud offers page: each connection's adapter, built once per API process (its HTTP
    # pool and TLS context reused), and a short cache of each connection's answer.
    market: Market = field(default_factory=lambda: Market())
    # The timing a new allocation runs with (GPUPROV_HEARTBEAT_TIMEOUT_S), and managed jobs' for their
    # allocations and activities (tests shorten it), and how often a running job's output is read
    # from its host.
    allocation_timing: Timing = field(default_factory=Timing)
    job_timing: Timing = field(default_factory=Timing)
    job_log_poll_s: float = 1.0
    job_queue_poll_s: float = 5.0  # a queued job asks for its grant at least this often
    job_priority_max: int = 100  # a job's priority is within ±this (GPUPROV_JOB_PRIORITY_MAX)
    # The SSH path to machines (activities/machine_ssh.py), for reading a kubeconfig: built on first use.
    machine_access: Any = None
    # Projects seen to exist (api/auth.py project_exists): never deleted, so remembered per process.
    known_projects: set[str] = field(default_factory=set)


def load_or_create_token(home: Path, configured: str | None = None) -> str:
    """The API bearer token: configured, else home/api-token (created with mode 0600)."""
    return configured or home_value(home, "api-token", lambda: secrets.token_urlsafe(32))


def deps_from_settings() -> AppDeps:
    from settings import get_settings
    from store.db import default_engine
    from store.identity import installation_id
    from store.migrate import upgrade
    from store.offer_answers import OfferAnswers
    from store.secrets import default_box

    s = get_settings()
    engine = default_engine()
    upgrade(engine)  # before reading the identity, which lives in the database
    box = default_box()
    return AppDeps(
        engine=engine,
        box=box,
        api_token=load_or_create_token(s.home, s.api_token),
        installation_id=installation_id(engine, s.installation_id, legacy_home=s.home),
        workflows=TemporalGateway(s.temporal_address, s.temporal_namespace, s.task_queue, keys=box.keys),
        codec_cors_origins=tuple(o.strip() for o in s.codec_cors_origins.split(",") if o.strip()),
        codec_session_ttl_s=s.codec_session_ttl_s,
        console_session_ttl_s=s.console_session_ttl_s,
        allowed_endpoints=s.allowed_endpoint_prefixes(),
        webhook_allowlist=s.webhook_prefixes(),
        policy_interval_s=s.policy_interval_s,
        fleet_addresses=FleetAddresses.from_settings(s),
        market=Market(ttl_s=s.offers_cache_ttl_s, timeout_s=s.offers_timeout_s, shared=OfferAnswers(engine)),
        job_priority_max=s.job_priority_max,
        allocation_timing=Timing(heartbeat_timeout_s=s.heartbeat_timeout_s),
        job_timing=Timing(heartbeat_timeout_s=s.heartbeat_timeout_s),
    )


async def get_deps(request: Request) -> AppDeps:
    # async: a dependency this cheap is not worth a trip to FastAPI's threadpool
    deps: AppDeps = request.app.state.deps
    return deps


DepsDep = Annotated[AppDeps, Depends(get_deps)]


def open_session(deps: AppDeps) -> Session:
    """A session for one unit of work. Sync: call it from a `def` route or inside the threadpool."""
    return Session(deps.engine, expire_on_commit=False)


def open_read_session(deps: AppDeps) -> Session:
    """A session for reads alone (store/db.py `ReadSession`: on PostgreSQL no transaction, so no
    BEGIN and ROLLBACK on the wire; any write through it raises)."""
    return ReadSession(deps.engine)


def _request_session(open_: Callable[[AppDeps], Session], *, close_on_loop: bool,
                     ) -> Callable[[AppDeps], AsyncIterator[Session]]:
    """The dependency giving a request the session `open_` makes. Making one reads nothing (it takes
    a connection at its first statement, on the route's thread), so it is made on the event loop — a
    sync generator cost a trip to the threadpool to enter as well as to leave (0.1–0.25 ms of CPU a
    request). Closing it gives the connection back to the pool: a session that wrote sends a ROLLBACK
    on PostgreSQL, so it is closed on the threadpool; a read session (`close_on_loop`) has nothing
    to end on either database (no transaction on PostgreSQL's autocommit, none begun by a SELECT on
    SQLite's), and is closed on the event loop, saving the trip."""
    async def request_session(deps: DepsDep) -> AsyncIterator[Session]:
        session = open_(deps)
        try:
            yield session
        finally:
            if close_on_loop:
                session.close()
            else:
                await run_in_threadpool(session.close)

    return request_session


get_session = _request_session(open_session, close_on_loop=False)
# For a route that only reads (the lists and details the console refreshes).
get_read_session = _request_session(open_read_session, close_on_loop=True)


# Only `def` routes take a session (FastAPI runs them on its threadpool). An `async` route does its
# database work in sync helpers passed to `in_thread` (tests/api/test_routes.py checks both rules).
SessionDep = Annotated[Session, Depends(get_session)]
ReadSessionDep = Annotated[Session, Depends(get_read_session)]


async def in_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work (database, decryption) off the event loop: FastAPI's threadpool."""
    return await run_in_threadpool(fn, *args, **kwargs)

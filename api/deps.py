"""What the API needs from outside — database, secret box, token, Temporal — in one injectable
object (`AppDeps`, stored on app.state), plus the FastAPI dependencies that hand it out."""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, ParamSpec, Protocol, TypeVar

import sqlalchemy as sa
from fastapi import Depends, Header, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlmodel import Session

from api.market import Market
from api.schemas import PROJECT_PATTERN
from messages.allocation import Timing
from providers.fleet_addresses import FleetAddresses
from settings import home_value
from store import repo
from store.secrets import SecretBox

P = ParamSpec("P")
T = TypeVar("T")

# --------------------------------------------------------------------------- workflows


class WorkflowUnavailable(Exception):
    """Temporal could not be reached (or refused the start): the request did nothing."""


class WorkflowFailed(Exception):
    """The workflow ran and failed, or did not finish within its timeout."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.timed_out = timed_out


class WorkflowGateway(Protocol):
    """The things the API does with Temporal. Workflows are addressed by name, so the API never
    imports workflow code (the worker owns it)."""

    async def start(self, workflow: str, arg: BaseModel, *, workflow_id: str,
                    use_existing: bool = False, once: bool = False) -> bool:
        """Start `workflow` as `workflow_id`. `use_existing`: a running run of that id is joined
        (its input stands) instead of refused. `once`: also joins a running run, and an id whose run
        has closed is never run again — nothing starts and the answer is False. True: a run of that
        id is open (this call's or the one it joined)."""
        ...

    async def execute(self, workflow: str, arg: BaseModel, *, workflow_id: str,
                      execution_timeout_s: float, result_type: type | None = None,
                      attach: bool = False) -> Any:
        """Start and wait for the result. `attach`: a running run of that id is joined and its
        result returned (a retried request waits for the first one's answer)."""
        ...

    async def request_update(self, workflow_id: str, update: str) -> bool:
        """Send an update and return once the workflow accepted it; False if it already closed."""
        ...

    async def put_schedule(self, schedule_id: str, workflow: str, arg: BaseModel, *, workflow_id: str,
                           every_s: float | None = None, cron: str | None = None, paused: bool = False,
                           note: str = "", run_timeout_s: float = 300.0) -> None:
        """Create or replace Schedule `schedule_id`: it starts `workflow`(arg) as `workflow_id` (+ the
        scheduled time) every `every_s` seconds or on `cron`; a run still going when the next is due
        makes that one skip. `paused` pauses it (with `note`) or resumes it."""
        ...

    async def delete_schedule(self, schedule_id: str) -> bool:
        """Delete the Schedule; False if there was none."""
        ...


UPDATE_RETRY_DELAYS_S = (0.2, 0.5, 1.0)  # an update whose workflow task failed is sent again, after these


class TemporalGateway:
    """WorkflowGateway over a real Temporal client, connected on first use (the API may
    start before Temporal answers)."""

    def __init__(self, address: str, namespace: str, task_queue: str, *, keys: Sequence[bytes]) -> None:
        self.address, self.namespace, self.task_queue = address, namespace, task_queue
        self.keys = keys  # the payload codec's: the secret store's keyring, as the worker's
        self._client: Any = None
        self._lock = asyncio.Lock()

    async def client(self) -> Any:
        async with self._lock:
            if self._client is None:
                from workflows.converter import connect_client

                try:
                    self._client = await connect_client(self.address, self.namespace, keys=self.keys)
                except Exception as e:  # noqa: BLE001 — any connect failure means "unavailable"
                    raise WorkflowUnavailable(f"Temporal at {self.address} is not reachable: {e}") from e
            return self._client

    async def start(self, workflow: str, arg: BaseModel, *, workflow_id: str,
                    use_existing: bool = False, once: bool = False) -> bool:
        from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
        from temporalio.exceptions import WorkflowAlreadyStartedError
        from temporalio.service import RPCError

        client = await self.client()
        joins = use_existing or once
        policy = WorkflowIDConflictPolicy.USE_EXISTING if joins else WorkflowIDConflictPolicy.FAIL
        reuse = WorkflowIDReusePolicy.REJECT_DUPLICATE if once else WorkflowIDReusePolicy.ALLOW_DUPLICATE
        try:
            await client.start_workflow(workflow, arg, id=workflow_id, task_queue=self.task_queue,
                                        id_conflict_policy=policy, id_reuse_policy=reuse)
        except WorkflowAlreadyStartedError:
            if once:
                return False  # it ran and closed: it is not run again
            raise
        except RPCError as e:
            raise WorkflowUnavailable(f"could not start {workflow}: {e.message}") from e
        return True

    async def execute(self, workflow: str, arg: BaseModel, *, workflow_id: str,
                      execution_timeout_s: float, result_type: type | None = None,
                      attach: bool = False) -> Any:
        from temporalio.client import WorkflowFailureError
        from temporalio.common import WorkflowIDConflictPolicy
        from temporalio.exceptions import TimeoutError as TemporalTimeout
        from temporalio.service import RPCError

        client = await self.client()
        policy = WorkflowIDConflictPolicy.USE_EXISTING if attach else WorkflowIDConflictPolicy.FAIL
        try:
            return await client.execute_workflow(
                workflow, arg, id=workflow_id, task_queue=self.task_queue, id_conflict_policy=policy,
                execution_timeout=timedelta(seconds=execution_timeout_s), result_type=result_type)
        except WorkflowFailureError as e:
            cause = e.cause
            if isinstance(cause, TemporalTimeout):
                raise WorkflowFailed(f"{workflow} did not finish within {execution_timeout_s:g}s "
                                     "(is a worker running?)", timed_out=True) from e
            raise WorkflowFailed(getattr(cause, "message", None) or str(cause or e)) from e
        except RPCError as e:
            raise WorkflowUnavailable(f"could not run {workflow}: {e.message}") from e

    async def request_update(self, workflow_id: str, update: str) -> bool:
        from temporalio.client import WorkflowUpdateStage
        from temporalio.service import RPCError, RPCStatusCode

        client = await self.client()
        for delay in (*UPDATE_RETRY_DELAYS_S, None):
            try:
                await client.get_workflow_handle(workflow_id).start_update(
                    update, wait_for_stage=WorkflowUpdateStage.ACCEPTED)
                return True
            except RPCError as e:
                if e.status == RPCStatusCode.NOT_FOUND:  # closed (or never started): nothing to update
                    return False
                # WorkflowNotReady: the workflow task carrying the update failed — typically it raced
                # the workflow's own next step (UnhandledCommand) — so the update was not accepted
                # and sending it again is safe. `make fuzz` hit it on terminates right after a create.
                if e.status != RPCStatusCode.FAILED_PRECONDITION or delay is None:
                    raise WorkflowUnavailable(f"could not send {update} to {workflow_id}: {e.message}") from e
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def put_schedule(self, schedule_id: str, workflow: str, arg: BaseModel, *, workflow_id: str,
                           every_s: float | None = None, cron: str | None = None, paused: bool = False,
                           note: str = "", run_timeout_s: float = 300.0) -> None:
        from temporalio.client import (
            Schedule,
            ScheduleActionStartWorkflow,
            ScheduleAlreadyRunningError,
            ScheduleIntervalSpec,
            ScheduleOverlapPolicy,
            SchedulePolicy,
            ScheduleSpec,
            ScheduleState,
            ScheduleUpdate,
            ScheduleUpdateInput,
        )
        from temporalio.service import RPCError

        client = await self.client()
        spec = (ScheduleSpec(cron_expressions=[cron]) if cron is not None
                else ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=every_s or 60))]))
        wanted = Schedule(
            action=ScheduleActionStartWorkflow(workflow, arg, id=workflow_id, task_queue=self.task_queue,
                                               execution_timeout=timedelta(seconds=run_timeout_s)),
            # A run missed while Temporal was down is not made up: the next one reads the world anew.
            spec=spec, policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP,
                                             catchup_window=timedelta(seconds=60)),
            state=ScheduleState(paused=paused, note=note))
        try:
            try:
                await client.create_schedule(schedule_id, wanted)
                return
            except ScheduleAlreadyRunningError:
                pass

            async def replace(_: ScheduleUpdateInput) -> ScheduleUpdate:
                return ScheduleUpdate(schedule=wanted)

            await client.get_schedule_handle(schedule_id).update(replace)
        except RPCError as e:
            raise WorkflowUnavailable(f"could not save schedule {schedule_id}: {e.message}") from e

    async def delete_schedule(self, schedule_id: str) -> bool:
        from temporalio.service import RPCError, RPCStatusCode

        client = await self.client()
        try:
            await client.get_schedule_handle(schedule_id).delete()
        except RPCError as e:
            if e.status == RPCStatusCode.NOT_FOUND:
                return False
            raise WorkflowUnavailable(f"could not delete schedule {schedule_id}: {e.message}") from e
        return True


# --------------------------------------------------------------------------- deps


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
    # Managed jobs: their allocations' and activities' timing (tests shorten it), and how often a
    # running job's output is read from its host.
    job_timing: Timing = field(default_factory=Timing)
    job_log_poll_s: float = 1.0
    job_queue_poll_s: float = 5.0  # a queued job asks for its grant at least this often
    job_priority_max: int = 100  # a job's priority is within ±this (GPUPROV_JOB_PRIORITY_MAX)


def load_or_create_token(home: Path, configured: str | None = None) -> str:
    """The API bearer token: configured, else home/api-token (created with mode 0600)."""
    return configured or home_value(home, "api-token", lambda: secrets.token_urlsafe(32))


def deps_from_settings() -> AppDeps:
    from settings import get_settings
    from store.db import default_engine
    from store.identity import installation_id
    from store.migrate import upgrade
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
        allowed_endpoints=s.allowed_endpoint_prefixes(),
        webhook_allowlist=s.webhook_prefixes(),
        policy_interval_s=s.policy_interval_s,
        fleet_addresses=FleetAddresses.from_settings(s),
        market=Market(ttl_s=s.offers_cache_ttl_s, timeout_s=s.offers_timeout_s),
        job_priority_max=s.job_priority_max,
    )


def get_deps(request: Request) -> AppDeps:
    deps: AppDeps = request.app.state.deps
    return deps


DepsDep = Annotated[AppDeps, Depends(get_deps)]


def open_session(deps: AppDeps) -> Session:
    """A session for one unit of work. Sync: call it from a `def` route or inside the threadpool."""
    return Session(deps.engine, expire_on_commit=False)


def get_session(deps: DepsDep) -> Iterator[Session]:
    # A sync generator: FastAPI enters and leaves it on its threadpool, never on the event loop.
    with open_session(deps) as session:
        yield session


# Only `def` routes take a session (FastAPI runs them on its threadpool). An `async` route does its
# database work in sync helpers passed to `in_thread` (tests/api/test_routes.py checks both rules).
SessionDep = Annotated[Session, Depends(get_session)]


async def in_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking work (database, decryption) off the event loop: FastAPI's threadpool."""
    return await run_in_threadpool(fn, *args, **kwargs)


_bearer = HTTPBearer(auto_error=False, description="the admin token printed by `gpuprov dev`, or a project "
                                                   "token (POST /api/projects/{project}/tokens)")
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]

DEFAULT_PROJECT = "default"
PROJECT_HEADER = "X-Project"


@dataclass(frozen=True)
class Caller:
    """Who is calling. `project` is the one project this request works in: the token's own, or for
    the admin token the X-Project header's (default `default`)."""

    admin: bool
    project: str


def token_project(deps: AppDeps, token: str) -> str | None:
    """The project of a live project token; None for an unknown or revoked one. Sync (a database
    read): call it from the threadpool."""
    with open_session(deps) as session:
        return repo.project_of_token(session, token)


def is_admin_token(deps: AppDeps, token: str) -> bool:
    # compare_digest: the time taken does not reveal how much of the token matched.
    return hmac.compare_digest(token.encode(), deps.api_token.encode())


def token_is_valid(deps: AppDeps, token: str) -> bool:
    """Whether `token` may use the API: the admin token or a live project token. The one place tokens
    are checked (the edge guard, before any body is read, and `current_caller`). Sync: it may look
    tokens up in the database, so call it from the threadpool."""
    return bool(token) and (is_admin_token(deps, token) or token_project(deps, token) is not None)


UNAUTHORIZED = "missing or invalid bearer token"


def _unauthorized() -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})


def no_project(project: str) -> HTTPException:
    """Another project's object, or one that does not exist: the same 404 (never 403), so a project
    token cannot even learn which projects exist."""
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no project {project!r}")


ProjectHeader = Annotated[str | None, Header(
    alias=PROJECT_HEADER, pattern=PROJECT_PATTERN,
    description="The project to work in. Admin token: any project (default `default`); a project "
                "token: only its own (another answers 404).")]


def current_caller(creds: BearerDep, deps: DepsDep, x_project: ProjectHeader = None) -> Caller:
    """Authenticate the request and settle its project. A sync dependency: FastAPI runs it on its
    threadpool, so the token lookup never blocks the event loop."""
    if creds is None:
        raise _unauthorized()
    if is_admin_token(deps, creds.credentials):
        project = x_project or DEFAULT_PROJECT
        with open_session(deps) as session:
            if repo.get_project(session, project) is None:
                raise no_project(project)
        return Caller(admin=True, project=project)
    own = token_project(deps, creds.credentials)
    if own is None:
        raise _unauthorized()
    if x_project is not None and x_project != own:
        raise no_project(x_project)
    return Caller(admin=False, project=own)


CallerDep = Annotated[Caller, Depends(current_caller)]


def require_token(caller: CallerDep) -> None:
    """Router-wide: every route authenticates, whether or not it reads the caller (FastAPI runs
    `current_caller` once per request however many times it is named)."""


def require_admin_token(creds: BearerDep, deps: DepsDep) -> None:
    """The installation's admin token, whatever the project (the codec endpoint: it decodes every
    project's payloads). 401 without a valid token, 403 for a project token."""
    if creds is None:
        raise _unauthorized()
    if is_admin_token(deps, creds.credentials):
        return
    if token_project(deps, creds.credentials) is None:
        raise _unauthorized()
    raise HTTPException(status.HTTP_403_FORBIDDEN, "this needs the installation's admin token")


def require_admin(caller: Caller) -> None:
    if not caller.admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this needs the installation's admin token")

"""What the API needs from outside — database, secret box, token, Temporal — in one injectable
object (`AppDeps`, stored on app.state), plus the FastAPI dependencies that hand it out."""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, ParamSpec, Protocol, TypeVar

import sqlalchemy as sa
from fastapi import Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from sqlmodel import Session

from settings import home_value
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


UPDATE_RETRY_DELAYS_S = (0.2, 0.5, 1.0)  # an update whose workflow task failed is sent again, after these


class TemporalGateway:
    """WorkflowGateway over a real Temporal client, connected on first use (the API may
    start before Temporal answers)."""

    def __init__(self, address: str, namespace: str, task_queue: str) -> None:
        self.address, self.namespace, self.task_queue = address, namespace, task_queue
        self._client: Any = None
        self._lock = asyncio.Lock()

    async def client(self) -> Any:
        async with self._lock:
            if self._client is None:
                from workflows.converter import connect_client

                try:
                    self._client = await connect_client(self.address, self.namespace)
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


# --------------------------------------------------------------------------- deps


@dataclass
class AppDeps:
    engine: sa.Engine
    box: SecretBox
    api_token: str
    installation_id: str
    workflows: WorkflowGateway
    connect_timeout_s: float = 60.0


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
    return AppDeps(
        engine=engine,
        box=default_box(),
        api_token=load_or_create_token(s.home, s.api_token),
        installation_id=installation_id(engine, s.installation_id, legacy_home=s.home),
        workflows=TemporalGateway(s.temporal_address, s.temporal_namespace, s.task_queue),
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


_bearer = HTTPBearer(auto_error=False, description="the token printed by `gpuprov dev`")
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def require_token(creds: BearerDep, deps: DepsDep) -> None:
    given = creds.credentials.encode() if creds else b""
    # compare_digest: the time taken does not reveal how much of the token matched.
    if not creds or not hmac.compare_digest(given, deps.api_token.encode()):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "missing or invalid bearer token",
                            headers={"WWW-Authenticate": "Bearer"})

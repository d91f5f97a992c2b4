"""Cloud connections: verified before they count, credentials stored encrypted, never returned."""

from __future__ import annotations

import logging

from fastapi import APIRouter, HTTPException, status
from fastapi.exceptions import RequestValidationError
from sqlmodel import select

from api import idempotency as idem
from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, SessionDep, in_thread, open_session
from api.errors import adapter_class, shown
from api.pagination import Keyset, Page, PageDep
from api.schemas import ConnectionCreate, ConnectionOut, ConnectionRemoval
from api.temporal import WorkflowFailed, WorkflowUnavailable
from messages import workflows as wf
from messages.connection import ConnectRequest, DisconnectRequest
from messages.enums import ConnectionStatus
from messages.ids import connect_workflow_id, disconnect_workflow_id
from providers import endpoints
from providers.base import ConnectionOptions, InvalidRequest
from store import repo
from store.models import Connection

log = logging.getLogger(__name__)
router = APIRouter(prefix="/connections", tags=["connections"])

# Oldest first: the order they were made in.
KEYSET = Keyset("connections", Connection.created_at, Connection.id, descending=False)


# --------------------------------------------------------------------------- database work (sync)


def _saved(deps: AppDeps, project: str, connection_id: str) -> Connection | None:
    """The project's connection of that id; None for an unknown id or another project's."""
    with open_session(deps) as session:
        row = session.get(Connection, connection_id)
    return row if row is not None and row.project == project else None


# --------------------------------------------------------------------------- routes


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ConnectionOut,
             responses={400: {"description": "verification failed"},
                        422: {"description": "bad request, or an Idempotency-Key reused with another "
                                             "request"},
                        503: {"description": "Temporal unreachable"},
                        504: {"description": "no answer in time"}})
async def create_connection(body: ConnectionCreate, deps: DepsDep, caller: CallerDep,
                            idempotency_key: idem.IdempotencyKey = None) -> ConnectionOut:
    """Verify the credentials in ConnectWorkflow, which saves the connection only if they work.
    With an Idempotency-Key the connection id derives from the key: a retry joins the first
    attempt's verification, or answers with the connection it saved."""
    cls = adapter_class(body.provider)
    try:
        # Typed credentials: unknown, missing or mistyped fields are named (never their values).
        credentials = cls.parse_credentials(body.credentials)
    except InvalidRequest as e:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, e.message) from None
    try:
        # Before any workflow: the worker would refuse it too, but nothing should start or be stored.
        endpoints.check(cls, body.endpoint, deps.allowed_endpoints)
    except InvalidRequest as e:
        raise RequestValidationError([{"type": "value_error", "loc": ("body", "endpoint"),
                                       "msg": e.message}]) from None
    key = idempotency_key
    scope, fingerprint = idem.scope_of("connections", caller.project), ""
    if key is None:
        connection_id = repo.new_id()
    else:
        connection_id = idem.derived_id("connection", caller.project, key)
        # Keyed (HMAC), not a bare hash: the body holds credentials, and the record must not let
        # anyone with the database check a guess against them.
        fingerprint = deps.box.digest(idem.canonical(body.model_dump(mode="json")))
        await in_thread(idem.claim, deps, scope, key, fingerprint, connection_id)
        saved = await in_thread(_saved, deps, caller.project, connection_id)
        if saved is not None:  # a previous attempt verified and saved it
            return ConnectionOut.of(saved)
    # Sealed here, opened only by the worker's activity: no credential in clear in workflow history.
    sealed = deps.box.seal(credentials.reveal()).decode()
    request = ConnectRequest(connection_id=connection_id, provider=body.provider,
                             name=body.name or cls.capabilities.display_name, project=caller.project,
                             sealed_credentials=sealed,
                             options=ConnectionOptions(endpoint=body.endpoint, ca_bundle=body.ca_bundle))
    try:
        # Keyed: a retry attaches to the first attempt's run (still verifying) and gets its answer.
        result = await deps.workflows.execute(
            wf.CONNECT, request, workflow_id=connect_workflow_id(request.connection_id),
            execution_timeout_s=deps.connect_timeout_s, attach=key is not None)
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    except WorkflowFailed as e:
        code = status.HTTP_504_GATEWAY_TIMEOUT if e.timed_out else status.HTTP_400_BAD_REQUEST
        raise HTTPException(code, f"could not verify {body.provider}: {e.message}") from None
    saved = await in_thread(_saved, deps, caller.project, request.connection_id) if result.ok else None
    if saved is None:
        if key is not None and not result.ok:  # refused: nothing was made, so the key stays unused
            await in_thread(idem.release, deps, scope, key, fingerprint)
        reason = result.reason or "verification failed"
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"could not verify {body.provider}: {reason}")
    log.info("connected %s (connection %s)", saved.provider, saved.id)
    return ConnectionOut.of(saved)


@router.get("", response_model=Page[ConnectionOut])
def list_connections(session: SessionDep, caller: CallerDep, page: PageDep) -> Page[ConnectionOut]:
    """The project's connections, oldest first. A read: it writes nothing (DisconnectWorkflow deletes
    removed ones)."""
    rows, following = KEYSET.fetch(session, select(Connection).where(Connection.project == caller.project),
                                   page)
    return Page(items=[ConnectionOut.of(c) for c in rows], next_cursor=following)


@router.delete("/{connection_id}", status_code=status.HTTP_202_ACCEPTED, response_model=ConnectionRemoval,
               responses={404: {"description": "unknown connection"},
                          503: {"description": "Temporal unreachable"}})
async def delete_connection(connection_id: str, deps: DepsDep, caller: CallerDep) -> ConnectionRemoval:
    """Remove a connection: DisconnectWorkflow terminates its live instances (each verified gone),
    then deletes it. Until then it is listed as `removing` and no new allocation uses it."""
    if await in_thread(_saved, deps, caller.project, connection_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no connection {shown(connection_id)}")
    try:
        # One disconnect per connection: a repeated request joins the running one.
        await deps.workflows.start(wf.DISCONNECT, DisconnectRequest(connection_id=connection_id),
                                   workflow_id=disconnect_workflow_id(connection_id), use_existing=True)
    except WorkflowUnavailable as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    return ConnectionRemoval(id=connection_id, status=ConnectionStatus.REMOVING)

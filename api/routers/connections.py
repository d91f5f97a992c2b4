"""Cloud connections: verified before they count, credentials stored encrypted, never returned."""

from __future__ import annotations

import logging

from fastapi import APIRouter, HTTPException, Response, status
from sqlmodel import select

from api.deps import (
    AppDeps,
    DepsDep,
    SessionDep,
    WorkflowFailed,
    WorkflowUnavailable,
    in_thread,
    open_session,
)
from api.errors import adapter_class
from api.pagination import Keyset, Page, PageDep
from api.schemas import ConnectionCreate, ConnectionOut
from providers.base import InvalidRequest
from store import repo
from store.models import Connection, Instance
from workflows.models import ConnectRequest, ConnectResult, TerminateRequest, terminate_workflow_id

log = logging.getLogger(__name__)
router = APIRouter(prefix="/connections", tags=["connections"])

# A connection whose instances are still being torn down: hidden from planning, deleted once
# nothing it could be billing for remains (the terminate activities still need its credentials).
REMOVING = "removing"

# Oldest first: the order they were made in.
KEYSET = Keyset("connections", Connection.created_at, Connection.id, descending=False)


# --------------------------------------------------------------------------- database work (sync)


def _store_pending(deps: AppDeps, body: ConnectionCreate, credentials: dict[str, object],
                   name: str) -> Connection:
    with open_session(deps) as session:
        # TODO(merge): store/ adds Connection.ca_bundle and this keyword to repo.add_connection.
        return repo.add_connection(session, deps.box, provider=body.provider, name=name,  # type: ignore[call-arg]
                                   credentials=credentials, endpoint=body.endpoint, ca_bundle=body.ca_bundle)


def _saved(deps: AppDeps, connection_id: str) -> Connection | None:
    with open_session(deps) as session:
        return session.get(Connection, connection_id)


def _delete(deps: AppDeps, connection_id: str) -> None:
    with open_session(deps) as session:
        repo.delete_connection(session, connection_id)


def _live(deps: AppDeps, connection_id: str) -> tuple[Connection | None, list[Instance]]:
    with open_session(deps) as session:
        row = repo.get_connection(session, connection_id)
        return row, (repo.live_instances(session, connection_id) if row is not None else [])


def _set_instance_status(deps: AppDeps, instance_id: str, status_: str) -> None:
    with open_session(deps) as session:
        repo.update_instance(session, instance_id, status=status_)


def _mark_removing(deps: AppDeps, row: Connection, live: int) -> None:
    with open_session(deps) as session:
        repo.mark_connection(session, row.id, status=REMOVING, account=row.account,
                             error=f"terminating {live} instance(s) before removal")


# --------------------------------------------------------------------------- routes


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ConnectionOut,
             responses={400: {"description": "verification failed"}, 422: {"description": "bad request"}})
async def create_connection(body: ConnectionCreate, deps: DepsDep) -> ConnectionOut:
    cls = adapter_class(body.provider)
    try:
        # Typed credentials: unknown, missing or mistyped fields are named (never their values).
        credentials = cls.parse_credentials(body.credentials)
    except InvalidRequest as e:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, e.message) from None
    row = await in_thread(_store_pending, deps, body, credentials.reveal(),
                          body.name or cls.capabilities.display_name)
    # ConnectWorkflow's activity decrypts the row, calls verify() and records the outcome.
    try:
        result = await deps.workflows.execute(
            "ConnectWorkflow", ConnectRequest(connection_id=row.id), workflow_id=f"connect-{row.id}",
            execution_timeout_s=deps.connect_timeout_s, result_type=ConnectResult)
    except WorkflowUnavailable as e:
        await in_thread(_delete, deps, row.id)
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    except WorkflowFailed as e:
        await in_thread(_delete, deps, row.id)
        code = status.HTTP_504_GATEWAY_TIMEOUT if e.timed_out else status.HTTP_400_BAD_REQUEST
        raise HTTPException(code, f"could not verify {body.provider}: {e.message}") from None
    saved = await in_thread(_saved, deps, row.id)
    if saved is None or saved.status != "connected":
        reason = (saved.error if saved else None) or getattr(result, "reason", None) or "verification failed"
        await in_thread(_delete, deps, row.id)  # nothing half-saved lingers
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"could not verify {body.provider}: {reason}")
    log.info("connected %s as %s (connection %s)", saved.provider, saved.account, saved.id)
    return ConnectionOut.of(saved)


@router.get("", response_model=Page[ConnectionOut])
def list_connections(session: SessionDep, page: PageDep) -> Page[ConnectionOut]:
    """Connections, oldest first. A read: it writes nothing."""
    # TODO(disconnect workflow): `removing` rows whose instances are all gone used to be purged
    # here; the disconnect workflow will delete the row once teardown is verified.
    rows, following = KEYSET.fetch(session, select(Connection), page)
    return Page(items=[ConnectionOut.of(c) for c in rows], next_cursor=following)


@router.delete("/{connection_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={404: {"description": "unknown connection"}})
async def delete_connection(connection_id: str, deps: DepsDep) -> Response:
    row, live = await in_thread(_live, deps, connection_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no connection {connection_id!r}")
    if not live:
        await in_thread(_delete, deps, connection_id)
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    # Removing a cloud connection terminates its instances: nothing keeps billing unseen.
    for inst in live:
        previous = inst.status
        await in_thread(_set_instance_status, deps, inst.id, "terminating")  # before: it may finish at once
        try:
            await deps.workflows.start("TerminateWorkflow", TerminateRequest(allocation_id=inst.id),
                                       workflow_id=terminate_workflow_id(inst.id), use_existing=True)
        except WorkflowUnavailable as e:
            await in_thread(_set_instance_status, deps, inst.id, previous)
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                f"could not terminate instance {inst.id}: {e}") from None
    await in_thread(_mark_removing, deps, row, len(live))
    return Response(status_code=status.HTTP_204_NO_CONTENT)

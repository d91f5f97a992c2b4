"""Cloud connections: verified before they count, credentials stored encrypted, never returned."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Depends, HTTPException, Response, status
from sqlmodel import Session

from api.deps import AppDeps, WorkflowFailed, WorkflowUnavailable, get_deps, get_session
from api.errors import adapter_class
from api.schemas import ConnectionCreate, ConnectionOut
from store import repo
from store.models import Connection
from workflows.models import ConnectRequest, ConnectResult, TerminateRequest, terminate_workflow_id

log = logging.getLogger(__name__)
router = APIRouter(prefix="/connections", tags=["connections"])

# A connection whose instances are still being torn down: hidden from planning, deleted once
# nothing it could be billing for remains (the terminate activities still need its credentials).
REMOVING = "removing"


def _purge_removed(session: Session) -> None:
    for row in repo.list_connections(session):
        if row.status == REMOVING and not repo.live_instances(session, row.id):
            repo.delete_connection(session, row.id)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ConnectionOut,
             responses={400: {"description": "verification failed"}, 422: {"description": "bad request"}})
async def create_connection(body: ConnectionCreate, deps: AppDeps = Depends(get_deps),  # noqa: B008
                            session: Session = Depends(get_session)) -> ConnectionOut:  # noqa: B008
    cls = adapter_class(body.provider)
    missing = [f for f in cls.credential_fields if not body.credentials.get(f)]
    if missing:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            f"{body.provider} needs credential field(s): {', '.join(missing)}")
    row = repo.add_connection(session, deps.box, provider=body.provider,
                              name=body.name or cls.capabilities.display_name,
                              credentials=body.credentials, endpoint=body.endpoint)
    # ConnectWorkflow's activity decrypts the row, calls verify() and records the outcome.
    try:
        result = await deps.workflows.execute(
            "ConnectWorkflow", ConnectRequest(connection_id=row.id), workflow_id=f"connect-{row.id}",
            execution_timeout_s=deps.connect_timeout_s, result_type=ConnectResult)
    except WorkflowUnavailable as e:
        repo.delete_connection(session, row.id)
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    except WorkflowFailed as e:
        repo.delete_connection(session, row.id)
        code = status.HTTP_504_GATEWAY_TIMEOUT if e.timed_out else status.HTTP_400_BAD_REQUEST
        raise HTTPException(code, f"could not verify {body.provider}: {e.message}") from None
    session.expire_all()
    saved = session.get(Connection, row.id)
    if saved is None or saved.status != "connected":
        reason = (saved.error if saved else None) or getattr(result, "reason", None) or "verification failed"
        repo.delete_connection(session, row.id)  # nothing half-saved lingers
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"could not verify {body.provider}: {reason}")
    log.info("connected %s as %s (connection %s)", saved.provider, saved.account, saved.id)
    return ConnectionOut.of(saved)


@router.get("", response_model=list[ConnectionOut])
def list_connections(session: Session = Depends(get_session)) -> list[ConnectionOut]:  # noqa: B008
    _purge_removed(session)
    return [ConnectionOut.of(c) for c in repo.list_connections(session)]


@router.delete("/{connection_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={404: {"description": "unknown connection"}})
async def delete_connection(connection_id: str, deps: AppDeps = Depends(get_deps),  # noqa: B008
                            session: Session = Depends(get_session)) -> Response:  # noqa: B008
    row = repo.get_connection(session, connection_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no connection {connection_id!r}")
    live = repo.live_instances(session, connection_id)
    if not live:
        repo.delete_connection(session, connection_id)
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    # Removing a cloud connection terminates its instances: nothing keeps billing unseen.
    for inst in live:
        previous = inst.status
        repo.update_instance(session, inst.id, status="terminating")  # before: it may finish at once
        try:
            await deps.workflows.start("TerminateWorkflow", TerminateRequest(allocation_id=inst.id),
                                       workflow_id=terminate_workflow_id(inst.id), use_existing=True)
        except WorkflowUnavailable as e:
            repo.update_instance(session, inst.id, status=previous)
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                                f"could not terminate instance {inst.id}: {e}") from None
    repo.mark_connection(session, connection_id, status=REMOVING, account=row.account,
                         error=f"terminating {len(live)} instance(s) before removal")
    return Response(status_code=status.HTTP_204_NO_CONTENT)

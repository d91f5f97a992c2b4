"""Cloud connections: verified before they count, credentials stored encrypted, never returned."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from cryptography import x509
from fastapi import APIRouter, HTTPException, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, field_validator
from sqlmodel import select

from api import idempotency as idem
from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, SessionDep, in_thread, open_session
from api.errors import adapter_class, shown
from api.fields import CloudId, Name, Printable, Strict, Timestamp, aware
from api.pagination import Keyset, Page, PageDep
from api.shared_bodies import ConnectionRemoval
from api.strict_json import loc_part
from api.temporal import WorkflowFailed, WorkflowUnavailable
from messages import workflows as wf
from messages.connection import ConnectRequest, DisconnectRequest
from messages.enums import ConnectionStatus
from messages.ids import connect_workflow_id, disconnect_workflow_id
from providers import endpoints
from providers.base import ConnectionOptions, InvalidRequest
from store import ids
from store.models import Connection

MAX_CA_BUNDLE = 64_000  # characters of PEM: a private CA chain, not a system trust store
CredentialName = Annotated[str, Field(min_length=1, max_length=100), Printable]
MAX_CREDENTIAL_VALUE = 64_000


class ConnectionCreate(Strict):
    provider: CloudId
    name: Name | None = None
    credentials: dict[CredentialName, Any] = Field(
        default_factory=dict, max_length=50,
        description="fields of the cloud's credential form (GET /api/compute/clouds)")
    endpoint: Annotated[str, Field(max_length=2000, description=(
        "API base URL: https on one of the cloud's documented API hosts, or under a prefix the "
        "administrator allows (GPUPROV_ALLOWED_ENDPOINTS); no user:pass@, query or fragment"))] | None = None
    ca_bundle: Annotated[str, Field(min_length=1, max_length=MAX_CA_BUNDLE)] | None = Field(
        None, description="PEM certificates to trust for the endpoint, besides the system's")

    @field_validator("credentials")
    @classmethod
    def _scalar_values(cls, credentials: dict[str, Any]) -> dict[str, Any]:
        """The cloud's credentials model (providers/credentials.py) decides names and types when the
        request is handled; here only the shape and size, naming the field and never its value."""
        for key, value in credentials.items():
            name = loc_part(key)
            if not isinstance(value, str | bool | int | float):
                raise ValueError(f"credentials.{name} must be a string, a number or true/false")
            if isinstance(value, str) and len(value) > MAX_CREDENTIAL_VALUE:
                raise ValueError(f"credentials.{name} is longer than {MAX_CREDENTIAL_VALUE} characters")
        return credentials

    @field_validator("endpoint")
    @classmethod
    def _endpoint_shape(cls, url: str | None) -> str | None:
        """The rules of every endpoint; which hosts are allowed is the route's check (it needs the
        administrator's setting), done again wherever an adapter is built."""
        if url is not None:
            try:
                endpoints.parse(url)
            except endpoints.EndpointError as e:
                raise ValueError(f"endpoint {e}") from None
        return url

    @field_validator("ca_bundle")
    @classmethod
    def _pem_certificates(cls, pem: str | None) -> str | None:
        if pem is None:
            return None
        try:
            x509.load_pem_x509_certificates(pem.encode())
        except ValueError:
            raise ValueError("ca_bundle is not PEM certificates (-----BEGIN CERTIFICATE----- ...)") from None
        return pem.strip() + "\n"


class ConnectionOut(BaseModel):
    """A connection as shown to users: never its credentials."""

    id: str
    project: str
    provider: str
    name: str
    account: str | None
    status: str
    endpoint: str | None
    has_ca_bundle: bool = False
    error: str | None = None
    created_at: Timestamp | None

    @classmethod
    def of(cls, row: Connection) -> ConnectionOut:
        return cls(id=row.id, project=row.project, provider=row.provider, name=row.name, account=row.account,
                   status=row.status,
                   endpoint=row.endpoint, has_ca_bundle=bool(row.ca_bundle),
                   error=row.error, created_at=aware(row.created_at))

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
        connection_id = ids.new_id()
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

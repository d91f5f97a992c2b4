"""Connection activities: verify sealed credentials, save a verified connection, and the two
steps of removing one (mark it and list what is live; delete it once nothing is)."""

from __future__ import annotations

from datetime import timedelta

from sqlmodel import col, select
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities import metrics
from activities.deps import ActivityDeps, heartbeating
from activities.watch import start_watch
from messages import activities as acts
from messages import workflows as wf
from messages.activities import ConnectionIdInput, LiveAllocation, LiveAllocations, TerminateAllocationInput
from messages.connection import ConnectRequest, ConnectResult
from messages.enums import ConnectionStatus, ErrorKind
from messages.health import HealthInput
from messages.ids import connection_health_workflow_id
from providers import registry
from providers.base import ProviderError
from store import connections, instances
from store.db import session_scope
from store.models import Connection, Instance
from store.secrets import SecretError
from workflows import client_calls


class ConnectionActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=acts.VERIFY_CREDENTIALS.name)
    async def verify_credentials(self, req: ConnectRequest) -> ConnectResult:
        """Open the sealed credentials, call the cloud's verify(): ok with the account identity,
        or not ok with the cloud's reason. Transient failures raise (Temporal retries them)."""
        try:
            credentials = self.deps.box.open(req.sealed_credentials.encode())
        except SecretError as e:
            raise ApplicationError(str(e), type=ErrorKind.SECRET_ERROR, non_retryable=True) from None
        try:
            # Measured as every other cloud call of the worker (activities/metrics.py: calls,
            # errors by kind, latency of `verify`).
            adapter = metrics.instrument(registry.build(req.provider, credentials, options=req.options,
                                                        installation_id=self.deps.installation_id,
                                                        allowed_endpoints=self.deps.allowed_endpoints))
        except ProviderError as e:
            return ConnectResult(connection_id=req.connection_id, ok=False, reason=e.message)
        try:
            account = await adapter.verify()
        except ProviderError as e:
            if e.retryable:
                raise ApplicationError(e.message, type=ErrorKind(e.kind)) from None
            return ConnectResult(connection_id=req.connection_id, ok=False, reason=e.message)
        finally:
            await adapter.aclose()  # a one-off adapter; the worker's cache builds its own
        return ConnectResult(connection_id=req.connection_id, ok=True, account=account)

    @activity.defn(name=acts.SAVE_CONNECTION.name)
    def save_connection(self, req: ConnectRequest) -> None:
        """Insert the verified connection (the secret stays sealed as it came). Idempotent."""
        with session_scope(self.deps.engine) as session:
            connections.save_connection(session, connection_id=req.connection_id, provider=req.provider,
                                        name=req.name,
                                        secret=req.sealed_credentials.encode(), endpoint=req.options.endpoint,
                                        ca_bundle=req.options.ca_bundle, account=req.account,
                                        project=req.project)

    @activity.defn(name=acts.START_WATCH.name)
    async def start_watch(self, inp: ConnectionIdInput) -> None:
        """The new connection's watch (it ends by itself once the connection is removed), and its
        first health check: a one-off HealthWorkflow of this connection alone, so it reads healthy
        or degraded within seconds of being saved, not `pending` until the Schedule's next run."""
        assert self.deps.client is not None, "ActivityDeps.client is set by build_worker"
        task_queue = activity.info().task_queue
        await start_watch(self.deps.client, task_queue, inp.connection_id, self.deps.watch_interval_s)
        # A retry of this activity joins the check already started (one per connection).
        await client_calls.start(
            self.deps.client, wf.HEALTH, HealthInput(connection_ids=[inp.connection_id], fleet_ids=[]),
            workflow_id=connection_health_workflow_id(inp.connection_id), task_queue=task_queue,
            use_existing=True, execution_timeout=timedelta(minutes=5))

    @activity.defn(name=acts.BEGIN_DISCONNECT.name)
    def begin_disconnect(self, inp: ConnectionIdInput) -> LiveAllocations:
        """Mark the connection `removing` (no new allocation plans on it) and list its live allocations."""
        with session_scope(self.deps.engine) as session:
            row = session.get(Connection, inp.connection_id)
            if row is None:
                return LiveAllocations(allocations=[])
            live = instances.live_instances(session, inp.connection_id)
            why = f"terminating {len(live)} instance(s) before removal" if live else None
            connections.mark_connection(session, row.id, status=ConnectionStatus.REMOVING,
                                        account=row.account, error=why)
            return LiveAllocations(allocations=[LiveAllocation(allocation_id=i.id, workflow_id=i.workflow_id)
                                                for i in live])

    @activity.defn(name=acts.TERMINATE_ALLOCATION.name)
    async def terminate_allocation(self, inp: TerminateAllocationInput) -> None:
        """The allocation's `terminate` update, waited for: it returns once the cloud shows the
        machine gone. A closed workflow has nothing left to terminate."""
        if self.deps.client is None:
            raise RuntimeError("ActivityDeps.client is required for terminate_allocation")
        try:
            ending = client_calls.update(self.deps.client, inp.workflow_id, wf.ALLOCATION.terminate)
            await heartbeating(ending, inp.heartbeat_every_s, "terminating")
        except RPCError as e:
            # NOT_FOUND: it had closed. An update in flight as the workflow closes is answered
            # "workflow update was aborted" (UNAVAILABLE) instead: closed is closed; if it is still
            # open, the error stands and the attempt is retried.
            if e.status != RPCStatusCode.NOT_FOUND and not await self._closed(inp.workflow_id):
                raise

    async def _closed(self, workflow_id: str) -> bool:
        """Whether the workflow has closed (or is gone); False when that cannot be told now."""
        assert self.deps.client is not None
        try:
            return await client_calls.status(self.deps.client, workflow_id) != WorkflowExecutionStatus.RUNNING
        except RPCError:
            return False

    @activity.defn(name=acts.DELETE_CONNECTION.name)
    def delete_connection(self, inp: ConnectionIdInput) -> None:
        """Delete the row once no allocation on it is live (its history rows stay)."""
        with session_scope(self.deps.engine) as session:
            live = session.exec(select(Instance.id).where(
                Instance.connection_id == inp.connection_id,
                col(Instance.status).in_(instances.LIVE_STATUSES))).first()
            if live is not None:
                raise ApplicationError(f"allocation {live} on connection {inp.connection_id} is still live",
                                       type=ErrorKind.TRANSIENT)
            connections.delete_connection(session, inp.connection_id)

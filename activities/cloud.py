"""Cloud activities: thin wrappers around one adapter call each, by connection id."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.deps import ActivityDeps, heartbeating
from activities.errors import provider_errors, to_application_error
from activities.io import (
    CloudTarget,
    ConnectionIdInput,
    CreateInput,
    PlanInput,
    TerminateInput,
    ValidateInput,
    WaitRunningInput,
)
from providers import registry
from providers.base import (
    AuthError,
    Capabilities,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchRequirements,
    Offer,
    Ownership,
    ProviderError,
    Unsupported,
    rank_offers,
)
from store.db import session_scope
from store.models import Connection
from workflows.models import ConnectResult

# Re-issue the delete every this many polls while the cloud still shows the machine alive.
_TERMINATE_REISSUE_POLLS = 10


class CloudActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name="validate_request")
    def validate_request(self, inp: ValidateInput) -> Capabilities:
        """Refuse what this cloud cannot do, with its reason, before any planning."""
        req = inp.request
        with provider_errors():
            caps = registry.capabilities(req.cloud)
        conn = self.deps.load_connection(req.connection_id)
        if conn.provider != req.cloud:
            raise ApplicationError(f"connection {conn.id!r} is for {conn.provider!r}, not {req.cloud!r}",
                                   type="InvalidRequest", non_retryable=True)
        if conn.status == "failed":
            raise ApplicationError(f"connection {conn.id!r} failed verification: {conn.error}",
                                   type="AuthError", non_retryable=True)
        with provider_errors():
            caps.check(LaunchRequirements(spot=req.spot, ports=req.ports, image=req.image,
                                          region=req.region, k3s=req.k3s))
        return caps

    @activity.defn(name="plan_offers")
    async def plan_offers(self, inp: PlanInput) -> list[Offer]:
        with provider_errors():
            async with self.deps.provider(inp.target) as p:
                return rank_offers(await p.offers(inp.query), inp.query)

    @activity.defn(name="create_instance")
    async def create_instance(self, inp: CreateInput) -> InstanceRef:
        """Find-or-create by key. The installation's key is always added so gpuprov can log in."""
        public = await self.deps.blocking(self.deps.public_key)
        spec = inp.spec.model_copy(update={
            # first: some clouds (Lambda) take one key natively and the rest via cloud-init
            "ssh_public_keys": [public, *(k for k in inp.spec.ssh_public_keys if k != public)],
            # the owner tag must be the one list_owned() filters on: this worker's installation
            "owner": Ownership(installation_id=self.deps.installation_id,
                               allocation_id=inp.spec.owner.allocation_id),
        })
        with provider_errors():
            async with self.deps.provider(inp.target) as p:
                return await heartbeating(p.create(inp.offer, spec), inp.heartbeat_every_s,
                                          f"creating {spec.key}")

    @activity.defn(name="wait_running")
    async def wait_running(self, inp: WaitRunningInput) -> InstanceStatus:
        with provider_errors():
            async with self.deps.provider(inp.target) as p:
                while True:
                    # heartbeats continue while a slow cloud answers the get
                    st = await heartbeating(p.get(inp.ref), inp.heartbeat_every_s, "waiting for running")
                    if st is None or st.state in (InstanceState.TERMINATED, InstanceState.TERMINATING):
                        raise ApplicationError(f"instance {inp.ref.instance_id} disappeared while booting",
                                               type="InstanceGone", non_retryable=True)
                    if st.state == InstanceState.ERROR:
                        raise ApplicationError(
                            f"instance {inp.ref.instance_id} failed: {st.detail or 'error'}",
                            type="InstanceFailed", non_retryable=True)
                    if st.state == InstanceState.RUNNING and st.host:
                        return st
                    await asyncio.sleep(inp.poll_interval_s)

    @activity.defn(name="terminate_and_verify")
    async def terminate_and_verify(self, inp: TerminateInput) -> None:
        """Terminate by ref, or by key when the create answer was lost; return once the
        provider shows the machine gone (not when the delete was accepted)."""
        with provider_errors():
            async with self.deps.provider(inp.target) as p:
                activity.heartbeat("finding")
                ref = inp.ref or await p.find(inp.key)
                if ref is None:
                    return  # nothing was ever made under this key
                polls = 0
                while True:
                    if polls % _TERMINATE_REISSUE_POLLS == 0:
                        await p.terminate(ref)
                    st = await heartbeating(p.get(ref), inp.heartbeat_every_s, "waiting for gone")
                    if st is None or st.state == InstanceState.TERMINATED:
                        return
                    polls += 1
                    await asyncio.sleep(inp.poll_interval_s)

    @activity.defn(name="verify_connection")
    async def verify_connection(self, inp: ConnectionIdInput) -> ConnectResult:
        """Check the credentials; record connected + account, or failed + reason."""
        conn = await self.deps.blocking(self.deps.load_connection, inp.connection_id)
        try:
            async with self.deps.provider(CloudTarget(connection_id=conn.id, cloud=conn.provider)) as p:
                account = await p.verify()
        except (AuthError, InvalidRequest, Unsupported) as e:
            return await self.deps.blocking(self._record_connection, conn.id, ok=False, reason=e.message)
        except ApplicationError as e:
            if e.non_retryable:
                return await self.deps.blocking(self._record_connection, conn.id, ok=False, reason=e.message)
            raise
        except ProviderError as e:
            raise to_application_error(e) from None
        return await self.deps.blocking(self._record_connection, conn.id, ok=True, account=account)

    @activity.defn(name="mark_connection_failed")
    def mark_connection_failed(self, inp: ConnectionIdInput) -> ConnectResult:
        reason = inp.reason or "verification failed"
        return self._record_connection(inp.connection_id, ok=False, reason=reason)

    def _record_connection(self, connection_id: str, *, ok: bool, account: str | None = None,
                           reason: str | None = None) -> ConnectResult:
        with session_scope(self.deps.engine) as session:
            row = session.get(Connection, connection_id)
            if row is not None:
                row.status = "connected" if ok else "failed"
                row.account = account if ok else row.account
                row.error = None if ok else reason
                session.add(row)
                session.commit()
        return ConnectResult(connection_id=connection_id, ok=ok, account=account, reason=reason)

"""Cloud activities: thin wrappers around one adapter call each, by connection id."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.deps import ActivityDeps, heartbeating
from activities.errors import provider_errors
from messages import activities as acts
from messages.activities import CreateInput, PlanInput, TerminateInput, ValidateInput, WaitRunningInput
from messages.enums import ConnectionStatus, ErrorKind
from providers import registry
from providers.base import (
    Capabilities,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    LaunchRequirements,
    LaunchSpec,
    Offer,
    Ownership,
    rank_offers,
)

# Re-issue the delete every this many polls while the cloud still shows the machine alive.
_TERMINATE_REISSUE_POLLS = 10


class CloudActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=acts.VALIDATE_REQUEST.name)
    def validate_request(self, inp: ValidateInput) -> Capabilities:
        """Refuse what this cloud cannot do, with its reason, before any planning."""
        req = inp.request
        with provider_errors():
            caps = registry.capabilities(req.cloud)
        conn = self.deps.load_connection(req.connection_id)
        if conn.provider != req.cloud:
            raise ApplicationError(f"connection {conn.id!r} is for {conn.provider!r}, not {req.cloud!r}",
                                   type=ErrorKind.INVALID_REQUEST, non_retryable=True)
        if conn.status == ConnectionStatus.REMOVING:
            raise ApplicationError(f"connection {conn.id!r} is being removed", type=ErrorKind.INVALID_REQUEST,
                                   non_retryable=True)
        with provider_errors():
            caps.check(LaunchRequirements(spot=req.spot, ports=req.ports, image=req.image,
                                          region=req.region, k3s=req.k3s))
        return caps

    @activity.defn(name=acts.PLAN_OFFERS.name)
    async def plan_offers(self, inp: PlanInput) -> list[Offer]:
        with provider_errors():
            p = await self.deps.provider(inp.target)
            offers = await heartbeating(p.offers(inp.query), 1.0, "listing offers")
            return rank_offers(offers, inp.query)

    @activity.defn(name=acts.CREATE_INSTANCE.name)
    async def create_instance(self, inp: CreateInput) -> InstanceRef:
        """Find-or-create by key. The installation's key is always added so gpuprov can log in,
        and the owner tag is this deployment's installation id."""
        public = await self.deps.blocking(self.deps.public_key)
        spec = LaunchSpec(
            key=inp.key,
            owner=Ownership(installation_id=self.deps.installation_id, allocation_id=inp.allocation_id),
            # first: some clouds (Lambda) take one key natively and the rest via cloud-init
            ssh_public_keys=[public, *(k for k in inp.ssh_public_keys if k != public)],
            image=inp.image, ports=inp.ports)
        with provider_errors():
            p = await self.deps.provider(inp.target)
            await heartbeating(p.prepare(inp.offer.region), inp.heartbeat_every_s, "preparing region")
            return await heartbeating(p.create(inp.offer, spec), inp.heartbeat_every_s,
                                      f"creating {spec.key}")

    @activity.defn(name=acts.WAIT_RUNNING.name)
    async def wait_running(self, inp: WaitRunningInput) -> InstanceStatus:
        with provider_errors():
            p = await self.deps.provider(inp.target)
            while True:
                # heartbeats continue while a slow cloud answers the get
                st = await heartbeating(p.get(inp.ref), inp.heartbeat_every_s, "waiting for running")
                if st is None or st.state in (InstanceState.TERMINATED, InstanceState.TERMINATING):
                    raise ApplicationError(f"instance {inp.ref.instance_id} disappeared while booting",
                                           type=ErrorKind.INSTANCE_GONE, non_retryable=True)
                if st.state == InstanceState.ERROR:
                    raise ApplicationError(f"instance {inp.ref.instance_id} failed: {st.detail or 'error'}",
                                           type=ErrorKind.INSTANCE_FAILED, non_retryable=True)
                if st.state == InstanceState.RUNNING and st.host:
                    return st
                await asyncio.sleep(inp.poll_interval_s)

    @activity.defn(name=acts.TERMINATE_AND_VERIFY.name)
    async def terminate_and_verify(self, inp: TerminateInput) -> None:
        """Terminate by ref, or by key when the create answer was lost; return once the
        provider shows the machine gone (not when the delete was accepted)."""
        with provider_errors():
            p = await self.deps.provider(inp.target)
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

"""The acceptance suite's activities (workflows/acceptance.py): what a run needs beyond the
allocation's own — the plan (credentials, the offer, the adapter's version, the account's kind), a
look at the machine over SSH, an allocation's phase, the cloud's listing of a run's keys, the record."""

from __future__ import annotations

import asyncio
import hashlib
import time

from temporalio import activity

from activities import machine_ssh
from activities.deps import ActivityDeps, heartbeating
from activities.errors import provider_errors, to_application_error
from messages import activities as acts
from messages import workflows as wf
from messages.acceptance import (
    AcceptancePlan,
    AllocationPhaseInput,
    Leftover,
    Leftovers,
    LeftoversInput,
    MachineCheck,
    MachineCheckInput,
    PlanAcceptanceInput,
    RecordAcceptanceInput,
)
from messages.allocation import AllocationState, CloudTarget
from messages.enums import Phase
from messages.ids import allocation_of_key
from providers import registry, support
from providers.base import OfferQuery, ProviderError
from store import acceptance_runs
from store.db import session_scope
from workflows import client_calls

ENDED = {Phase.READY, Phase.FAILED, Phase.TERMINATED, Phase.LOST}
NVIDIA_SMI_NAMES = "nvidia-smi --query-gpu=name --format=csv,noheader"
K3S_NODES = "k3s kubectl get nodes --no-headers"
# k3s registers the `nvidia` RuntimeClass when it finds the NVIDIA container runtime on the node:
# pods can then be given the GPU.
K3S_GPU_RUNTIME = "k3s kubectl get runtimeclass nvidia -o name"


def fingerprint(account: str) -> str:
    """A short hash naming the account, never the account itself (nor any credential)."""
    return hashlib.sha256(account.encode()).hexdigest()[:16]


class AcceptanceActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    @activity.defn(name=acts.PLAN_ACCEPTANCE.name)
    async def plan_acceptance(self, inp: PlanAcceptanceInput) -> AcceptancePlan:
        """The credentials checked and the cheapest on-demand offer that fits, priced against the
        run's ceiling. A refusal is the step's answer, not an activity failure: the run records it."""
        row = await self.deps.blocking(self.deps.load_connection, inp.connection_id)
        caps = registry.adapter_class(inp.cloud).capabilities
        plan = AcceptancePlan(adapter_version=support.adapter_version(inp.cloud),
                              account=support.account_kind_of(inp.cloud, row.endpoint),
                              k3s_reason=(caps.k3s_reason or f"{caps.display_name} cannot host k3s")
                              if caps.k3s == "none" else None)
        p = await self.deps.provider(CloudTarget(connection_id=inp.connection_id, cloud=inp.cloud))
        try:
            account = await heartbeating(p.verify(), 5.0, "verifying")
        except ProviderError as e:
            if e.retryable:  # the cloud unreachable for now: the activity's retries
                raise to_application_error(e) from None
            return plan.model_copy(update={"connect_error": f"{type(e).__name__}: {e.message}"})
        plan = plan.model_copy(update={"account_fingerprint": fingerprint(account)})
        try:
            query = OfferQuery(gpu=inp.gpu, region=inp.region, instance_type=inp.instance_type, spot=False)
            offers = [o for o in await heartbeating(p.offers(query), 5.0, "offers") if query.matches(o)]
        except ProviderError as e:
            if e.retryable:
                raise to_application_error(e) from None
            return plan.model_copy(update={"offer_error": f"the cloud's offers: {e.message}"})
        if not offers:
            asked = ", ".join(f"{k} {v}" for k, v in (("GPU", inp.gpu), ("instance type", inp.instance_type),
                                                      ("region", inp.region)) if v) or "anything"
            return plan.model_copy(update={"offer_error": f"no on-demand offer available for {asked}"})
        offer = min(offers, key=lambda o: o.price_per_hour)
        plan = plan.model_copy(update={
            "instance_type": offer.instance_type, "region": offer.region,
            "price_per_hour": offer.price_per_hour,
            "gpu": offer.gpu.name if offer.gpu else None, "gpu_count": offer.gpu.count if offer.gpu else 0})
        if offer.price_per_hour > inp.max_usd:
            return plan.model_copy(update={"offer_error": (
                f"the cheapest offer, {offer.instance_type} at ${offer.price_per_hour:g}/h, costs more than "
                f"the run's ceiling of ${inp.max_usd:g}: nothing was created")})
        return plan

    @activity.defn(name=acts.CHECK_MACHINE.name)
    async def check_machine(self, inp: MachineCheckInput) -> MachineCheck:
        """Log in as the allocation's user (its host key pinned at the first login) and look."""
        r = await machine_ssh.route(self.deps, inp.host, allocation_id=inp.allocation_id)
        async with machine_ssh.connect(self.deps, inp.host, inp.port, inp.user, r, 10) as conn:
            # The login itself is the check of the user: the cloud's documented one, authenticated
            # with the installation's key, on the host key pinned at the allocation's first login.
            smi = await conn.run(NVIDIA_SMI_NAMES, check=False)
            gpus = [line.strip() for line in str(smi.stdout or "").splitlines() if line.strip()] \
                if smi.exit_status == 0 else []
            seen = MachineCheck(user=inp.user, gpus=gpus)
            if not inp.k3s:
                return seen
            nodes = await conn.run(K3S_NODES, check=False)
            lines = [ln.split() for ln in str(nodes.stdout or "").splitlines() if ln.strip()]
            ready = nodes.exit_status == 0 and any(len(f) > 1 and f[1] == "Ready" for f in lines)
            runtime = await conn.run(K3S_GPU_RUNTIME, check=False)
            detail = "" if ready else str(nodes.stderr or nodes.stdout or "")[-300:].strip()
            return seen.model_copy(update={"k3s_ready": ready, "k3s_gpu_runtime": runtime.exit_status == 0,
                                           "detail": detail})

    @activity.defn(name=acts.AWAIT_ALLOCATION_PHASE.name)
    async def await_allocation_phase(self, inp: AllocationPhaseInput) -> AllocationState:
        """The allocation's state once its phase is one of `inp.phases`, or it is ready or ended
        (its `state` query, polled: the phases in between last too briefly for a long poll)."""
        assert self.deps.client is not None, "ActivityDeps.client is required"
        wanted = set(inp.phases)
        last = time.monotonic()
        while True:
            st = await client_calls.query(self.deps.client, inp.workflow_id, wf.ALLOCATION.state)
            if st.phase.value in wanted or st.phase in ENDED:
                return st
            if time.monotonic() - last >= inp.heartbeat_every_s:
                activity.heartbeat(st.phase.value)
                last = time.monotonic()
            await asyncio.sleep(inp.poll_interval_s)

    @activity.defn(name=acts.LEFTOVERS.name)
    async def leftovers(self, inp: LeftoversInput) -> Leftovers:
        """What the cloud's own listing still holds of the allocations' keys (machines and side
        resources), read until it holds nothing or `settle_s` has passed (a delete the cloud does
        asynchronously shows for a while)."""
        ids = set(inp.allocation_ids)
        deadline = time.monotonic() + inp.settle_s
        with provider_errors():
            p = await self.deps.provider(CloudTarget(connection_id=inp.connection_id, cloud=inp.cloud))
            while True:
                refs = await heartbeating(p.list_owned(), inp.heartbeat_every_s, "listing")
                left = [Leftover(key=r.key, kind=r.kind, cloud_id=r.instance_id)
                        for r in refs if allocation_of_key(r.key) in ids]
                if not left or time.monotonic() >= deadline:
                    return Leftovers(items=left)
                activity.heartbeat(f"{len(left)} left")
                await asyncio.sleep(inp.poll_interval_s)

    @activity.defn(name=acts.RECORD_ACCEPTANCE.name)
    def record_acceptance(self, inp: RecordAcceptanceInput) -> None:
        with session_scope(self.deps.engine) as session:
            acceptance_runs.save(session, inp)

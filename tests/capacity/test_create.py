"""create_instance on the simulated Lambda: a capacity refusal (its offers still show stock) is
remembered with the scope Lambda names (its region and type) on the offer's connection and raised
unchanged; the next create there that works clears it. A first create launches without looking its
key up (no send recorded under it); its retry looks it up and finds the machine."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.cloud import CloudActivities
from activities.deps import ActivityDeps
from fakeclouds.server import FakeCloudServer
from messages.activities import CreateInput, TerminateInput
from messages.allocation import CloudTarget
from messages.enums import ErrorKind
from providers.base import Offer, OfferQuery
from store import capacity
from store.models import CapacityRefusal, utcnow
from store.secrets import SecretBox
from tests import simclouds
from tests.lambda_.conftest import PUBLIC

LAUNCH, LISTING = "POST /instance-operations/launch", "GET /instances"  # as the simulation counts them


def remembered(engine: sa.Engine, connection_id: str) -> list[CapacityRefusal]:
    with Session(engine) as s:
        return capacity.live_refusals(s, [connection_id], utcnow())


async def a10(sim: FakeCloudServer, connection_id: str) -> Offer:
    p = simclouds.provider(sim, "lambda", installation_id="capmem01")
    async with p:
        listed = await p.offers(OfferQuery(region="us-east-1"))
    [offer] = [o for o in listed if o.instance_type == "gpu_1x_a10"]
    return offer.model_copy(update={"connection_id": connection_id})


@pytest.mark.parametrize("memory", [True, False])
async def test_a_refused_create_is_remembered_with_its_scope_and_a_success_clears_it(
        engine: sa.Engine, box: SecretBox, deps: ActivityDeps, sim: FakeCloudServer, memory: bool) -> None:
    deps.capacity_memory = memory
    with Session(engine) as s:
        connection = simclouds.add_connection(s, box, sim, "lambda")
    offer = await a10(sim, connection)
    assert offer.available  # the listing shows stock; the create is what refuses
    env, acts = ActivityEnvironment(), CloudActivities(deps)
    target = CloudTarget(connection_id=connection, cloud="lambda")

    def create(key: str) -> CreateInput:
        return CreateInput(target=target, offer=offer, key=key, allocation_id="capmem-a1",
                           ssh_public_keys=[PUBLIC], heartbeat_every_s=0.2, poll_interval_s=0.05)

    sim.admin.add_fault("lambda", "create", "capacity", region="us-east-1")
    with pytest.raises(ApplicationError) as refused:
        await env.run(acts.create_instance, create("capmem-a1-1"))
    assert refused.value.type == ErrorKind.CAPACITY and "insufficient-capacity" in refused.value.message
    rows = remembered(engine, connection)
    if not memory:
        assert rows == []
        return
    [row] = rows
    assert (row.provider, row.connection_id, row.region, row.zone, row.instance_type) == (
        "lambda", connection, "us-east-1", None, "gpu_1x_a10")
    assert (row.kind, row.refusals) == ("capacity", 1)
    assert "insufficient-capacity" in row.reason

    ref = await env.run(acts.create_instance, create("capmem-a1-2"))
    try:
        assert remembered(engine, connection) == []
    finally:
        await env.run(acts.terminate_and_verify, TerminateInput(
            target=target, key="capmem-a1-2", ref=ref, poll_interval_s=0.05, heartbeat_every_s=0.2))


async def test_a_first_create_looks_nothing_up_and_its_retry_finds_the_machine(
        engine: sa.Engine, box: SecretBox, deps: ActivityDeps, sim: FakeCloudServer) -> None:
    """Lambda has no idempotency token: a create looks its name up before launching, a whole listing
    of the account's machines on a key paced at one request a second. The create ledger says when
    nothing was ever sent under the key (LaunchSpec.unsent), and then there is nothing to find."""
    with Session(engine) as s:
        connection = simclouds.add_connection(s, box, sim, "lambda")
    offer = await a10(sim, connection)
    env, acts = ActivityEnvironment(), CloudActivities(deps)
    target = CloudTarget(connection_id=connection, cloud="lambda")
    inp = CreateInput(target=target, offer=offer, key="first-a1-1", allocation_id="first-a1",
                      ssh_public_keys=[PUBLIC], heartbeat_every_s=0.2, poll_interval_s=0.05)

    sim.admin.clear_calls()
    ref = await env.run(acts.create_instance, inp)
    calls = sim.admin.call_counts()["lambda"]
    assert calls.get(LAUNCH) == 1 and LISTING not in calls, calls
    try:
        # Retried (its answer came, the activity's completion did not): the ledger holds the send,
        # so the key is looked up and the machine found — not launched again.
        sim.admin.clear_calls()
        again = await env.run(acts.create_instance, inp)
        calls = sim.admin.call_counts()["lambda"]
        assert again.instance_id == ref.instance_id
        assert calls.get(LISTING, 0) >= 1 and LAUNCH not in calls, calls
    finally:
        await env.run(acts.terminate_and_verify, TerminateInput(
            target=target, key="first-a1-1", ref=ref, poll_interval_s=0.05, heartbeat_every_s=0.2))


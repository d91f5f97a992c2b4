"""The spend ledger as the allocation workflow writes it: the create activity opens the attempt's
interval at the offer's price, a verified teardown closes it, and retried activities neither open a
second interval nor move the first one's start or end."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import Session
from temporalio.client import Client, WorkflowFailureError
from temporalio.testing import ActivityEnvironment

from activities.cloud import CloudActivities, open_spend
from activities.deps import ActivityDeps
from messages import workflows as wf
from messages.activities import CreateInput, TerminateInput
from messages.allocation import CloudTarget, MachineLost
from messages.enums import Phase
from messages.ids import attempt_key
from providers.base import InstanceRef
from store import spend
from store.models import SpendInterval, utcnow
from tests.fakes import FAKE_OFFERS, FakeCloud
from tests.workflows.conftest import FAST, USER_KEY, settled, start_allocate, terminate


def intervals(engine: sa.Engine, allocation_id: str) -> list[SpendInterval]:
    with Session(engine) as s:
        return list(spend.intervals_of(s, allocation_id))


def aware(t: datetime | None) -> datetime | None:
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=UTC)


async def test_an_allocation_opens_an_interval_at_the_offer_price_and_terminate_closes_it(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine,
        activity_deps: ActivityDeps, fake_connection: str) -> None:
    req = make_request(gpu="a10")
    before = utcnow()
    st = await settled(await start_allocate(temporal_client, req))
    assert st.offer is not None and st.ref is not None
    [iv] = intervals(db_engine, req.allocation_id)
    assert (iv.key, iv.rate_per_hour, iv.provider, iv.connection_id, iv.project, iv.job_type) == (
        attempt_key(req.allocation_id, 1), st.offer.price_per_hour, "fake", fake_connection, "default",
        "manual")
    assert st.offer.price_per_hour == 0.5  # gpu.1x in r1, the cheapest A10
    started = aware(iv.started_at)
    assert started is not None and before <= started <= utcnow() and iv.ended_at is None

    # The create activity retried (a worker died before its answer reached the workflow): it finds the
    # machine by key and leaves the interval as it was.
    env, cloud_acts = ActivityEnvironment(), CloudActivities(activity_deps)
    target = CloudTarget(connection_id=fake_connection, cloud="fake")
    again = await env.run(cloud_acts.create_instance, CreateInput(
        target=target, offer=st.offer, key=iv.key, allocation_id=req.allocation_id,
        ssh_public_keys=[USER_KEY], heartbeat_every_s=0.2))
    assert again.instance_id == st.ref.instance_id
    [same] = intervals(db_engine, req.allocation_id)
    assert (same.id, aware(same.started_at), same.ended_at) == (iv.id, started, None)

    await terminate(temporal_client, req.allocation_id)
    [closed] = intervals(db_engine, req.allocation_id)
    ended = aware(closed.ended_at)
    assert ended is not None and started <= ended <= utcnow()

    # The terminate retried: the machine is gone already, the end stays where it was.
    await env.run(cloud_acts.terminate_and_verify, TerminateInput(
        target=target, key=iv.key, ref=st.ref, poll_interval_s=0.1, heartbeat_every_s=0.2))
    [after] = intervals(db_engine, req.allocation_id)
    assert (after.id, aware(after.started_at), aware(after.ended_at)) == (iv.id, started, ended)


async def test_failover_opens_only_the_created_attempt_at_its_own_price(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    fake_cloud.add_fault("create", "capacity", scope="fake/r1")
    req = make_request(gpu="a10")
    st = await settled(await start_allocate(temporal_client, req))
    [iv] = intervals(db_engine, req.allocation_id)  # the refused create cost nothing
    assert (iv.key, iv.rate_per_hour, iv.ended_at) == (attempt_key(req.allocation_id, 2), 0.6, None)
    await terminate(temporal_client, req.allocation_id)
    assert intervals(db_engine, req.allocation_id)[0].ended_at is not None
    assert st.attempts[-1].offer.price_per_hour == 0.6


async def test_compensation_closes_the_interval_of_the_machine_it_tears_down(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    fake_cloud.add_fault("create", "die_at_boot")
    req = make_request()
    with pytest.raises(WorkflowFailureError):
        await settled(await start_allocate(temporal_client, req))
    [iv] = intervals(db_engine, req.allocation_id)
    assert iv.rate_per_hour == 0.05 and iv.ended_at is not None
    assert aware(iv.ended_at) >= aware(iv.started_at)  # type: ignore[operator]


async def test_a_lost_create_answer_opens_one_interval_from_the_clouds_creation_time(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    fake_cloud.add_fault("create", "lose_response")
    req = make_request()
    await settled(await start_allocate(temporal_client, req))
    assert fake_cloud.create_calls == 2  # the retry found the machine
    [iv] = intervals(db_engine, req.allocation_id)
    assert iv.ended_at is None
    # It accrues from the cloud's own creation time (the lost create), not from when the retry found
    # it a retry interval later.
    [machine] = fake_cloud.live()
    made = machine.ref.created_at
    assert made is not None and aware(iv.started_at) == made
    await terminate(temporal_client, req.allocation_id)
    assert intervals(db_engine, req.allocation_id)[0].ended_at is not None


async def test_a_lost_machine_closes_its_interval_once_the_cloud_shows_it_gone(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    req = make_request()
    handle = await start_allocate(temporal_client, req)
    await settled(handle)
    assert intervals(db_engine, req.allocation_id)[0].ended_at is None
    await handle.signal(wf.ALLOCATION.machine_lost.name, MachineLost(reason="preempted by the cloud"))
    assert (await handle.result()).phase == Phase.LOST
    [iv] = intervals(db_engine, req.allocation_id)
    assert iv.ended_at is not None


async def test_a_boot_timeout_closes_the_stuck_attempt_and_opens_the_next(
        temporal_client: Client, fake_cloud: FakeCloud, make_request: Any, db_engine: sa.Engine) -> None:
    fake_cloud.add_fault("create", "stuck_booting")
    req = make_request(gpu="a10", timing=FAST.model_copy(update={"boot_timeout_s": 3}))
    await settled(await start_allocate(temporal_client, req))
    stuck, ready = intervals(db_engine, req.allocation_id)
    assert (stuck.key, stuck.rate_per_hour) == (attempt_key(req.allocation_id, 1), 0.5)
    assert stuck.ended_at is not None  # torn down, no longer billing
    assert (ready.key, ready.ended_at) == (attempt_key(req.allocation_id, 2), None)
    await terminate(temporal_client, req.allocation_id)


def test_a_found_machine_starts_at_the_clouds_creation_time_when_the_adapter_gives_it(
        db_engine: sa.Engine, fake_connection: str) -> None:
    made = datetime(2026, 11, 1, 8, 30, tzinfo=UTC)
    inp = CreateInput(target=CloudTarget(connection_id=fake_connection, cloud="fake"), offer=FAKE_OFFERS[0],
                      key="al-created-at-1", allocation_id="al-created-at", ssh_public_keys=[])
    open_spend(db_engine, inp, InstanceRef(provider="fake", instance_id="m1", key=inp.key, created_at=made))
    # a later sighting (another retry) does not move it
    open_spend(db_engine, inp, InstanceRef(provider="fake", instance_id="m1", key=inp.key))
    [iv] = intervals(db_engine, "al-created-at")
    assert aware(iv.started_at) == made and iv.project == "default"  # the connection's project

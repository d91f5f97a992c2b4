"""Planning with capacity memory: an offer a live refusal covers goes last (the rest keep their order)
with a note saying why; another connection's memory changes nothing; the setting turns it off."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from activities.capacity_memory import order_offers, refused_scope
from activities.cloud import CloudActivities
from activities.deps import ActivityDeps
from messages.activities import PlanInput, PlanResult
from messages.allocation import CloudTarget
from providers.base import OfferQuery
from store import capacity
from store.capacity import Scope
from store.models import CapacityRefusal, utcnow
from store.secrets import SecretBox
from tests.capacity.conftest import fake_connection
from tests.fakes import FAKE_OFFERS

T0 = datetime(2026, 12, 3, 4, 12, tzinfo=UTC)


def refusal(connection_id: str, region: str, instance_type: str | None = None, *, refusals: int = 1,
            until: datetime = T0 + timedelta(minutes=20)) -> CapacityRefusal:
    return CapacityRefusal(id=f"{connection_id}-{region}-{instance_type}", provider="fake",
                           connection_id=connection_id, region=region, instance_type=instance_type,
                           kind="capacity", reason="sold out", refusals=refusals, first_at=T0, last_at=T0,
                           until=until)


def offers_on(connection_id: str) -> list:  # type: ignore[type-arg]
    return [o.model_copy(update={"connection_id": connection_id}) for o in FAKE_OFFERS]


def test_covered_offers_go_last_in_their_order_each_with_a_note() -> None:
    offers = offers_on("c1")  # r1 gpu.1x, r2 gpu.1x, r1 gpu.2x, r1 cpu.small
    ordered, notes = order_offers(offers, [refusal("c1", "r1", refusals=3)], T0)
    assert [(o.region, o.instance_type) for o in ordered] == [
        ("r2", "gpu.1x"), ("r1", "gpu.1x"), ("r1", "gpu.2x"), ("r1", "cpu.small")]
    assert notes[0] == ("tried last: fake gpu.1x@r1 — refused for capacity 3× since 04:12Z, "
                        "remembered until 04:32Z")
    assert len(notes) == 3


def test_only_the_named_type_expired_or_another_connections_memory_moves_nothing_else() -> None:
    offers = offers_on("c1")
    ordered, notes = order_offers(offers, [refusal("c1", "r1", "gpu.2x")], T0)
    assert [(o.region, o.instance_type) for o in ordered][-1] == ("r1", "gpu.2x") and len(notes) == 1
    for others in ([refusal("c2", "r1")], [refusal("c1", "r1", until=T0)]):
        assert order_offers(offers, others, T0) == (offers, [])


def test_a_refusal_names_its_scope_or_the_offers_region() -> None:
    [offer] = offers_on("c1")[:1]
    named = [{"kind": "CapacityError", "scope": {"provider": "fake", "region": "r1", "zone": "r1-b",
                                                  "instance_type": "gpu.1x", "connection_id": "forged"}}]
    assert refused_scope(named, offer, "c1") == Scope("fake", "c1", "r1", "r1-b", "gpu.1x")
    assert refused_scope([{"scope": {"provider": "fake"}}], offer, "c1") == Scope("fake", "c1", "r1")
    assert refused_scope([], offer, "c1") == Scope("fake", "c1", "r1")


async def plan(deps: ActivityDeps, *connection_ids: str) -> PlanResult:
    targets = [CloudTarget(connection_id=c, cloud="fake") for c in connection_ids]
    result: PlanResult = await ActivityEnvironment().run(
        CloudActivities(deps).plan_allocation, PlanInput(targets=targets, query=OfferQuery(gpu="a10")))
    return result


async def test_plan_allocation_tries_a_remembered_region_last_on_that_connection_only(
        engine: sa.Engine, box: SecretBox, deps: ActivityDeps, fake_registered: None) -> None:
    mine, theirs = fake_connection(engine, box), fake_connection(engine, box)
    before = await plan(deps, mine, theirs)
    # cheapest first: r1 gpu.1x of each connection, then r2, then gpu.2x
    assert [(o.connection_id, o.region) for o in before.offers][:2] == [(mine, "r1"), (theirs, "r1")]
    with Session(engine) as s:
        capacity.remember_refusal(s, Scope("fake", mine, "r1", instance_type="gpu.1x"), "capacity",
                                  "fake: no capacity", utcnow())
    after = await plan(deps, mine, theirs)
    assert [(o.connection_id, o.region, o.instance_type) for o in after.offers] == [
        (theirs, "r1", "gpu.1x"), (mine, "r2", "gpu.1x"), (theirs, "r2", "gpu.1x"),
        (mine, "r1", "gpu.2x"), (theirs, "r1", "gpu.2x"), (mine, "r1", "gpu.1x")]
    [note] = after.remembered
    assert note.startswith("tried last: fake gpu.1x@r1 — refused for capacity 1× since ")
    # The other connection's plan alone knows nothing of it.
    alone = await plan(deps, theirs)
    assert alone.remembered == [] and alone.offers[0].region == "r1"
    # Off: the plan as listed.
    deps.capacity_memory = False
    assert await plan(deps, mine, theirs) == before

"""Booting machines' polls share their adapter's listing while they overlap (providers/shared_statuses.py):
a lone poll is a get; overlapping polls are one listing; a machine the listing does not show gets its
own get; a listing of many machines takes more overlapping polls before it is worth joining."""

from __future__ import annotations

import asyncio

import pytest

from providers.base import InstanceRef, InstanceState, InstanceStatus
from providers.shared_statuses import MACHINES_PER_GET, SharedStatuses
from tests.eventually import steps_until


class FakeBootingCloud:
    """FAKE: an adapter's get and list_machines over an in-memory fleet, each held until released and
    counted; its listing a call per `page` machines. The listing leaves out `unlisted` (a create it does
    not show yet); `listing=False`: an adapter whose listing tells no states; `priced=False`: one whose
    listing costs more than a few gets (`listing_calls` None, AWS's listing per region)."""

    id = "fake"

    def __init__(self, machines: int, *, unlisted: tuple[str, ...] = (), listing: bool = True,
                 priced: bool = True) -> None:
        self.fleet = {f"m{i}": InstanceStatus(ref=ref(f"m{i}"), state=InstanceState.RUNNING,
                                              host=f"10.0.0.{i}") for i in range(machines)}
        self.unlisted, self.listing, self.priced = unlisted, listing, priced
        self.page = 200
        self.rate_limited = False  # a paced key's (providers/pacing.py): a call costs its time
        self.gets, self.listings = 0, 0
        self.release_gets, self.release_listings = asyncio.Event(), asyncio.Event()

    async def get(self, r: InstanceRef) -> InstanceStatus | None:
        self.gets += 1
        await self.release_gets.wait()
        return self.fleet.get(r.instance_id)

    def listing_calls(self, machines: int) -> int | None:
        return machines // self.page + 1 if self.priced else None

    def paced(self) -> bool:
        return self.rate_limited

    async def list_machines(self) -> list[InstanceStatus] | None:
        if not self.listing:
            return None
        self.listings += 1
        await self.release_listings.wait()
        return [s for i, s in self.fleet.items() if i not in self.unlisted]


def ref(instance_id: str) -> InstanceRef:
    return InstanceRef(provider="fake", instance_id=instance_id, key=f"k-{instance_id}")


def poll(shared: SharedStatuses, cloud: FakeBootingCloud,
         instance_id: str) -> asyncio.Future[InstanceStatus | None]:
    return asyncio.ensure_future(shared.status(cloud, ref(instance_id)))  # type: ignore[arg-type]  # duck-typed


async def test_a_lone_poll_is_a_get() -> None:
    shared, cloud = SharedStatuses(), FakeBootingCloud(3)
    cloud.release_gets.set()
    st = await poll(shared, cloud, "m1")
    assert st is not None and st.host == "10.0.0.1"
    assert (cloud.gets, cloud.listings, len(shared)) == (1, 0, 0)


async def test_polls_that_overlap_one_under_way_share_a_listing() -> None:
    shared, cloud = SharedStatuses(), FakeBootingCloud(6)
    first = poll(shared, cloud, "m0")
    await steps_until(lambda: cloud.gets == 1)  # its get is held
    others = [poll(shared, cloud, f"m{i}") for i in range(1, 6)]
    await steps_until(lambda: shared.polls() == 6 and cloud.listings == 1)
    cloud.release_listings.set()
    cloud.release_gets.set()
    answers = await asyncio.gather(first, *others)
    assert [a.host if a else None for a in answers] == [f"10.0.0.{i}" for i in range(6)]
    # The first asked alone: its get. The five after it asked while that get was under way, before
    # any listing began: one listing answers them all.
    assert cloud.gets == 1 and cloud.listings == 1
    assert len(shared) == 0, "an adapter with no poll under way is forgotten"


async def test_a_machine_the_listing_does_not_show_gets_its_own_get() -> None:
    shared, cloud = SharedStatuses(), FakeBootingCloud(2, unlisted=("m1",))
    first = poll(shared, cloud, "m0")
    await steps_until(lambda: cloud.gets == 1)
    second = poll(shared, cloud, "m1")
    cloud.release_listings.set()
    await steps_until(lambda: cloud.gets == 2)  # not in the listing: asked by id
    cloud.release_gets.set()
    assert (await second) == cloud.fleet["m1"] and (await first) == cloud.fleet["m0"]
    assert cloud.listings == 1


@pytest.mark.parametrize("adapter", ["listing tells no states", "listing costs more than gets"])
async def test_an_adapter_whose_listing_does_not_pay_is_asked_with_gets(adapter: str) -> None:
    shared = SharedStatuses()
    cloud = FakeBootingCloud(3, listing=adapter != "listing tells no states",
                             priced=adapter != "listing costs more than gets")
    polls = [poll(shared, cloud, f"m{i}") for i in range(3)]
    await steps_until(lambda: cloud.gets == 3)
    cloud.release_gets.set()
    assert [p.host for p in await asyncio.gather(*polls) if p] == ["10.0.0.0", "10.0.0.1", "10.0.0.2"]
    assert cloud.listings == 0


async def test_a_listing_of_many_machines_is_joined_only_by_enough_polls() -> None:
    machines = 5 * MACHINES_PER_GET  # parsing it costs the worker about five gets: a sixth poll joins
    shared, cloud = SharedStatuses(), FakeBootingCloud(machines)
    first = poll(shared, cloud, "m0")
    await steps_until(lambda: cloud.gets == 1)
    cloud.release_listings.set()
    assert (await poll(shared, cloud, "m1")) == cloud.fleet["m1"]  # joined while the listing size was unknown
    assert cloud.listings == 1
    beside = [poll(shared, cloud, f"m{i}") for i in range(2, 6)]
    await steps_until(lambda: cloud.gets == 5)  # up to five polls under way: gets
    sixth = poll(shared, cloud, "m6")
    assert (await sixth) == cloud.fleet["m6"] and cloud.listings == 2 and cloud.gets == 5
    cloud.release_gets.set()
    await asyncio.gather(first, *beside)


async def test_on_a_paced_key_a_second_poll_joins_a_listing_of_many_machines() -> None:
    shared, cloud = SharedStatuses(), FakeBootingCloud(5 * MACHINES_PER_GET)
    cloud.rate_limited = True
    cloud.release_listings.set()
    first = poll(shared, cloud, "m0")
    await steps_until(lambda: cloud.gets == 1)
    assert (await poll(shared, cloud, "m1")) == cloud.fleet["m1"] and cloud.listings == 1
    # The listing's size is known now: still the second poll under way joins (unpaced: the sixth).
    assert (await poll(shared, cloud, "m2")) == cloud.fleet["m2"] and cloud.listings == 2
    assert cloud.gets == 1
    cloud.release_gets.set()
    await first


async def test_a_listing_of_many_pages_is_joined_only_by_a_poll_more_than_its_pages() -> None:
    shared, cloud = SharedStatuses(), FakeBootingCloud(2)
    cloud.page = 1  # a page per machine, the last one short: two machines are three calls
    cloud.release_listings.set()
    first = poll(shared, cloud, "m0")
    await steps_until(lambda: cloud.gets == 1)
    assert (await poll(shared, cloud, "m1")) == cloud.fleet["m1"] and cloud.listings == 1
    beside = [poll(shared, cloud, "m0") for _ in range(2)]
    await steps_until(lambda: cloud.gets == 3)  # three polls under way, a listing of three calls: gets
    assert (await poll(shared, cloud, "m1")) == cloud.fleet["m1"] and cloud.listings == 2
    cloud.release_gets.set()
    await asyncio.gather(first, *beside)

"""Concurrent lookups share one listing, never one that began before they asked
(providers/fresh_listing.py): what keeps 200 concurrent creates on Lambda from making 200 listings
of 200 machines while each still sees every launch that finished before its lookup."""

from __future__ import annotations

import asyncio

import pytest

from providers.fresh_listing import FreshListing


class FakeCloudListing:
    """FAKE: a listing whose answers are held until released, each stamped with the cloud's state
    (how many launches had finished) when it began."""

    def __init__(self) -> None:
        self.launched = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.fail_next = False
        self.abandoned = 0  # listings cancelled while the cloud held them

    async def fetch(self) -> list[int]:
        seen = self.launched
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.abandoned += 1
            raise
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("503 from the cloud")
        return [seen]


async def test_callers_during_a_listing_share_the_next_one_which_began_after_they_asked() -> None:
    cloud = FakeCloudListing()
    listing = FreshListing(cloud.fetch)
    first = asyncio.create_task(listing.get())
    await cloud.started.wait()  # the first listing is under way, seeing 0 launches
    cloud.launched = 1  # a launch finishes while it runs: callers from now on must see it
    later = [asyncio.create_task(listing.get()) for _ in range(9)]
    await asyncio.sleep(0)
    cloud.release.set()
    assert await first == [0]
    assert await asyncio.gather(*later) == [[1]] * 9  # one listing more, begun after they asked
    assert listing.fetches == 2


async def test_a_failed_listing_fails_its_callers_and_the_next_caller_asks_again() -> None:
    cloud = FakeCloudListing()
    cloud.release.set()
    cloud.fail_next = True
    listing = FreshListing(cloud.fetch)
    results = await asyncio.gather(listing.get(), listing.get(), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results) and listing.fetches == 1
    assert await listing.get() == [0] and listing.fetches == 2


async def test_a_caller_that_gives_up_does_not_cancel_the_listing_for_the_others() -> None:
    cloud = FakeCloudListing()
    listing = FreshListing(cloud.fetch)
    impatient, patient = asyncio.create_task(listing.get()), asyncio.create_task(listing.get())
    await cloud.started.wait()
    impatient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await impatient
    cloud.release.set()
    assert await patient == [0] and listing.fetches == 1


async def test_a_listing_every_caller_gave_up_on_stops_and_the_next_caller_gets_a_new_one() -> None:
    """On Lambda every call of the account waits for the one in flight (providers/pacing.py): a
    listing held by the cloud after its create was cancelled would hold them all until its timeout."""
    cloud = FakeCloudListing()
    listing = FreshListing(cloud.fetch)
    callers = [asyncio.create_task(listing.get()) for _ in range(2)]
    await cloud.started.wait()
    for caller in callers:
        caller.cancel()
    await asyncio.gather(*callers, return_exceptions=True)
    await eventually_abandoned(cloud)
    cloud.launched = 1
    cloud.release.set()
    assert await listing.get() == [1] and listing.fetches == 2


async def test_callers_queued_for_the_next_listing_get_it_when_the_one_in_flight_is_abandoned() -> None:
    cloud = FakeCloudListing()
    listing = FreshListing(cloud.fetch)
    first = asyncio.create_task(listing.get())
    await cloud.started.wait()
    cloud.launched = 1
    queued = asyncio.create_task(listing.get())  # waits for a listing begun after it asked
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    cloud.release.set()
    assert await queued == [1] and listing.fetches == 2
    assert cloud.abandoned == 1  # the first listing stopped; the queued callers got their own


async def eventually_abandoned(cloud: FakeCloudListing) -> None:
    for _ in range(10):  # the cancel reaches the fetch within a few turns of the loop
        if cloud.abandoned:
            return
        await asyncio.sleep(0)
    raise AssertionError("the listing nobody awaits is still held")

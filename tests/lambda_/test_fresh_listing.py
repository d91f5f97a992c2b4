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

    async def fetch(self) -> list[int]:
        seen = self.launched
        self.started.set()
        await self.release.wait()
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

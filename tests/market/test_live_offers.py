"""Plans at once share each connection's offers listing (providers/market.py LiveOffers): every plan
gets a listing that began after it asked, as live as its own call; one call per listing time on
the cloud instead of one per plan (Lambda allows one request a second per key)."""

from __future__ import annotations

import asyncio

from providers.base import Offer, OfferQuery, Transient
from providers.market import LiveOffers, gather_offers
from tests.eventually import steps_until
from tests.market.test_market import offer, source


class FakeHeldCloud:
    """FAKE: an adapter whose offers calls are held until released; each call's offers are priced
    with its number (1, 2, …), so a caller's answer says which listing it came from."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = asyncio.Event()
        self.fail_next = False

    async def offers(self, query: OfferQuery) -> list[Offer]:
        self.calls += 1
        number = self.calls
        await self.release.wait()
        if self.fail_next:
            self.fail_next = False
            raise Transient("beta: 502 from upstream")
        return [offer("alpha", "a.one", float(number))]


async def until_waiting(live: LiveOffers, callers: int) -> None:
    await steps_until(lambda: live.callers() >= callers)


async def test_plans_at_once_share_a_listing_that_began_after_each_asked() -> None:
    live, cloud = LiveOffers(), FakeHeldCloud()
    first = asyncio.ensure_future(gather_offers([source("alpha-1", cloud)], OfferQuery(), live=live))
    await until_waiting(live, 1)  # listing 1 under way
    later = [asyncio.ensure_future(gather_offers([source("alpha-1", cloud)], OfferQuery(), live=live))
             for _ in range(9)]
    await until_waiting(live, 10)
    assert cloud.calls == 1
    cloud.release.set()
    assert [o.price_per_hour for o in (await first).offers] == [1.0]
    answers = await asyncio.gather(*later)
    # The nine asked while listing 1 ran: they share listing 2, never listing 1's older answer.
    assert [[o.price_per_hour for o in a.offers] for a in answers] == [[2.0]] * 9
    assert all(a.clouds[0].status == "answered" and a.offers[0].connection_id == "alpha-1" for a in answers)
    assert cloud.calls == 2 and len(live) == 0, "finished listings are forgotten"


async def test_a_connections_new_adapter_is_not_answered_by_the_old_ones_listing() -> None:
    live, old, new = LiveOffers(), FakeHeldCloud(), FakeHeldCloud()
    both = asyncio.gather(gather_offers([source("alpha-1", old)], OfferQuery(), live=live),
                          gather_offers([source("alpha-1", new)], OfferQuery(), live=live))
    await until_waiting(live, 2)
    await steps_until(lambda: old.calls + new.calls == 2)
    assert (old.calls, new.calls, len(live)) == (1, 1, 2)
    old.release.set()
    new.release.set()
    await both


async def test_a_failed_listing_fails_each_plan_sharing_it_and_the_next_plan_asks_again() -> None:
    live, cloud = LiveOffers(), FakeHeldCloud()
    cloud.fail_next = True
    plans = [asyncio.ensure_future(gather_offers([source("beta-1", cloud)], OfferQuery(), live=live))
             for _ in range(3)]
    await until_waiting(live, 3)
    cloud.release.set()
    answers = await asyncio.gather(*plans)
    assert [a.clouds[0].status for a in answers] == ["failed"] * 3
    assert all(a.clouds[0].retryable and "502" in (a.clouds[0].reason or "") for a in answers)
    assert cloud.calls == 1
    again = await gather_offers([source("beta-1", cloud)], OfferQuery(), live=live)
    assert again.clouds[0].status == "answered" and cloud.calls == 2


async def test_a_plan_that_times_out_leaves_the_one_after_it_its_listing() -> None:
    live, cloud = LiveOffers(), FakeHeldCloud()
    impatient = asyncio.ensure_future(gather_offers([source("alpha-1", cloud)], OfferQuery(), live=live,
                                                    timeout_s=0.2))
    await until_waiting(live, 1)
    patient = asyncio.ensure_future(gather_offers([source("alpha-1", cloud)], OfferQuery(), live=live))
    await until_waiting(live, 2)
    assert (await impatient).clouds[0].status == "timeout"
    cloud.release.set()
    answer = await patient
    assert answer.clouds[0].status == "answered" and len(answer.offers) == 1 and len(live) == 0

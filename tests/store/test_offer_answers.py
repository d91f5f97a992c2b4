"""The offers pages' cache shared by the API's processes (store/offer_answers.py, providers/market.py
OfferCache.shared), on SQLite and PostgreSQL: an answer one process got is another's until it
expires — when it expires, not a whole TTL after the second process read it —, per connection and
credentials; a store that fails costs only the cloud call it would have saved, and a store slow to
write never holds the answer. A process asking the cloud holds a turn the others wait on instead of
asking too, given back when its call fails and no longer held past its deadline."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import sqlalchemy as sa

from providers.base import Offer, OfferQuery, QuotaError, rank_offers
from providers.market import SHARED_TURN_S, MarketAnswer, OfferCache, Source, gather_offers, shared_key
from store import migrate
from store.offer_answers import OfferAnswers
from tests.market.test_market import FakeMarketCloud, offer, source

TTL_S = 30.0


class Clocks:
    """The wall clock the store stamps answers with, and each process's monotonic clock, moved together."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def wall(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now - 999_000.0


Shared = tuple[OfferAnswers, Clocks]


@pytest.fixture
def answers(engine: sa.Engine) -> Shared:
    migrate.upgrade(engine)
    clocks = Clocks()
    return OfferAnswers(engine, clock=clocks.wall), clocks


def process(shared: OfferAnswers, clocks: Clocks) -> OfferCache:
    """One API process's cache."""
    return OfferCache(ttl_s=TTL_S, clock=clocks.monotonic, shared=shared)


async def ask(src: Source, query: OfferQuery, cache: OfferCache) -> MarketAnswer:
    """The offers page's answer, once the answer is also in the shared store (written after it is served)."""
    answer = await gather_offers([src], query, cache=cache)
    await cache.shared_yet()
    return answer


async def test_an_answer_one_process_got_is_anothers_until_it_expires(answers: Shared) -> None:
    shared, clocks = answers
    one, two = process(shared, clocks), process(shared, clocks)
    cloud = FakeMarketCloud([offer("vast", "v.one", 0.5), offer("vast", "v.two", 1.5, gpu="H100")])
    first = await gather_offers([source("vast-1", cloud)], OfferQuery(), cache=one)
    assert not first.clouds[0].cached and len(cloud.calls) == 1
    await one.shared_yet()

    clocks.now += 10
    second = await gather_offers([source("vast-1", cloud)], OfferQuery(gpu="h100"), cache=two)
    assert second.clouds[0].cached and [o.instance_type for o in second.offers] == ["v.two"]
    assert second.offers[0].connection_id == "vast-1" and second.offers[0].price_per_hour == 1.5
    assert len(cloud.calls) == 1, "the other process's answer, not a second search"

    clocks.now += 21  # 31 s after the cloud answered: 21 s after the second process read it
    third = await gather_offers([source("vast-1", cloud)], OfferQuery(), cache=two)
    assert not third.clouds[0].cached and len(cloud.calls) == 2, \
        "kept for what was left of its time, not a whole TTL from the read"


async def test_another_connection_or_new_credentials_are_asked_anew(answers: Shared) -> None:
    shared, clocks = answers
    cloud = FakeMarketCloud([offer("vast", "v.one", 0.5)])
    await ask(source("vast-1", cloud), OfferQuery(), process(shared, clocks))
    for other, query in ((source("vast-1", cloud, fingerprint="v2"), OfferQuery()),
                         (source("vast-2", cloud), OfferQuery()),
                         (source("vast-1", cloud), OfferQuery(region="r2"))):
        await ask(other, query, process(shared, clocks))
    assert len(cloud.calls) == 4, "a re-keyed connection, another connection, another query: each asked"


async def test_expired_answers_go_when_one_is_kept(answers: Shared, engine: sa.Engine) -> None:
    shared, clocks = answers
    cloud = FakeMarketCloud([offer("vast", "v.one", 0.5)])
    for region in ("r1", "r2"):
        await ask(source("vast-1", cloud), OfferQuery(region=region), process(shared, clocks))
    clocks.now += TTL_S + 1
    await ask(source("vast-1", cloud), OfferQuery(region="r3"), process(shared, clocks))
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM offer_answer")).scalar() == 1


async def test_no_ttl_keeps_nothing_and_reuses_nothing(answers: Shared, engine: sa.Engine) -> None:
    shared, clocks = answers
    cloud = FakeMarketCloud([offer("vast", "v.one", 0.5)])

    def uncached() -> OfferCache:
        return OfferCache(ttl_s=0, clock=clocks.monotonic, shared=shared)
    for _ in range(2):
        await ask(source("vast-1", cloud), OfferQuery(), uncached())
    assert len(cloud.calls) == 2
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM offer_answer")).scalar() == 0
    await ask(source("vast-1", cloud), OfferQuery(), process(shared, clocks))  # keeps 30 s
    await ask(source("vast-1", cloud), OfferQuery(), uncached())
    assert len(cloud.calls) == 4, "a TTL of 0 reuses no answer, another process's neither"


async def test_a_store_that_fails_costs_only_the_call_it_would_save(
        answers: Shared, engine: sa.Engine, caplog: pytest.LogCaptureFixture) -> None:
    shared, clocks = answers
    with engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE offer_answer"))
    caplog.set_level(logging.WARNING, logger="gpuprov.market")
    cloud = FakeMarketCloud([offer("vast", "v.one", 0.5)])
    cache = process(shared, clocks)
    for _ in range(2):
        answer = await ask(source("vast-1", cloud), OfferQuery(), cache)
        assert answer.clouds[0].status == "answered" and [o.instance_type for o in answer.offers] == ["v.one"]
    assert len(cloud.calls) == 1, "this process's own cache still serves it"
    logged = [r.getMessage() for r in caplog.records]
    assert any("could not be read" in m for m in logged) and any("could not be written" in m for m in logged)


class Through:
    """The shared store, every call passed through: what the stores below change one part of."""

    def __init__(self, shared: OfferAnswers) -> None:
        self.shared = shared

    def load(self, key: str) -> tuple[float, str | None] | None:
        return self.shared.load(key)

    def save(self, key: str, offers: str, ttl_s: float) -> None:
        self.shared.save(key, offers, ttl_s)

    def claim(self, key: str, for_s: float) -> float | None:
        return self.shared.claim(key, for_s)

    def release(self, key: str, until: float) -> None:
        self.shared.release(key, until)


class SlowToWrite(Through):
    """The shared store, its writes held until `written` is set: a database whose write lock other
    writers hold."""

    def __init__(self, shared: OfferAnswers) -> None:
        super().__init__(shared)
        self.written = threading.Event()
        self.claiming = threading.Event()  # a claim's write has begun
        self.claimed = threading.Event()  # and ended

    def save(self, key: str, offers: str, ttl_s: float) -> None:
        assert self.written.wait(60), "never released"
        super().save(key, offers, ttl_s)

    def claim(self, key: str, for_s: float) -> float | None:
        self.claiming.set()
        assert self.written.wait(60), "never released"
        try:
            return super().claim(key, for_s)
        finally:
            self.claimed.set()

    def release(self, key: str, until: float) -> None:
        assert self.written.wait(60), "never released"
        super().release(key, until)


async def test_a_store_slow_to_write_never_holds_the_answer(
        answers: Shared, caplog: pytest.LogCaptureFixture) -> None:
    """Neither the answer's write nor the turn's: past SHARED_CLAIM_WAIT_S the cloud is asked without one."""
    shared, clocks = answers
    caplog.set_level(logging.WARNING, logger="gpuprov.market")
    slow = SlowToWrite(shared)
    one = OfferCache(ttl_s=TTL_S, clock=clocks.monotonic, shared=slow)
    cloud = FakeMarketCloud([offer("vast", "v.one", 0.5)])
    try:  # before: the page waited for the write, and reported the cloud as not answering
        answer = await gather_offers([source("vast-1", cloud)], OfferQuery(), cache=one, timeout_s=30)
        assert answer.clouds[0].status == "answered", answer.clouds[0].reason
        assert [o.instance_type for o in answer.offers] == ["v.one"]
        assert any("no turn within" in r.getMessage() for r in caplog.records)
    finally:
        slow.written.set()  # the write goes on after, and another process is then served it
    await asyncio.wait_for(one.shared_yet(), 60)
    again = await gather_offers([source("vast-1", cloud)], OfferQuery(), cache=process(shared, clocks))
    assert again.clouds[0].cached and len(cloud.calls) == 1


class Watched(Through):
    """The shared store, noting when a process read another's turn (a test waits for that moment)."""

    def __init__(self, shared: OfferAnswers) -> None:
        super().__init__(shared)
        self.saw_turn = threading.Event()

    def load(self, key: str) -> tuple[float, str | None] | None:
        kept = super().load(key)
        if kept is not None and kept[1] is None:
            self.saw_turn.set()
        return kept


def waiting_process(shared: OfferAnswers, clocks: Clocks) -> tuple[OfferCache, Watched]:
    watched = Watched(shared)
    return OfferCache(ttl_s=TTL_S, clock=clocks.monotonic, shared=watched, poll_s=0.01), watched


def asking(cache: OfferCache, cloud: FakeMarketCloud) -> asyncio.Task[MarketAnswer]:
    """The offers page of `cache`'s process, asked in the background."""
    page = gather_offers([source("vast-1", cloud)], OfferQuery(), cache=cache, timeout_s=60)
    return asyncio.create_task(page)


async def saw_turn(watched: Watched) -> None:
    assert await asyncio.to_thread(watched.saw_turn.wait, 60), "never read the other process's turn"


class FirstCallFailsFake(FakeMarketCloud):
    """FAKE cloud: its first search waits for `release`, then fails; the next ones answer."""

    async def offers(self, query: OfferQuery) -> list[Offer]:
        first = not self.calls
        self.calls.append(query)
        self.called.set()
        if first:
            await self.release.wait()
            raise QuotaError("vast-1: quota exhausted", "vast")
        return rank_offers(self._offers, query)


async def test_a_process_waits_for_the_answer_another_is_asking_the_cloud_for(answers: Shared) -> None:
    """The page asked again while a slow cloud's first call runs, on the other process: that one
    waits for the first call's answer instead of searching a second time."""
    shared, clocks = answers
    one = process(shared, clocks)
    two, watched = waiting_process(shared, clocks)
    cloud = FakeMarketCloud([offer("vast", "v.one", 0.5)], hang=True)
    first = asking(one, cloud)
    await asyncio.wait_for(cloud.called.wait(), 60)
    second = asking(two, cloud)
    await saw_turn(watched)
    assert len(cloud.calls) == 1
    cloud.release.set()
    assert (await first).clouds[0].status == "answered"
    answer = await second
    assert answer.clouds[0].cached and [o.instance_type for o in answer.offers] == ["v.one"]
    assert len(cloud.calls) == 1, "one search for both processes"


async def test_a_failed_call_gives_its_turn_to_the_process_waiting(answers: Shared) -> None:
    shared, clocks = answers
    one = process(shared, clocks)
    two, watched = waiting_process(shared, clocks)
    cloud = FirstCallFailsFake([offer("vast", "v.one", 0.5)])
    first = asking(one, cloud)
    await asyncio.wait_for(cloud.called.wait(), 60)
    second = asking(two, cloud)
    await saw_turn(watched)
    cloud.release.set()
    assert (await first).clouds[0].status == "failed"
    answer = await second  # not the failure's: its own search, once the turn was given back
    assert answer.clouds[0].status == "answered" and not answer.clouds[0].cached
    assert len(cloud.calls) == 2


async def test_a_turn_written_late_is_given_back_when_its_call_fails(
        answers: Shared, caplog: pytest.LogCaptureFixture) -> None:
    """The claim waited past SHARED_CLAIM_WAIT_S for the write lock, the cloud was asked meanwhile and
    refused; the claim then landed. Before, that turn stayed until its deadline: the other processes
    waited 30 s for an answer nobody was asking for."""
    shared, clocks = answers
    caplog.set_level(logging.WARNING, logger="gpuprov.market")
    slow = SlowToWrite(shared)
    one = OfferCache(ttl_s=TTL_S, clock=clocks.monotonic, shared=slow)
    cloud = FirstCallFailsFake([offer("vast", "v.one", 0.5)])
    cloud.release.set()  # the first search fails at once
    answer = await gather_offers([source("vast-1", cloud)], OfferQuery(), cache=one, timeout_s=30)
    assert answer.clouds[0].status == "failed"
    assert any("no turn within" in r.getMessage() for r in caplog.records)
    slow.written.set()  # the write lock is free: the claim lands, then the give-back
    assert await asyncio.to_thread(slow.claimed.wait, 60)
    await asyncio.wait_for(one.shared_yet(), 60)
    assert shared.load(shared_key(OfferCache.key(source("vast-1", cloud), OfferQuery()))) is None, \
        "the late turn is still held"
    again = await gather_offers([source("vast-1", cloud)], OfferQuery(), cache=process(shared, clocks),
                                timeout_s=30)
    assert again.clouds[0].status == "answered" and len(cloud.calls) == 2  # asked at once, not after 30 s


async def test_a_process_closing_while_its_claim_waits_gives_the_turn_back(answers: Shared) -> None:
    shared, clocks = answers
    slow = SlowToWrite(shared)
    one = OfferCache(ttl_s=TTL_S, clock=clocks.monotonic, shared=slow)
    cloud = FakeMarketCloud([offer("vast", "v.one", 0.5)])
    page = asking(one, cloud)
    assert await asyncio.to_thread(slow.claiming.wait, 60)
    closing = asyncio.create_task(one.aclose())  # the API shutting down: its calls are cancelled
    await asyncio.sleep(0)
    slow.written.set()
    assert await asyncio.to_thread(slow.claimed.wait, 60)
    await asyncio.wait_for(closing, 60)
    (ended,) = await asyncio.gather(page, return_exceptions=True)
    assert isinstance(ended, asyncio.CancelledError) and cloud.calls == []
    assert shared.load(shared_key(OfferCache.key(source("vast-1", cloud), OfferQuery()))) is None, \
        "the turn of a process gone is still held"


async def test_a_turn_held_past_its_deadline_is_taken(answers: Shared) -> None:
    """A process that died asking holds nobody past the turn's deadline."""
    shared, clocks = answers
    src = source("vast-1", FakeMarketCloud([]))
    assert shared.claim(shared_key(OfferCache.key(src, OfferQuery())), SHARED_TURN_S) is not None  # then died
    two, watched = waiting_process(shared, clocks)
    cloud = FakeMarketCloud([offer("vast", "v.one", 0.5)])
    second = asking(two, cloud)
    await saw_turn(watched)
    assert cloud.calls == []
    clocks.now += SHARED_TURN_S + 1
    answer = await second
    assert answer.clouds[0].status == "answered" and len(cloud.calls) == 1
    await two.shared_yet()
    assert (kept := shared.load(shared_key(OfferCache.key(src, OfferQuery())))) is not None and kept[1]


def test_a_turn_is_given_back_only_by_its_holder(answers: Shared) -> None:
    shared, clocks = answers
    until = shared.claim("k", 10)
    assert until is not None and shared.claim("k", 10) is None  # held
    assert shared.load("k") == (10, None)
    clocks.now += 11
    theirs = shared.claim("k", 10)  # past its deadline: taken by another
    assert theirs is not None
    shared.release("k", until)  # the first holder's late give-back
    assert shared.load("k") == (10, None)  # still theirs
    shared.release("k", theirs)
    assert shared.load("k") is None
    shared.save("k", "[]", 30)
    assert shared.claim("k", 10) is None and shared.load("k") == (30, "[]")  # an answer: no turn

"""The offers pages' cache shared by the API's processes (store/offer_answers.py, providers/market.py
OfferCache.shared), on SQLite and PostgreSQL: an answer one process got is another's until it
expires — when it expires, not a whole TTL after the second process read it —, per connection and
credentials; a store that fails costs only the cloud call it would have saved, and a store slow to
write never holds the answer."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import sqlalchemy as sa

from providers.base import OfferQuery
from providers.market import MarketAnswer, OfferCache, Source, gather_offers
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
    assert any("could not be read" in m for m in logged) and any("could not be shared" in m for m in logged)


class SlowToWrite:
    """The shared store, its writes held until `written` is set: a database whose write lock other
    writers hold."""

    def __init__(self, shared: OfferAnswers) -> None:
        self.shared, self.written = shared, threading.Event()

    def load(self, key: str) -> tuple[float, str] | None:
        return self.shared.load(key)

    def save(self, key: str, offers: str, ttl_s: float) -> None:
        assert self.written.wait(60), "never released"
        self.shared.save(key, offers, ttl_s)


async def test_a_store_slow_to_write_never_holds_the_answer(answers: Shared) -> None:
    shared, clocks = answers
    slow = SlowToWrite(shared)
    one = OfferCache(ttl_s=TTL_S, clock=clocks.monotonic, shared=slow)
    cloud = FakeMarketCloud([offer("vast", "v.one", 0.5)])
    try:  # before: the page waited for the write, and reported the cloud as not answering
        answer = await gather_offers([source("vast-1", cloud)], OfferQuery(), cache=one, timeout_s=30)
        assert answer.clouds[0].status == "answered", answer.clouds[0].reason
        assert [o.instance_type for o in answer.offers] == ["v.one"]
    finally:
        slow.written.set()  # the write goes on after, and another process is then served it
    await asyncio.wait_for(one.shared_yet(), 60)
    again = await gather_offers([source("vast-1", cloud)], OfferQuery(), cache=process(shared, clocks))
    assert again.clouds[0].cached and len(cloud.calls) == 1

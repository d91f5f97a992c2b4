"""Cross-cloud offers (providers/market.py): every connection asked at once, merged cheapest first,
each one's answer reported; a slow or failing cloud does not hold the others; the short cache."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from providers.base import (
    Capabilities,
    CloudProvider,
    GpuSpec,
    Offer,
    OfferQuery,
    QuotaError,
    RateLimited,
    Transient,
    rank_offers,
)
from providers.market import OfferCache, Source, gather_offers


def offer(cloud: str, itype: str, price: float, region: str = "r1", gpu: str = "A100",
          spot: bool = False) -> Offer:
    return Offer(provider=cloud, instance_type=itype, gpu=GpuSpec(name=gpu, count=1), vcpus=8, memory_gib=64,
                 region=region, price_per_hour=price, spot=spot)


class FakeMarketCloud:
    """An in-memory adapter stand-in: answers `offers`, fails with `error`, or never answers (`hang`)."""

    def __init__(self, offers: list[Offer], *, error: Exception | None = None, hang: bool = False) -> None:
        self._offers, self.error, self.hang = offers, error, hang
        self.calls: list[OfferQuery] = []
        self.release = asyncio.Event()
        self.called = asyncio.Event()

    async def offers(self, query: OfferQuery) -> list[Offer]:
        self.calls.append(query)
        self.called.set()
        if self.hang:
            await self.release.wait()
        await asyncio.sleep(0)
        if self.error is not None:
            raise self.error
        return rank_offers(self._offers, query)


def source(conn: str, cloud: object, *, fingerprint: str = "v1", **caps: Any) -> Source:
    async def adapter() -> CloudProvider:
        return cloud  # type: ignore[return-value]  # duck-typed: only offers() is called
    return Source(connection_id=conn, cloud=conn.split("-")[0], adapter=adapter, fingerprint=fingerprint,
                  capabilities=Capabilities(display_name=conn, **caps))


async def test_offers_of_every_cloud_are_merged_cheapest_first_and_each_answer_is_reported() -> None:
    a = FakeMarketCloud([offer("alpha", "a.big", 3.0), offer("alpha", "a.small", 1.0, gpu="A10")])
    b = FakeMarketCloud([offer("beta", "b.one", 2.0)])
    broken = FakeMarketCloud([], error=QuotaError("beta-2: quota exhausted", "beta"))
    answer = await gather_offers([source("alpha-1", a), source("beta-1", b), source("beta-2", broken)],
                                 OfferQuery(gpu="a100"))
    assert [(o.instance_type, o.connection_id) for o in answer.offers] == [("b.one", "beta-1"),
                                                                           ("a.big", "alpha-1")]
    said = {c.connection_id: (c.status, c.offers) for c in answer.clouds}
    assert said == {"alpha-1": ("answered", 1), "beta-1": ("answered", 1), "beta-2": ("failed", 0)}
    assert "quota exhausted" in (answer.clouds[2].reason or "")
    # The GPU filter is applied to the merged answer: adapters are asked without it (one cached
    # answer per connection serves every GPU filter).
    assert a.calls[0].gpu is None


async def test_a_rate_limited_cloud_says_how_long_it_asked_to_wait() -> None:
    limited = FakeMarketCloud([], error=RateLimited("gamma: 429 Too Many Requests", retry_after=37.0))
    quota = FakeMarketCloud([], error=QuotaError("delta: quota exhausted", "delta"))
    answer = await gather_offers([source("gamma-1", limited), source("delta-1", quota)], OfferQuery())
    said = {c.connection_id: (c.status, c.retry_after) for c in answer.clouds}
    assert said == {"gamma-1": ("failed", 37.0), "delta-1": ("failed", None)}


async def test_a_cloud_that_does_not_answer_is_reported_and_does_not_hold_the_others() -> None:
    fast = FakeMarketCloud([offer("alpha", "a.one", 1.0)])
    slow = FakeMarketCloud([offer("beta", "b.one", 0.5)], hang=True)
    answer = await gather_offers([source("alpha-1", fast), source("beta-1", slow)], OfferQuery(),
                                 timeout_s=0.5)
    assert [o.instance_type for o in answer.offers] == ["a.one"]
    assert [(c.connection_id, c.status) for c in answer.clouds] == [("alpha-1", "answered"),
                                                                    ("beta-1", "timeout")]


async def test_clouds_that_cannot_serve_the_query_are_skipped_with_the_reason() -> None:
    needs_region = FakeMarketCloud([offer("aws", "g5", 1.0)])
    no_spot = FakeMarketCloud([offer("lambda", "gpu_1x", 1.0)])
    answer = await gather_offers([source("aws-1", needs_region, region_required=True),
                                  source("lambda-1", no_spot, spot=False)], OfferQuery(spot=True))
    assert [(c.status, c.reason) for c in answer.clouds] == [
        ("skipped", "aws-1 needs a region (--region)"), ("skipped", "lambda-1 sells no spot instances")]
    assert needs_region.calls == [] and no_spot.calls == []


async def test_without_a_region_a_cloud_is_searched_in_its_default_regions() -> None:
    cloud = FakeMarketCloud([offer("hs", "canada", 1.0, region="CANADA-1"),
                             offer("hs", "norway", 0.5, region="NORWAY-1")])
    src = source("hs-1", cloud, regions=["CANADA-1", "NORWAY-1"], default_regions=["CANADA-1"])
    answer = await gather_offers([src], OfferQuery())
    assert [o.instance_type for o in answer.offers] == ["canada"]
    assert "CANADA-1" in (answer.clouds[0].reason or "")
    answer = await gather_offers([src], OfferQuery(region="NORWAY-1"))
    assert [o.instance_type for o in answer.offers] == ["norway"]


async def test_the_cache_serves_a_connection_until_it_expires_or_the_connection_changes() -> None:
    now = [0.0]
    cache = OfferCache(ttl_s=30.0, clock=lambda: now[0])
    cloud = FakeMarketCloud([offer("alpha", "a.one", 1.0), offer("alpha", "a.two", 2.0, gpu="H100")])
    first = await gather_offers([source("alpha-1", cloud)], OfferQuery(), cache=cache)
    assert not first.clouds[0].cached and len(cloud.calls) == 1
    again = await gather_offers([source("alpha-1", cloud)], OfferQuery(gpu="h100"), cache=cache)
    assert again.clouds[0].cached and [o.instance_type for o in again.offers] == ["a.two"]
    assert len(cloud.calls) == 1
    await gather_offers([source("alpha-1", cloud, fingerprint="v2")], OfferQuery(), cache=cache)
    assert len(cloud.calls) == 2, "re-keyed connection: the old account's answer is not served"
    now[0] = 31.0
    await gather_offers([source("alpha-1", cloud, fingerprint="v2")], OfferQuery(), cache=cache)
    assert len(cloud.calls) == 3, "expired"
    assert len(cache._entries) == 1, "the v1 answer, expired unread, went when the next was kept"


async def test_concurrent_cold_requests_share_one_call_and_failures_are_not_cached() -> None:
    cache = OfferCache(ttl_s=30.0)
    cloud = FakeMarketCloud([offer("alpha", "a.one", 1.0)], hang=True)
    both = asyncio.gather(*(gather_offers([source("alpha-1", cloud)], OfferQuery(), cache=cache)
                            for _ in range(2)))
    await cloud.called.wait()
    cloud.release.set()
    one, two = await both
    assert len(cloud.calls) == 1 and one.offers == two.offers and len(one.offers) == 1

    failing = FakeMarketCloud([], error=Transient("502 from upstream"))
    for _ in range(2):
        answer = await gather_offers([source("beta-1", failing)], OfferQuery(), cache=cache)
        assert answer.clouds[0].status == "failed"
    assert len(failing.calls) == 2


async def test_a_cloud_slower_than_the_page_is_still_asked_and_its_answer_kept_for_the_next() -> None:
    cache = OfferCache(ttl_s=30.0)
    slow = FakeMarketCloud([offer("vast", "v.one", 0.5)], hang=True)
    first = await gather_offers([source("vast-1", slow)], OfferQuery(), cache=cache, timeout_s=0.2)
    assert first.clouds[0].status == "timeout" and "still asked" in (first.clouds[0].reason or "")
    slow.release.set()  # the cloud answers after the page gave up
    await asyncio.gather(*cache.pending())
    again = await gather_offers([source("vast-1", slow)], OfferQuery(), cache=cache, timeout_s=0.2)
    assert again.clouds[0].cached and [o.instance_type for o in again.offers] == ["v.one"]
    assert len(slow.calls) == 1, "the answer the first page waited for is the one served"


async def test_closing_the_cache_cancels_the_calls_still_under_way() -> None:
    cache = OfferCache(ttl_s=30.0)
    slow = FakeMarketCloud([offer("vast", "v.one", 0.5)], hang=True)
    answer = await gather_offers([source("vast-1", slow)], OfferQuery(), cache=cache, timeout_s=0.05)
    assert answer.clouds[0].status == "timeout" and len(cache.pending()) == 1
    call = cache.pending()[0]
    await cache.aclose()
    assert call.cancelled() and cache.pending() == []


@pytest.mark.parametrize("status", ["failed", "timeout"])
async def test_a_shared_call_that_fails_or_is_abandoned_fails_only_its_own_answer(status: str) -> None:
    cache = OfferCache(ttl_s=30.0)
    cloud = FakeMarketCloud([offer("alpha", "a.one", 1.0)], hang=True,
                            error=Transient("boom") if status == "failed" else None)
    first = asyncio.ensure_future(gather_offers([source("alpha-1", cloud)], OfferQuery(), cache=cache,
                                                timeout_s=0.3 if status == "timeout" else 30))
    await cloud.called.wait()
    second = asyncio.ensure_future(gather_offers([source("alpha-1", cloud)], OfferQuery(), cache=cache))
    if status == "failed":
        cloud.release.set()
    assert (await first).clouds[0].status == status
    cloud.release.set()
    later = await second
    assert later.clouds[0].status == ("failed" if status == "failed" else "answered")

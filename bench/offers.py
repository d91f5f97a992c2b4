"""(e) Cross-cloud offers: every simulated cloud asked at once (providers/market.py, as the offers
page and planning ask), against the slowest of the same clouds asked alone — in this one warm
process (adapters built and used once: clients, pools and tokens warm; the offers cache empty,
"cold"). Then the warm page: the same question answered from the cache, its median latency.

Each round asks every cloud alone, then all together, interleaved so a noisy machine's drift hits
both sides; the ratio compares the medians."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.harness import INSTALLATION, Bench
from fakeclouds import clouds
from fakeclouds.connect import endpoints, options
from providers import registry
from providers.base import CloudProvider, OfferQuery
from providers.market import OfferCache, Source, gather_offers, skip_reason

QUERY = OfferQuery()  # what the page asks first: every GPU, every market, the clouds' default regions


def _source(cloud: str, adapter: CloudProvider) -> Source:
    async def get() -> CloudProvider:
        return adapter
    return Source(connection_id=f"bench-{cloud}", cloud=cloud, capabilities=registry.capabilities(cloud),
                  adapter=get, fingerprint="bench")


async def run(b: Bench, *, latency_s: float, rounds: int, warm_calls: int = 50) -> dict[str, Any]:
    asked = [c for c in clouds.simulated() if skip_reason(registry.capabilities(c), QUERY) is None]
    adapters = {c: registry.build(c, clouds.facade(c).credentials(b.cloud.tokens[c]),
                                  options=options(b.cloud, c), installation_id=INSTALLATION,
                                  allowed_endpoints=endpoints(b.cloud)) for c in asked}
    sources = [_source(c, a) for c, a in adapters.items()]
    b.cloud.admin.add_fault("*", "offers", "latency", times=-1, seconds=latency_s)
    try:
        for a in adapters.values():  # warm: clients made, tokens fetched, pools open
            await a.offers(QUERY)
        slowest, cross, failed = [], [], set()
        for _ in range(rounds):
            alone = {}
            for cloud, a in adapters.items():
                t0 = time.perf_counter()
                await a.offers(QUERY)
                alone[cloud] = time.perf_counter() - t0
            slowest.append(max(alone.values()))
            t0 = time.perf_counter()
            answer = await gather_offers(sources, QUERY, cache=OfferCache())  # cold: a new, empty cache
            cross.append(time.perf_counter() - t0)
            failed |= {a.cloud for a in answer.clouds if a.status != "answered"}
        cache = OfferCache(ttl_s=3600)
        await gather_offers(sources, QUERY, cache=cache)
        warm = []
        for _ in range(warm_calls):
            t0 = time.perf_counter()
            await gather_offers(sources, QUERY, cache=cache)
            warm.append(time.perf_counter() - t0)
    finally:
        b.cloud.admin.clear_faults()
        for a in adapters.values():
            await a.aclose()
    return {"clouds": asked, "failed": sorted(failed), "cold_s": statistics.median(cross),
            "slowest_s": statistics.median(slowest),
            "ratio": statistics.median(cross) / statistics.median(slowest),
            "warm_p50_ms": statistics.median(warm) * 1000}

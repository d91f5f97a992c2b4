"""Offers of many clouds at once: the cross-cloud offers page and allocation planning both ask every
connection concurrently, each within its own timeout, and merge the answers cheapest first with a
line per connection saying what it did (answered, failed and why, timed out, skipped).

A slow or failing cloud never holds the others back: the whole answer takes at most the slowest
answering cloud's time, and never more than `timeout_s` plus scheduling. `OfferCache` keeps each
connection's answer for a short time (the page is refreshed often; a cloud's stock is not polled
per keystroke); "cold" means that cache is empty. A cloud slower than the page's timeout is still
asked: its answer, when it comes, is the cache's, so the page's next request shows it at once — a
search paced under a cloud's rate limit (Vast.ai's one per 6 s, shared with the worker's plans) can
wait longer than a browser or a client waits for a page, and was thrown away when the page gave up.
Planning asks live (no cache): an allocation plans from what can be launched now. `LiveOffers` lets
concurrent plans share a listing that began after each asked — as live as each plan's own call, one
call per listing time instead of one per plan.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol

from pydantic import BaseModel, TypeAdapter

from messages.echo import shown
from providers.base import (
    Capabilities,
    CloudProvider,
    Offer,
    OfferQuery,
    ProviderError,
    RateLimited,
    rank_offers,
)
from providers.fresh_listing import FreshListing
from providers.rest import clean

log = logging.getLogger("gpuprov.market")

DEFAULT_TIMEOUT_S = 15.0
DEFAULT_TTL_S = 30.0
# The shared store's turns: how long the other processes wait for one process's call before asking the
# cloud themselves (a call can outlast the page's wait: it goes on in the cache), how often they look
# for its answer meanwhile, and how long a turn's write may keep a call waiting (the database's write
# lock: past it, the cloud is asked without the turn).
SHARED_TURN_S = 30.0
SHARED_POLL_S = 0.2
SHARED_CLAIM_WAIT_S = 1.0

AnswerStatus = Literal["answered", "failed", "timeout", "skipped"]


class CloudAnswer(BaseModel):
    """What one connection said."""

    cloud: str
    connection_id: str
    status: AnswerStatus
    offers: int = 0  # how many of the merged offers came from it
    reason: str | None = None  # why it failed or was skipped; the regions searched when defaulted
    error: str | None = None  # the error's kind when it failed (CapacityError, AuthError, ...)
    retryable: bool | None = None  # when it failed: whether asking again may help
    retry_after: float | None = None  # when it was rate limited: the seconds the cloud asked us to wait
    cached: bool = False
    seconds: float = 0.0  # time spent waiting for it (0 when cached or skipped)


class MarketAnswer(BaseModel):
    offers: list[Offer]
    clouds: list[CloudAnswer]


@dataclass(frozen=True)
class Source:
    """One connection to ask. `fingerprint` changes when its credentials or options change, so a
    cached answer of the old account is never served for the new one."""

    connection_id: str
    cloud: str
    capabilities: Capabilities
    adapter: Callable[[], Awaitable[CloudProvider]]
    fingerprint: str = ""


def adapter_query(query: OfferQuery) -> OfferQuery:
    """What an adapter is asked: the query without its GPU filters, which are applied to the merged
    answer instead — one cached answer per connection serves every GPU the page filters on."""
    return query.model_copy(update={"gpu": None, "gpu_count": None})


def skip_reason(caps: Capabilities, query: OfferQuery) -> str | None:
    """Why a cloud is not asked at all for `query` when planning across clouds, or None."""
    if caps.region_required and query.region is None:
        return f"{caps.display_name} needs a region (--region)"
    return refusal(caps, query)


def refusal(caps: Capabilities, query: OfferQuery) -> str | None:
    """Why no offer of the cloud can match `query` (a region it does not have, spot where it sells
    none), or None. One cloud's own offers page refuses such a query with this reason; without a
    region it lists every region, so a cloud that needs one to plan is still asked."""
    if query.region is not None and caps.regions and query.region not in caps.regions:
        return f"{caps.display_name} has no region {shown(query.region)}"
    if query.spot is True and not caps.spot:
        return f"{caps.display_name} sells no spot instances"
    return None


def in_default_regions(offers: list[Offer], caps: Capabilities, query: OfferQuery) -> list[Offer]:
    """Without a --region, a cloud is searched in its default regions only (the seed's "Default
    when none given"); with one, anywhere it names."""
    if query.region is not None or not caps.default_regions:
        return offers
    return [o for o in offers if o.region in caps.default_regions]


class SharedAnswers(Protocol):
    """Answers kept where every API process finds them (store/offer_answers.py), by a key that is a
    digest; blocking (asked on a thread). `load`: (seconds still fresh, the offers' JSON — None while
    another process asks the cloud for them) or None. `claim`: the turn to ask the cloud (its
    deadline) or None; `release` gives it back."""

    def load(self, key: str) -> tuple[float, str | None] | None: ...

    def save(self, key: str, offers: str, ttl_s: float) -> None: ...

    def claim(self, key: str, for_s: float) -> float | None: ...

    def release(self, key: str, until: float) -> None: ...


class Turn(NamedTuple):
    """This process's turn to ask the cloud for `key` in `store`: `claim` is the claim's write, its
    deadline once written (None: another process's turn or answer was there first). A claim not
    written within SHARED_CLAIM_WAIT_S goes on: the cloud is asked meanwhile, and should the claim
    land, it is this process's turn all the same (given back if the call fails)."""

    store: SharedAnswers
    key: str
    claim: asyncio.Future[float | None]


_OFFERS = TypeAdapter(list[Offer])

CacheKey = tuple[str, str, str]


@dataclass
class OfferCache:
    """Per-connection answers, kept `ttl_s` seconds. Concurrent cold requests for one connection
    share one call to its cloud (no stampede when the page and a planner ask at once). The call is
    the cache's, not its callers': one that stops waiting (its timeout) leaves it running, and the
    answer is kept for whoever asks next. With `shared`, each answer is also kept for the other API
    processes, and a call first looks there: an answer another process got is served, for what is
    left of its time, and one another process is asking the cloud for is waited for (its turn,
    store/offer_answers.py), not asked again. Keeping it there is not the caller's wait: the answer
    is served first, and the write goes on after (a write waits for the database's write lock, which
    every other writer shares: on SQLite up to its 30 s busy timeout, past the page's own)."""

    ttl_s: float = DEFAULT_TTL_S
    clock: Callable[[], float] = time.monotonic
    shared: SharedAnswers | None = None
    poll_s: float = SHARED_POLL_S  # how often a process waiting for another's answer looks for it
    _entries: dict[CacheKey, tuple[float, list[Offer]]] = field(default_factory=dict)
    _inflight: dict[CacheKey, asyncio.Task[tuple[list[Offer], bool]]] = field(default_factory=dict)
    _writing: set[asyncio.Task[None]] = field(default_factory=set)

    @staticmethod
    def key(source: Source, query: OfferQuery) -> CacheKey:
        return source.connection_id, source.fingerprint, query.model_dump_json()

    def fresh(self, key: CacheKey) -> list[Offer] | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] <= self.clock():
            self._entries.pop(key, None)
            return None
        return entry[1]

    async def get_or_fetch(self, key: CacheKey,
                           fetch: Callable[[], Awaitable[list[Offer]]]) -> tuple[list[Offer], bool]:
        """(offers, whether they came from a cache). Raises what the call raised (not cached)."""
        cached = self.fresh(key)
        if cached is not None:
            return cached, True
        call = self._inflight.get(key)
        if call is None:
            call = self._inflight[key] = asyncio.get_running_loop().create_task(self._keep(key, fetch))
            call.add_done_callback(_retrieved)
        return await asyncio.shield(call)  # cancelling this wait leaves the call running

    async def _keep(self, key: CacheKey,
                    fetch: Callable[[], Awaitable[list[Offer]]]) -> tuple[list[Offer], bool]:
        try:
            found, turn = await self._from_others(key)
            if found is not None:
                ttl_s, offers = found
            else:
                try:
                    offers = await fetch()
                except BaseException:
                    if turn is not None:  # the next process to ask takes it, not after its deadline
                        self._later(self._give_back(turn))
                    raise
                ttl_s = self.ttl_s
                if (store := self._store) is not None:  # in place of the turn, if one was taken
                    self._write_later(store.save, shared_key(key), _OFFERS.dump_json(offers).decode(), ttl_s)
            now = self.clock()
            # Answers expire unread too: a query is free text (a region, a GPU name), so the entries
            # kept are those of the last `ttl_s`, not every query ever asked.
            for stale in [k for k, (expires, _) in self._entries.items() if expires <= now]:
                del self._entries[stale]
            self._entries[key] = (now + ttl_s, offers)
            return offers, found is not None
        finally:
            del self._inflight[key]

    @property
    def _store(self) -> SharedAnswers | None:
        """The shared store answers go through: none without a TTL (0: no answer is reused, this
        process's or another's)."""
        return self.shared if self.ttl_s > 0 else None

    async def _from_others(self, key: CacheKey) -> tuple[tuple[float, list[Offer]] | None, Turn | None]:
        """(seconds left, offers) another process kept — waited for while one asks the cloud for
        them — or None and this process's turn to ask (None without a store or when the store fails:
        the cloud is asked then, as without one; a turn whose claim waits past SHARED_CLAIM_WAIT_S to
        be written, unwritten: the cloud is asked meanwhile)."""
        if (store := self._store) is None:
            return None, None
        digest = shared_key(key)
        try:
            while True:
                kept = await asyncio.to_thread(store.load, digest)
                if kept is None:  # nobody has it or asks for it: take the turn, unless taken meanwhile
                    claim = asyncio.ensure_future(asyncio.to_thread(store.claim, digest, SHARED_TURN_S))
                    claim.add_done_callback(_retrieved)
                    turn = Turn(store, digest, claim)
                    try:
                        until = await asyncio.wait_for(asyncio.shield(claim), SHARED_CLAIM_WAIT_S)
                    except TimeoutError:  # the write waits for the database's write lock, and goes on:
                        # the others may wait for this process's answer
                        log.warning("offers cache: no turn within %.0f s (the database's write lock): "
                                    "asking the cloud", SHARED_CLAIM_WAIT_S)
                        return None, turn
                    except asyncio.CancelledError:  # nobody will ask: a claim still landing is given back
                        self._later(self._give_back(turn))
                        raise
                    if until is not None:
                        return None, turn
                elif kept[1] is None:  # another process asks the cloud: its answer is read here when it comes
                    await asyncio.sleep(self.poll_s)
                else:
                    return (kept[0], _OFFERS.validate_json(kept[1])), None
        except Exception as e:  # noqa: BLE001 — the database, or an answer an older version wrote
            log.warning("offers cache: the shared answers could not be read (%s): asking the cloud", clean(e))
            return None, None

    def _write_later(self, write: Callable[..., None], *args: object) -> None:
        """`write(*args)` on a thread, after the answer (a write waits for the database's write lock)."""
        self._later(asyncio.to_thread(write, *args))

    def _later(self, writing: Awaitable[None]) -> None:
        task = asyncio.get_running_loop().create_task(self._write(writing))
        self._writing.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(self._writing.discard)

    @staticmethod
    async def _write(writing: Awaitable[None]) -> None:
        try:
            await writing
        except Exception as e:  # noqa: BLE001 — this process still serves it; the others ask the cloud
            log.warning("offers cache: the shared answers could not be written (%s)", clean(e))

    @staticmethod
    async def _give_back(turn: Turn) -> None:
        """Give `turn` back once its claim is written — a late one too: held, it would keep the other
        processes waiting until its deadline for an answer that never comes."""
        if (until := await turn.claim) is not None:
            await asyncio.to_thread(turn.store.release, turn.key, until)

    def pending(self) -> list[asyncio.Task[tuple[list[Offer], bool]]]:
        """The calls under way (a test awaits them; `aclose` cancels them)."""
        return list(self._inflight.values())

    async def shared_yet(self) -> None:
        """Wait until every answer got so far is kept in the shared store (or failed to be), and
        every turn given back."""
        await asyncio.gather(*self._writing)

    async def aclose(self) -> None:
        """Cancel the calls under way (before their adapters are closed) and wait for them to end;
        let the answers being shared finish (one short write each)."""
        calls = self.pending()
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        await asyncio.gather(*self._writing, return_exceptions=True)

    def clear(self) -> None:
        self._entries.clear()


def shared_key(key: CacheKey) -> str:
    """The shared store's key: names neither the connection nor its credentials' fingerprint."""
    h = hashlib.sha256()
    for part in key:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part.encode())
    return h.hexdigest()


def _retrieved(call: asyncio.Future[Any]) -> None:
    """Read a finished call's failure (a cloud's, a claim's): when every caller stopped waiting, nobody
    else does, and asyncio would log it as never retrieved."""
    if not call.cancelled():
        call.exception()


class LiveOffers:
    """Each adapter's offers, shared by the plans that ask at once: every caller gets a listing that
    began after it asked (providers/fresh_listing.py), so nothing older than its own call would have
    been. Two hundred allocations started together on Lambda (one request a second per key) made two
    hundred instance-type listings, one per plan: ~200 s of the key's budget before the first
    launch; now a handful. A listing is forgotten once nobody awaits it.

    Keyed by the adapter object (a re-keyed connection's new adapter lists anew) and the query. Each
    caller resolves its adapter itself: the listing runs in the first caller's task context, so it
    must not heartbeat (resolving the adapter does) on behalf of an activity that may be over."""

    def __init__(self) -> None:
        self._listings: dict[tuple[int, str], tuple[CloudProvider, FreshListing[Offer]]] = {}

    async def get(self, adapter: CloudProvider, query: OfferQuery) -> list[Offer]:
        key = (id(adapter), query.model_dump_json())
        entry = self._listings.get(key)
        if entry is None:  # the adapter is held in the entry: its id is not reused meanwhile
            entry = self._listings[key] = (adapter, FreshListing(lambda: adapter.offers(query)))
        listing = entry[1]
        try:
            return await listing.get()
        finally:
            if not listing.callers and self._listings.get(key) is entry:
                del self._listings[key]

    def __len__(self) -> int:
        """Listings someone awaits (a finished one is forgotten)."""
        return len(self._listings)

    def callers(self) -> int:
        """How many plans await a listing now."""
        return sum(listing.callers for _, listing in self._listings.values())


async def _ask(source: Source, query: OfferQuery, timeout_s: float,
               cache: OfferCache | None, live: LiveOffers | None = None) -> tuple[list[Offer], CloudAnswer]:
    answer = CloudAnswer(cloud=source.cloud, connection_id=source.connection_id, status="answered")
    why = skip_reason(source.capabilities, query)
    if why is not None:
        answer.status, answer.reason = "skipped", why
        return [], answer
    asked = adapter_query(query)

    async def fetch() -> list[Offer]:
        adapter = await source.adapter()
        return await adapter.offers(asked)

    started = time.monotonic()
    try:
        if live is not None:
            async def listed() -> list[Offer]:
                return await live.get(await source.adapter(), asked)
            offers = await asyncio.wait_for(listed(), timeout_s)
        elif cache is None:
            offers, answer.cached = await asyncio.wait_for(fetch(), timeout_s), False
        else:
            shared = cache.get_or_fetch(cache.key(source, asked), fetch)
            offers, answer.cached = await asyncio.wait_for(shared, timeout_s)
    except TimeoutError:
        answer.status, answer.reason = "timeout", f"no answer within {timeout_s:g} s"
        if cache is not None:
            answer.reason += " (still asked: its answer is the next request's once it comes)"
        return [], answer
    except ProviderError as e:
        answer.status, answer.reason, answer.error = "failed", e.message, e.kind
        answer.retryable = e.retryable
        answer.retry_after = e.retry_after if isinstance(e, RateLimited) else None
        return [], answer
    except Exception as e:  # noqa: BLE001 — building the adapter (a sealed secret, a missing row)
        # Reported like a cloud's failure; the planner decides from `retryable` what to do.
        answer.status, answer.reason, answer.error = "failed", clean(e), type(e).__name__
        answer.retryable = not getattr(e, "non_retryable", False)
        return [], answer
    finally:
        answer.seconds = 0.0 if answer.cached else round(time.monotonic() - started, 3)
    caps = source.capabilities
    offers = in_default_regions(offers, caps, query)
    if query.region is None and caps.default_regions:
        answer.reason = f"default regions {', '.join(caps.default_regions)} (pass a region for others)"
    tagged = [o.model_copy(update={"connection_id": source.connection_id}) for o in offers]
    return tagged, answer


async def gather_offers(sources: Sequence[Source], query: OfferQuery, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                        cache: OfferCache | None = None, live: LiveOffers | None = None) -> MarketAnswer:
    """Every source's offers matching `query`, cheapest first, and one CloudAnswer per source (in
    the order given). Raises nothing a cloud does: failures are answers. With `live`, concurrent
    callers share fresh listings (planning); with `cache`, recent answers are served (the page)."""
    results = await asyncio.gather(*(_ask(s, query, timeout_s, cache, live) for s in sources))
    # The region was each cloud's to apply (each was asked with it): a cloud's region may name a group
    # of its regions (Verda's country FI is its locations FIN-01..03), which equality here would drop.
    anywhere = query.model_copy(update={"region": None})
    merged = rank_offers([o for offers, _ in results for o in offers], anywhere)
    counts: dict[str, int] = {}
    for o in merged:
        counts[o.connection_id or ""] = counts.get(o.connection_id or "", 0) + 1
    answers = [a.model_copy(update={"offers": counts.get(a.connection_id, 0)}) for _, a in results]
    return MarketAnswer(offers=merged, clouds=answers)

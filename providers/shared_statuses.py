"""State polls of one adapter — booting machines', machines being torn down — shared while they overlap.

Each booting machine's WAIT_RUNNING asks its cloud for the machine's state every few seconds, and so
does each machine's teardown (activities/cloud.py terminate_refs) until the cloud shows it gone.
Alone, that is one `get`. Many machines booting or going on one connection make many gets, and on a
rate-limited key they queue for it (Lambda: one request a second, so twenty booting machines see
their boots up to twenty seconds late, and every create behind them waits too). Here a poll that
starts while another poll of the same adapter is under way joins the adapter's listing
(`list_machines`, one that began after it asked: providers/fresh_listing.py) instead of making its
own get — one listing answers every poll that joined it. A lone poll stays a get. A poll joins only
while more polls are under way than the listing costs calls (`CloudProvider.listing_calls`: one on
Lambda, a page per 200 machines on DigitalOcean, as many as the last listing showed), and never on
an adapter whose listing costs more than that (a listing per region on AWS, a second listing for the
addresses on Azure). Nor, where calls are not paced, while fewer polls are under way than one per
`MACHINES_PER_GET` machines the last listing showed: a listing's parsing costs the worker CPU per
machine, and 1,000 allocations at once on an unpaced cloud (bench `scale`) ran slower joining
listings of 1,000 machines on every overlap than with gets. On a paced key (`CloudProvider.paced`:
Lambda's) each call costs the key's time, and that bound made every round of fifty teardown polls
ten gets and a listing (bench `paced`).

The listing says what `get` says for a machine it shows (tests/conformance/checks.py
`check_listed_as`). A machine it does not show — a create the listing does not reflect yet, or a
machine already gone, which a listing may leave out — gets its own `get`, as the watch does
(activities/watch.py). An adapter whose listing does not tell a machine's state (`list_machines`
returns None) is asked with gets only.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from providers.base import CloudProvider, InstanceRef, InstanceStatus
from providers.fresh_listing import FreshListing

# How many machines a listing shows for the worker's CPU of one get: Lambda's list_machines over 400
# simulated machines took 32–182 ms of CPU, a get 4 ms (2026-12-06, this 2-core box: 9–50 machines a
# get). The low end: a poll joins a listing of 1,000 only while 100 polls are under way.
MACHINES_PER_GET = 10


class _NoListing(Exception):
    """The adapter's listing does not tell states: poll with gets."""


@dataclass
class _Adapter:
    """One adapter's polls under way and its shared listing (an index by instance id)."""

    adapter: CloudProvider
    listing: FreshListing[dict[str, InstanceStatus]]
    polls: int = 0
    listable: bool = True
    listed: int = 0  # machines the last listing showed

    def join_listing(self) -> bool:
        """Whether a poll starting now (already counted) joins the listing rather than gets."""
        calls = self.adapter.listing_calls(self.listed)
        if not self.listable or calls is None:
            return False
        cpu_bound = 0 if self.adapter.paced() else math.ceil(self.listed / MACHINES_PER_GET)
        return self.polls > max(calls, cpu_bound)


class SharedStatuses:
    def __init__(self) -> None:
        self._adapters: dict[int, _Adapter] = {}

    async def status(self, adapter: CloudProvider, ref: InstanceRef) -> InstanceStatus | None:
        """What `adapter.get(ref)` says, from the shared listing when another poll is under way."""
        entry = self._adapters.get(id(adapter))
        if entry is None:  # the entry holds the adapter: its id is not reused while the entry lives
            entry = self._adapters[id(adapter)] = _Adapter(adapter, FreshListing(_indexed(adapter)))
        entry.polls += 1
        try:
            if entry.join_listing():
                try:
                    (index,) = await entry.listing.get()
                except _NoListing:
                    entry.listable = False
                else:
                    entry.listed = len(index)
                    listed = index.get(ref.instance_id)
                    if listed is not None:
                        return listed
            return await adapter.get(ref)
        finally:
            entry.polls -= 1
            if not entry.polls and self._adapters.get(id(adapter)) is entry:
                del self._adapters[id(adapter)]

    def __len__(self) -> int:
        """Adapters with a poll under way (one with none is forgotten)."""
        return len(self._adapters)

    def polls(self) -> int:
        """Polls under way, over every adapter."""
        return sum(e.polls for e in self._adapters.values())


def _indexed(adapter: CloudProvider) -> Callable[[], Awaitable[list[dict[str, InstanceStatus]]]]:
    """The adapter's listing as one index by instance id (FreshListing hands each caller a copy of
    the list: of one item, not of every machine)."""
    async def fetch() -> list[dict[str, InstanceStatus]]:
        listed = await adapter.list_machines()
        if listed is None:
            raise _NoListing(adapter.id)
        return [{s.ref.instance_id: s for s in listed}]
    return fetch

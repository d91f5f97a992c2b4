"""The adapter's real call sequence against its simulation, every exchange recorded for the oracle.

`lifecycle`: verify, offers, create (an SSH key, and ports where the cloud opens them), get until
running, list_owned, find, terminate, get until gone, release. `refusals`: each error the contract
maps — capacity, quota, rate limit, 5xx (faults the simulation injects: fakeclouds/faults.py) and a
bad credential — raised as its contract error. Both return the recorded exchanges; the per-cloud
modules (tests/<cloud>/test_vendor_spec.py) check them against the vendor's spec.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from fakeclouds.server import FakeCloudServer
from providers.base import (
    AuthError,
    CapacityError,
    CloudProvider,
    InstanceState,
    InstanceStatus,
    LaunchSpec,
    Offer,
    OfferQuery,
    QuotaError,
    RateLimited,
    Transient,
)
from tests.eventually import eventually
from tests.fakeclouds.helpers import WITHIN
from tests.specs.oracle import Exchanges


@dataclass
class Cloud:
    """How to drive one cloud's adapter (each cloud's conftest has its own helpers)."""

    facade: str
    sim: FakeCloudServer
    adapter: Callable[[str | None], CloudProvider]  # token (None: the right one)
    offer: Callable[[CloudProvider], Awaitable[Offer]]
    spec: Callable[..., LaunchSpec]  # (adapter, **LaunchSpec fields)
    ports: tuple[int, ...] = (8080,)  # asked for on create, where the cloud opens ports


def _running(st: InstanceStatus | None) -> bool:
    return st is not None and st.state == InstanceState.RUNNING


def _gone(st: InstanceStatus | None) -> bool:
    return st is None or st.state == InstanceState.TERMINATED


async def lifecycle(cloud: Cloud) -> Exchanges:
    p = cloud.adapter(None)
    async with p:
        rec = Exchanges.attach(p)
        assert await p.verify()
        offers = await p.offers(OfferQuery())
        assert offers, "the simulation offers something"
        offer = await cloud.offer(p)
        extra: dict[str, Any] = {"ports": list(cloud.ports)} if cloud.ports else {}
        s = cloud.spec(p, **extra)
        ref = await p.create(offer, s)
        await eventually(lambda: p.get(ref), until=_running, within=WITHIN, what="running")
        assert ref.instance_id in {r.instance_id for r in await p.list_owned()}
        found = await p.find(s.key)
        assert found is not None and found.instance_id == ref.instance_id
        await p.terminate(ref)
        await eventually(lambda: p.get(ref), until=_gone, within=WITHIN, what="gone")
        await eventually(_released(p, s.key), within=WITHIN, what="released")
        return rec


def _released(p: CloudProvider, key: str) -> Callable[[], Awaitable[bool]]:
    async def attempt() -> bool:
        try:
            await p.release(key)
        except Transient:  # a side resource still in use by the machine going away
            return False
        return True
    return attempt


async def one_create(cloud: Cloud, fault: str | None = None, **params: Any) -> Exchanges:
    """One create (refused by `fault` when given, else terminated after), for the mutation tests."""
    p = cloud.adapter(None)
    async with p:
        offer = await cloud.offer(p)
        rec = Exchanges.attach(p)
        extra: dict[str, Any] = {"ports": list(cloud.ports)} if cloud.ports else {}
        if fault is None:
            await p.terminate(await p.create(offer, cloud.spec(p, **extra)))
            return rec
        cloud.sim.admin.add_fault(cloud.facade, "create", fault, times=-1, **params)
        try:
            with pytest.raises(Exception):  # noqa: B017 — which one is the refusal tests' business
                await p.create(offer, cloud.spec(p, **extra))
        finally:
            cloud.sim.admin.clear_faults()
        return rec


# (fault kind, fault params, the contract error it maps to)
REFUSALS: list[tuple[str, dict[str, Any], type[Exception]]] = [
    ("capacity", {}, CapacityError),
    ("quota", {}, QuotaError),
    ("rate_limit", {"retry_after": 0.01}, RateLimited),
    ("server_error", {"status": 500}, Transient),
    ("server_error", {"status": 503}, Transient),
]


async def refusals(cloud: Cloud) -> Exchanges:
    """Every refusal the contract maps, on a create (the call every kind applies to), then a bad token."""
    p = cloud.adapter(None)
    async with p:
        rec = Exchanges.attach(p)
        offer = await cloud.offer(p)
        for kind, params, error in REFUSALS:
            # forever while this create runs: an adapter that retries a 429/5xx itself still ends refused
            cloud.sim.admin.add_fault(cloud.facade, "create", kind, times=-1, **params)
            try:
                with pytest.raises(error):
                    await p.create(offer, cloud.spec(p))
            finally:
                cloud.sim.admin.clear_faults()
        bad = cloud.adapter("wrong-token-FAKE")
        async with bad:
            bad_rec = Exchanges.attach(bad)
            with pytest.raises(AuthError):
                await bad.verify()
        rec.seen.extend(bad_rec.seen)
        return rec

"""The conformance checks every adapter must pass against its simulated cloud.

Each check is a plain async function of a Harness, so it can also be pointed at a
deliberately broken adapter to prove the check catches the bug. Checks clean up what they
create; the fixture resets the cloud afterwards as a second line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fakeclouds import clouds
from messages.ids import allocation_of_key, attempt_key
from providers import pacing, registry
from providers.base import (
    AuthError,
    CapacityError,
    CloudProvider,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchRequirements,
    LaunchSpec,
    Offer,
    OfferQuery,
    Ownership,
    QuotaError,
    RateLimited,
    Transient,
    Unsupported,
    on_launch_send,
)
from providers.lambda_ import LambdaProvider
from tests.conformance.clouds import Harness, new_installation_id
from tests.eventually import eventually

POLL = 0.05
WAIT_RUNNING = 20.0
WAIT_GONE = 20.0

Check = Callable[[Harness], Awaitable[None]]


async def cheapest(p: CloudProvider) -> Offer:
    offers = await p.offers(OfferQuery(spot=False))
    assert offers, f"{p.id}: no on-demand offer available"
    return offers[0]


async def wait_for(p: CloudProvider, ref: InstanceRef, done: Callable[[InstanceStatus | None], bool],
                   within: float) -> list[InstanceStatus | None]:
    """Poll get() until `done`; returns every status seen (for asserting the path taken)."""
    seen: list[InstanceStatus | None] = []

    async def read() -> InstanceStatus | None:
        seen.append(await p.get(ref))
        return seen[-1]

    await eventually(read, until=done, within=within, what=f"{p.id}: {ref.instance_id}'s state",
                     detail=lambda: f"states seen: {[s and s.state for s in seen]}")
    return seen


def _gone(st: InstanceStatus | None) -> bool:
    return st is None or st.state == InstanceState.TERMINATED


async def _terminate_all(p: CloudProvider, refs: list[InstanceRef]) -> None:
    for ref in {r.instance_id: r for r in refs}.values():
        await p.terminate(ref)


async def check_listed_as(h: Harness, p: CloudProvider, ref: InstanceRef,
                          status: InstanceStatus | None) -> None:
    """The listing the watch reads (`list_machines`) says what `get` said: the same state, address
    and key for a machine `get` shows, nothing alive for one it shows gone. And it costs no more calls
    than the adapter says (`listing_calls`: booting machines' polls share it on that figure)."""
    shared = p.listing_calls(0) is not None  # None: booting polls never share its listing, nothing to count
    before = await h.admin_do("call_counts") if shared else {}
    listed = await p.list_machines()
    if listed is None:
        return  # the adapter has no state-bearing listing: the watch asks `get` for each machine
    calls = p.listing_calls(len(listed))
    if shared and calls is not None:
        after = await h.admin_do("call_counts")
        made = sum(n for counts in after.values() for n in counts.values()) \
            - sum(n for counts in before.values() for n in counts.values())
        assert made <= calls, f"{p.id}: list_machines made {made} calls, listing_calls says {calls}"
    mine = [s for s in listed if s.ref.instance_id == ref.instance_id]
    if status is None:
        assert all(s.state == InstanceState.TERMINATED for s in mine), f"{p.id}: gone but listed {mine}"
        return
    assert len(mine) == 1, f"{p.id}: list_machines shows {len(mine)} entries for {ref.instance_id}"
    got = mine[0]
    assert (got.state, got.host, got.ssh_port, got.ssh_user) == \
        (status.state, status.host, status.ssh_port, status.ssh_user), (got, status)
    assert (got.ref.key, got.ref.provider) == (ref.key, ref.provider), got.ref
    assert got.ref.is_machine


# --------------------------------------------------------------------------- checks


async def check_verify(h: Harness) -> None:
    async with h.provider() as p:
        identity = await p.verify()
        assert isinstance(identity, str) and identity.strip()
        assert h.token not in identity, "identity must not echo the secret"
    async with h.provider(token="wrong-token") as bad:
        with pytest.raises(AuthError):
            await bad.verify()
        with pytest.raises(AuthError):
            await bad.offers(OfferQuery())


async def check_offers(h: Harness) -> None:
    async with h.provider() as p:
        caps = type(p).capabilities
        offers = await p.offers(OfferQuery())
        assert offers, "no offers at all"
        for o in offers:
            assert o.provider == p.id and o.instance_type and o.region
            assert o.vcpus > 0 and o.memory_gib > 0 and o.price_per_hour > 0
            assert o.available
            assert not caps.regions or o.region in caps.regions, f"{o.region} missing from capabilities"
            if o.gpu is not None:
                assert o.gpu.name and o.gpu.count >= 1 and o.gpu.memory_gib and o.gpu.memory_gib > 0
        prices = [o.price_per_hour for o in offers]
        assert prices == sorted(prices), "offers must come cheapest first"

        spot = await p.offers(OfferQuery(spot=True))
        on_demand = await p.offers(OfferQuery(spot=False))
        assert on_demand and all(not o.spot for o in on_demand)
        if caps.spot:
            assert spot and all(o.spot for o in spot)
        else:
            assert spot == [], "a cloud without spot must offer none"

        gpu_names = {o.gpu.name for o in offers if o.gpu}
        for name in gpu_names:
            got = await p.offers(OfferQuery(gpu=name.lower()))
            expected = [o for o in offers if o.gpu and o.gpu.name == name]
            assert got == expected, f"gpu filter {name.lower()!r}"
        assert await p.offers(OfferQuery(gpu="no-such-gpu")) == []
        region = offers[0].region
        assert all(o.region == region for o in await p.offers(OfferQuery(region=region)))


# Clouds whose API reports no creation time of a machine, and where that is documented (their refs'
# created_at stays None; every other built-in cloud must give it).
WITHOUT_CREATION_TIME = {
    LambdaProvider.id: "Lambda Cloud API 1.8.3/1.10 `Instance` has no time field",
}
# Cloud timestamps come rounded (moto's LaunchTime to the second, GCP's to the millisecond).
CREATED_AT_SLACK = timedelta(seconds=1.5)


def assert_created_within(cloud: str, refs: list[InstanceRef], lo: datetime, hi: datetime) -> None:
    """Each ref carries the cloud's creation time of its machine, aware and inside [lo, hi] (give or
    take the cloud's rounding) — or None where the cloud's API has no such field."""
    for ref in refs:
        if ref.created_at is None:
            builtin = cloud in {e.id for e in registry.BUILTIN}
            assert cloud in WITHOUT_CREATION_TIME or not builtin, (
                f"{cloud}: a ref of {ref.instance_id} has no created_at, though the cloud's API gives one")
            continue
        assert ref.created_at.tzinfo is not None, f"{cloud}: created_at must be timezone-aware"
        assert lo - CREATED_AT_SLACK <= ref.created_at <= hi + CREATED_AT_SLACK, (
            f"{cloud}: created_at {ref.created_at.isoformat()} outside the create's window "
            f"[{lo.isoformat()}, {hi.isoformat()}]")


async def check_create_idempotent(h: Harness) -> None:
    """Same key twice -> one machine; a create whose answer was lost, retried -> still one. The
    machine found after the lost answer carries the cloud's own creation time, from the time of the
    lost create (the spend ledger starts there)."""
    async with h.provider() as p:
        offer = await cheapest(p)
        made: list[InstanceRef] = []
        try:
            before = await h.machine_ids()
            spec = h.spec()
            first = await p.create(offer, spec)
            made.append(first)
            second = await p.create(offer, spec)
            made.append(second)
            new = await h.machine_ids() - before
            assert len(new) == 1, f"same key twice made {len(new)} machines"
            assert (second.instance_id, second.key) == (first.instance_id, spec.key), "retry got another ref"

            before = await h.machine_ids()
            lost = h.spec()
            await h.add_fault("create", "lose_response")
            sent = datetime.now(UTC)
            with pytest.raises(Transient):
                await p.create(offer, lost)
            retried = await p.create(offer, lost)
            answered = datetime.now(UTC)
            made.append(retried)
            new = await h.machine_ids() - before
            assert new == {retried.instance_id}, f"retry after a lost answer made {len(new)} machines"
            found = await p.find(lost.key)
            assert found is not None and found.instance_id == retried.instance_id
            listed = [r for r in await p.list_owned() if r.instance_id == retried.instance_id]
            assert_created_within(h.cloud, [retried, found, *await p.find_all(lost.key), *listed],
                                  sent, answered)
        finally:
            await _terminate_all(p, made)


async def check_lifecycle(h: Harness) -> None:
    """pending -> running with an SSH address -> terminate -> gone; terminate twice is fine."""
    async with h.provider() as p:
        ref = await h.create_booting(p, await cheapest(p), h.spec())
        try:
            first = await p.get(ref)
            booting = {InstanceState.PENDING, InstanceState.RUNNING} if h.boots_before_first_look \
                else {InstanceState.PENDING}
            # What was seen, in the message: a real engine's container that exited at once says why.
            assert first is not None and first.state in booting, \
                f"first state must be pending, not {first and (first.state, first.detail)!r}"
            await h.boot_now(ref)
            seen = await wait_for(p, ref, lambda s: s is not None and s.state == InstanceState.RUNNING,
                                  WAIT_RUNNING)
            running = seen[-1]
            assert running is not None and running.host and running.ssh_port > 0
            assert running.ssh_user == type(p).capabilities.login_user
            await check_listed_as(h, p, ref, running)
            conn = asyncio.open_connection(running.host, running.ssh_port)
            reader, writer = await asyncio.wait_for(conn, 5)
            banner = await asyncio.wait_for(reader.readline(), 5)
            writer.close()
            assert banner.startswith(b"SSH-2.0"), "host/ssh_port must reach the machine's SSH server"
        finally:
            await p.terminate(ref)
        await wait_for(p, ref, _gone, WAIT_GONE)
        await check_listed_as(h, p, ref, None)
        await p.terminate(ref)  # already gone: success
        assert _gone(await p.get(ref))
        missing = ref.model_copy(update={"instance_id": "999999999"})
        assert await p.get(missing) is None
        await p.terminate(missing)


async def check_list_owned(h: Harness) -> None:
    """Exactly our machines: not another installation's on the same account."""
    ours_p = h.provider(installation_id=new_installation_id())
    theirs_id = new_installation_id()
    theirs_p = h.provider(installation_id=theirs_id)
    async with ours_p, theirs_p:
        offer = await cheapest(ours_p)
        ours = theirs = None
        try:
            ours = await ours_p.create(offer, h.spec(installation_id=ours_p.installation_id))
            theirs = await theirs_p.create(offer, h.spec(installation_id=theirs_id))
            assert [r.instance_id for r in await ours_p.list_owned()] == [ours.instance_id]
            assert [r.instance_id for r in await theirs_p.list_owned()] == [theirs.instance_id]
            assert (await ours_p.list_owned())[0].key == ours.key
            assert await ours_p.find(theirs.key) is None
        finally:
            if ours:
                await ours_p.terminate(ours)
            if theirs:
                await theirs_p.terminate(theirs)


async def check_capacity_and_quota(h: Harness) -> None:
    async with h.provider() as p:
        offer = await cheapest(p)
        before = await h.machine_ids()
        await h.add_fault("create", "capacity")
        with pytest.raises(CapacityError) as cap:
            await p.create(offer, h.spec())
        # The failure names what it blocks: this type in this region, nothing wider.
        scope = cap.value.scope
        assert (scope.provider, scope.region) == (p.id, offer.region), scope
        assert scope.instance_type in (None, offer.instance_type), scope
        assert scope.covers(offer), scope
        await h.add_fault("create", "quota")
        with pytest.raises(QuotaError) as quota:
            await p.create(offer, h.spec())
        assert quota.value.scope.provider == p.id
        assert await h.machine_ids() == before, "a refused create must leave nothing behind"


async def check_rate_limit(h: Harness) -> None:
    async with h.provider() as p:
        await h.add_fault("offers", "rate_limit", retry_after=3)
        with pytest.raises(RateLimited) as exc:
            await p.offers(OfferQuery())
        assert exc.value.retry_after == pytest.approx(3.0)
        assert await p.offers(OfferQuery()), "the rule was used up; the next call succeeds"


async def check_server_error(h: Harness) -> None:
    async with h.provider() as p:
        for op, call in (("offers", lambda: p.offers(OfferQuery())), ("list", p.list_owned)):
            await h.add_fault(op, "server_error", status=503)
            with pytest.raises(Transient):
                await call()
            await call()  # the fault was used up


async def check_unsupported(h: Harness) -> None:
    """Capabilities refuse what the cloud cannot do, with the cloud's reason; create does too."""
    async with h.provider() as p:
        caps = type(p).capabilities
        if caps.k3s == "none":
            assert caps.k3s_reason, "k3s 'none' must say why"
        cases = [
            (LaunchRequirements(spot=True), caps.spot, None),
            (LaunchRequirements(ports=[8080]), caps.ports, caps.ports_reason),
            (LaunchRequirements(max_hours=1), caps.max_lifetime_h is not None, None),
        ]
        if not caps.image_pattern:  # any image name, or none (else: its form, below)
            cases.append((LaunchRequirements(image="ubuntu:24.04"), caps.custom_image, None))
        for req, supported, reason in cases:
            if supported:
                caps.check(req)
                continue
            with pytest.raises(Unsupported) as exc:
                caps.check(req)
            assert caps.display_name in exc.value.message or (reason and exc.value.message == reason)
        if caps.image_pattern:  # one form of image name: another is refused with the request (and by
            # create, before the adapter's launch: tests/conformance/test_adapter_template.py)
            assert caps.custom_image and caps.image_form, "an image form needs custom images and its words"
            with pytest.raises(InvalidRequest) as refused:
                caps.check(LaunchRequirements(image="not an image"))
            assert refused.value.message == caps.image_form
        if caps.regions:
            with pytest.raises(Unsupported):
                caps.check(LaunchRequirements(region="no-such-region-1"))
            caps.check(LaunchRequirements(region=caps.regions[0]))
        if not caps.ports:
            before = await h.machine_ids()
            with pytest.raises(Unsupported):
                await p.create(await cheapest(p), h.spec(ports=[8080]))
            assert await h.machine_ids() == before
        if caps.max_lifetime_h is not None:  # --max-hours: no more than the cloud's own cap
            with pytest.raises(Unsupported, match="--max-hours"):
                caps.check(LaunchRequirements(max_hours=caps.max_lifetime_h + 1))


async def side_resources_of(h: Harness, key: str) -> list[dict[str, Any]]:
    """The simulated account's side resources (e.g. Lambda SSH key objects) whose name carries `key`."""
    rows = await h.admin_do("side_resources")
    return [r for r in rows if r["facade"] == h.cloud and key in r["name"]]


async def terminate_by_key(p: CloudProvider, key: str) -> None:
    """What terminate_and_verify does with the primitives: terminate every machine find_all shows
    under the key, wait until each is gone, then release the key's side resources."""
    found = await p.find_all(key)
    for ref in found:
        await p.terminate(ref)
    for ref in found:
        await wait_for(p, ref, _gone, WAIT_GONE)
    assert await p.find_all(key) == [], "find_all still lists machines seen gone"
    await p.release(key)


# Clouds whose adapter sends all of a key's calls through one queue (providers/pacing.py: Lambda's).
ONE_CALL_AT_A_TIME = frozenset({"lambda"})


@contextlib.contextmanager
def unpaced() -> Iterator[None]:
    """This process's pacers off (GPUPROV_CLOUD_TIME_SCALE 0) for the block: the simulation's limits
    stay on."""
    before = os.environ.get(pacing.TIME_SCALE_ENV)
    os.environ[pacing.TIME_SCALE_ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(pacing.TIME_SCALE_ENV, None)
        else:
            os.environ[pacing.TIME_SCALE_ENV] = before


async def check_find_all_and_terminate_by_key(h: Harness) -> None:
    """Two creates racing past the lookup under one key: two machines where the cloud allows
    duplicate names, else one. find_all finds every one; terminate-by-key removes them all."""
    async with h.provider() as p:
        offer = await cheapest(p)
        spec = h.spec()
        before = await h.machine_ids()
        one_queue = h.cloud in ONE_CALL_AT_A_TIME
        if not one_queue:
            # Each create's launch is held until both have arrived: by then both lookups found nothing.
            # An adapter that sends one call at a time (Lambda's pacer) never has two launches in
            # flight, so a barrier would hold the first for good; its queue (first come, first served)
            # already runs both lookups before either launch.
            await h.add_fault("create", "barrier", times=2)
        refs: list[InstanceRef] = []
        try:
            # A pacer per endpoint (Vast.ai's) would hold the second launch behind the first, which the
            # barrier holds: the race runs unpaced there (the adapter retries the 429s it then meets).
            with contextlib.nullcontext() if one_queue else unpaced():
                refs += await asyncio.gather(p.create(offer, spec), p.create(offer, spec))
            made = await h.machine_ids() - before
            unique = clouds.facade(h.cloud).names.unique
            assert len(made) == (1 if unique else 2), f"racing creates made {len(made)} machines"
            assert {r.instance_id for r in refs} == made
            found = await p.find_all(spec.key)
            assert {r.instance_id for r in found} == made, "find_all must find every machine of the key"
            assert all(r.key == spec.key for r in found)
            assert await p.find_all(h.spec().key) == []
            await terminate_by_key(p, spec.key)
            assert [r for r in await p.list_owned() if r.key == spec.key] == []
            assert await side_resources_of(h, spec.key) == []
        finally:
            await _terminate_all(p, refs)  # whatever an assertion above left


def side_resource_spec(h: Harness) -> LaunchSpec:
    """A spec whose create makes the cloud's side resources: with a port where the cloud opens ports
    (Lambda makes a machine's firewall ruleset only then)."""
    return h.spec(ports=[8080]) if registry.capabilities(h.cloud).ports else h.spec()


async def check_release(h: Harness) -> None:
    """No side resource outlives terminate-by-key: neither a machine's, nor those a create made
    before a launch that never happened (a 5xx after the side resources were registered)."""
    async with h.provider() as p:
        offer = await cheapest(p)
        spec = side_resource_spec(h)
        ref = await p.create(offer, spec)
        await p.terminate(ref)
        await wait_for(p, ref, _gone, WAIT_GONE)
        await p.release(spec.key)
        assert await side_resources_of(h, spec.key) == [], "release left a terminated machine's side resource"

        failed = side_resource_spec(h)
        before = await h.machine_ids()
        await h.add_fault("create", "server_error", status=503)
        with pytest.raises(Transient):
            await p.create(offer, failed)
        assert await h.machine_ids() == before, "the launch was refused: nothing was made"
        if type(p).capabilities.side_resources:
            # The leak this guards against: the side resources exist, no machine carries the key.
            assert await side_resources_of(h, failed.key), "expected the create's side resources"
        await terminate_by_key(p, failed.key)
        assert await side_resources_of(h, failed.key) == [], "release left a side resource"
        await p.release(failed.key)  # nothing left: success


async def check_list_owned_reports_leftover_side_resources(h: Harness) -> None:
    """A side resource whose machine never came (a launch refused after it was made) is listed by
    list_owned — as a side resource, never as a machine — so the sweep can release it."""
    if not registry.capabilities(h.cloud).side_resources:
        return  # nothing but machines to list (local); the machine checks cover it
    async with h.provider() as p:
        failed = side_resource_spec(h)
        await h.add_fault("create", "server_error", status=503)
        with pytest.raises(Transient):
            await p.create(await cheapest(p), failed)
        try:
            listed = [r for r in await p.list_owned() if r.key == failed.key]
            assert listed and not any(r.is_machine for r in listed), f"expected side resources: {listed}"
            assert await p.find_all(failed.key) == [] and await p.find(failed.key) is None
        finally:
            await p.release(failed.key)
        assert [r for r in await p.list_owned() if r.key == failed.key] == []


async def check_spot(h: Harness) -> None:
    """Where a cloud's capabilities offer spot, its spot offers are priced below on-demand for the
    same type and place, and a spot offer launches a spot machine; a cloud without spot offers none."""
    async with h.provider() as p:
        spot = await p.offers(OfferQuery(spot=True))
        if not type(p).capabilities.spot:
            assert spot == [], "a cloud without spot must offer no spot offer"
            return
        assert spot, "spot is a capability: expected spot offers"
        on_demand = {(o.instance_type, o.region, o.zone): o.price_per_hour
                     for o in await p.offers(OfferQuery(spot=False))}
        paired = [(o, on_demand[(o.instance_type, o.region, o.zone)]) for o in spot
                  if (o.instance_type, o.region, o.zone) in on_demand]
        assert paired, "no spot offer has an on-demand twin to compare prices with"
        dearer = [(o.instance_type, o.region, o.price_per_hour, price) for o, price in paired
                  if o.price_per_hour >= price]
        assert dearer == [], "spot must be priced below on-demand"
        before = await h.machine_ids()
        ref = await p.create(min(spot, key=lambda o: o.price_per_hour), h.spec())
        try:
            [made] = await h.machine_ids() - before
            machine = await h.admin_do("machine", made)
            assert machine["spot"] is True, "a spot offer must launch a spot machine"
        finally:
            await p.terminate(ref)
            await wait_for(p, ref, _gone, WAIT_GONE)


async def check_list_owned_without_allocation(h: Harness) -> None:
    """The sweep's input: list_owned lists a machine whose allocation no database knows, under a key
    that names that allocation (messages.ids.allocation_of_key)."""
    async with h.provider() as p:
        allocation = f"zz{uuid.uuid4().hex[:8]}"
        key = attempt_key(allocation, 1)
        spec = h.spec(key).model_copy(
            update={"owner": Ownership(installation_id=p.installation_id, allocation_id=allocation)})
        ref = await p.create(await cheapest(p), spec)
        try:
            listed = [r for r in await p.list_owned() if r.instance_id == ref.instance_id]
            assert len(listed) == 1 and listed[0].key == key
            assert allocation_of_key(listed[0].key) == allocation
        finally:
            await p.terminate(ref)


async def check_launch_send_is_marked(h: Harness) -> None:
    """A cloud without an idempotency token (`create_in_flight_s` > 0) marks the moment its launch
    request leaves (providers/base.py `launch_request`): the create activity records the send then,
    so a create that fails before it does not make its retry wait the window. The mark comes after
    the lookup and the side resources (the cloud has no machine under the key yet) and once per
    launch; a create that fails before its launch, or finds its machine, marks nothing. A create
    under a key nothing was ever sent under launches without looking it up."""
    async with h.provider() as p:
        if type(p).capabilities.create_in_flight_s <= 0:
            return
        offer = await cheapest(p)
        marks: list[set[str]] = []

        async def hook() -> None:
            marks.append(await h.machine_ids())  # what the cloud had made as the launch left

        async def create(spec: LaunchSpec, where: Offer | None = None) -> InstanceRef:
            with on_launch_send(hook):
                return await p.create(where or offer, spec)

        made: list[InstanceRef] = []
        try:
            spec = h.spec()
            before = await h.machine_ids()
            ref = await create(spec)
            made.append(ref)
            assert marks == [before], f"{p.id}: {len(marks)} launch marks (1 expected), or after the launch"
            assert ref.instance_id not in marks[0]
            marks.clear()
            assert (await create(spec)).instance_id == ref.instance_id
            assert marks == [], f"{p.id}: a create that found its machine marked a launch"

            await h.add_fault("list", "server_error", status=503)  # the create's own lookup fails
            with pytest.raises(Transient):
                await create(h.spec())
            assert marks == [], f"{p.id}: a create that failed before its launch marked one"

            # Nothing ever sent under the key (LaunchSpec.unsent: the create activity's ledger says
            # so): launched without the lookup, which would have failed.
            await h.add_fault("list", "server_error", status=503)
            # Another offer than the first create's where there is one: a marketplace listing may
            # hold a single machine (Prime Intellect's cheapest does), and that one is taken.
            first = (offer.instance_type, offer.region, offer.zone)
            others = [o for o in await p.offers(OfferQuery(spot=False))
                      if (o.instance_type, o.region, o.zone) != first]
            unsent_spec = h.spec().model_copy(update={"unsent": True})
            unsent = await create(unsent_spec, others[0] if others else offer)
            made.append(unsent)
            assert len(marks) == 1 and unsent.instance_id not in marks[0], f"{p.id}: {len(marks)} marks"
            marks.clear()
            await h.admin_do("clear_faults")

            await h.add_fault("create", "server_error", status=500)  # the launch itself is refused
            refused = h.spec()
            with pytest.raises(Transient):
                await create(refused)
            assert len(marks) == 1, f"{p.id}: a refused launch left, yet {len(marks)} marks"
            made += await p.find_all(refused.key)
        finally:
            await h.admin_do("clear_faults")
            await _terminate_all(p, made)


ALL_CHECKS: list[Check] = [
    check_verify,
    check_offers,
    check_create_idempotent,
    check_lifecycle,
    check_list_owned,
    check_capacity_and_quota,
    check_rate_limit,
    check_server_error,
    check_unsupported,
    check_find_all_and_terminate_by_key,
    check_release,
    check_list_owned_without_allocation,
    check_list_owned_reports_leftover_side_resources,
    check_spot,
    check_launch_send_is_marked,
]

"""Every registered adapter against its simulated cloud, plus proof the suite catches a bug."""

from __future__ import annotations

import contextlib
from typing import Any
from unittest import mock

import pytest

from fakeclouds import clouds
from providers.base import InstanceRef, LaunchSpec, Offer, launch_leaving, launch_request
from providers.lambda_ import LambdaProvider
from providers.local import LocalProvider
from tests.conformance import checks, remote_calls
from tests.conformance.clouds import Harness, production_clouds
from tests.conformance.conftest import make_harness

# Each test builds what it needs from session fixtures: pytest-xdist may spread them (tests/tiers.py).
TESTS_RUN_APART = True


def test_every_adapter_has_a_simulated_cloud() -> None:
    known = production_clouds()
    assert {"local", "lambda"} <= set(known)
    missing = [c for c in known if c not in clouds.simulated()]
    assert missing == [], "every cloud in the registry needs a simulation facade (fakeclouds/clouds.py)"


@pytest.mark.parametrize("check", checks.ALL_CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
async def test_conformance(harness: Harness, check: checks.Check) -> None:
    """The check, and the remote calls the adapter made during it: the ones pinned (remote_calls.py)."""
    await harness.admin_do("clear_calls")
    await check(harness)
    seen = await harness.admin_do("calls")
    remote_calls.compare(harness.cloud, check.__name__.removeprefix("check_"),
                         remote_calls.named(seen, harness.cloud))


class DoubleCreatingFakeLambdaProvider(LambdaProvider):
    """Broken on purpose: launches without looking the name up first."""

    async def create(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        name = self._name(spec.key)
        data = await self._data("POST", "/instance-operations/launch", json={
            "region_name": offer.region, "instance_type_name": offer.instance_type,
            "ssh_key_names": [await self._key_object(spec.ssh_public_keys[0])], "quantity": 1, "name": name,
        })
        return InstanceRef(provider=self.id, instance_id=str(data["instance_ids"][0]), key=spec.key,
                           region=offer.region)


class ForgetfulFakeLocalProvider(LocalProvider):
    """Broken on purpose: drops the cloud's creation time the listing gives."""

    def _ref(self, m: dict[str, Any]) -> InstanceRef:
        return super()._ref(m).model_copy(update={"created_at": None})


async def test_suite_catches_an_adapter_without_the_clouds_creation_time(fake_server: Any) -> None:
    h = make_harness(LocalProvider.id, fake_server, provider_cls=ForgetfulFakeLocalProvider)
    await h.admin_do("clear_faults")
    try:
        with pytest.raises(AssertionError, match="has no created_at"):
            await checks.check_create_idempotent(h)
    finally:
        await h.admin_do("reset")


async def test_suite_catches_a_double_creating_adapter(fake_server: Any) -> None:
    h = make_harness("lambda", fake_server, provider_cls=DoubleCreatingFakeLambdaProvider)
    await h.admin_do("clear_faults")
    try:
        with pytest.raises(AssertionError, match="same key twice made 2 machines"):
            await checks.check_create_idempotent(h)
    finally:
        await h.admin_do("reset")


class LeakyFakeLambdaProvider(LambdaProvider):
    """Broken on purpose: the contract's default release (nothing), so a machine's firewall ruleset
    outlives it (refused while the machine terminates, it is left to release)."""

    async def release(self, key: str) -> None:
        return None


class FindOneFakeLambdaProvider(LambdaProvider):
    """Broken on purpose: find_all sees only the first machine of a name."""

    async def find_all(self, key: str) -> list[InstanceRef]:
        found = await self.find(key)
        return [found] if found else []


@pytest.mark.parametrize(("cls", "check", "message"), [
    (LeakyFakeLambdaProvider, checks.check_release, "expected the create's side resources|release left"),
    (FindOneFakeLambdaProvider, checks.check_find_all_and_terminate_by_key, "find_all must find every"),
], ids=["leaky-release", "find-one"])
async def test_suite_catches_terminate_by_key_bugs(fake_server: Any, cls: type[LambdaProvider],
                                                   check: checks.Check, message: str) -> None:
    h = make_harness("lambda", fake_server, provider_cls=cls)
    await h.admin_do("clear_faults")
    try:
        with pytest.raises(AssertionError, match=message):
            await check(h)
    finally:
        await h.admin_do("reset")
        # what the broken adapter left, should the reset keep it (the account's SSH keys outlive one)
        paths = {"ssh-key": "/ssh-keys", "firewall-ruleset": "/firewall-rulesets"}
        async with make_harness("lambda", fake_server).provider(installation_id=h.installation_id) as p:
            for r in await fake_server.admin.aio.side_resources():
                if h.installation_id in r["name"] and r["kind"] in paths:
                    await p._call("DELETE", f"{paths[r['kind']]}/{r['id']}", allow=(404,))


class EarlyMarkingFakeLambdaProvider(LambdaProvider):
    """Broken on purpose: marks its launch as its create starts — before its lookup, key setup and
    pacing, where the create activity used to record the send."""

    async def create(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        with launch_request():
            await launch_leaving()
        return await super().create(offer, spec)


class UnmarkedFakeLambdaProvider(LambdaProvider):
    """Broken on purpose: launches without marking it (a retry after a lost answer would not wait)."""

    async def create(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        with mock.patch("providers.lambda_.launch_request", contextlib.nullcontext):
            return await super().create(offer, spec)


@pytest.mark.parametrize("cls", [EarlyMarkingFakeLambdaProvider, UnmarkedFakeLambdaProvider],
                         ids=["marked-early", "unmarked"])
async def test_suite_catches_a_launch_marked_early_or_not_at_all(fake_server: Any,
                                                                 cls: type[LambdaProvider]) -> None:
    h = make_harness("lambda", fake_server, provider_cls=cls)
    await h.admin_do("clear_faults")
    try:
        with pytest.raises(AssertionError, match=r"launch marks \(1 expected\)"):
            await checks.check_launch_send_is_marked(h)
    finally:
        await h.admin_do("reset")


class ChattyFakeLambdaProvider(LambdaProvider):
    """Changed on purpose: verifies with a second call, as an SDK upgrade might."""

    async def verify(self) -> str:
        await self._list("/instances")
        return await super().verify()


async def test_pinned_remote_calls_catch_an_adapter_that_calls_differently(fake_server: Any) -> None:
    h = make_harness("lambda", fake_server, provider_cls=ChattyFakeLambdaProvider)
    await h.admin_do("clear_calls")
    await checks.check_verify(h)
    seen = remote_calls.named(await h.admin_do("calls"), "lambda")
    assert "GET /instances" in seen and "GET /ssh-keys" in seen
    with pytest.raises(AssertionError, match=r"new \['GET /instances'\], no longer \[\]"):
        remote_calls.compare("lambda", "verify", seen)

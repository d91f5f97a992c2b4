"""The installation's SSH key object on the simulated Lambda: registered once, named in every launch,
never a machine's side resource; one deleted from the account is registered again; a per-machine key
object as launches made them before 2026-12 is still listed and released."""

from __future__ import annotations

from typing import Any

import asyncssh
import pytest

from fakeclouds.server import FakeCloudServer
from providers.account_objects import key_object_name
from providers.base import Transient
from providers.lambda_ import LambdaProvider, instance_name
from tests.lambda_.conftest import adapter, offer, spec


def fresh_key() -> str:
    """A public key no other test registered (the admin's reset keeps the account's keys, and a key
    the account already holds under any name is reused)."""
    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


def key_objects(sim: FakeCloudServer, public_key: str) -> list[dict[str, Any]]:
    material = " ".join(public_key.split()[:2])
    return [k for k in sim.engine.ssh_keys["lambda"].values() if k["public_key"].startswith(material)]


def registrations(sim: FakeCloudServer) -> int:
    return int(sim.admin.call_counts().get("lambda", {}).get("POST /ssh-keys", 0))


async def test_the_key_object_is_registered_once_and_outlives_the_machines(sim: FakeCloudServer,
                                                                          p: LambdaProvider) -> None:
    public = fresh_key()
    sim.admin.clear_calls()
    refs = [await p.create(await offer(p), spec(p, ssh_public_keys=[public])) for _ in range(2)]
    async with adapter(sim, p.installation_id) as again:  # another worker of the installation
        refs.append(await again.create(await offer(again), spec(again, ssh_public_keys=[public])))

    name = key_object_name(p.installation_id, public)
    assert [k["name"] for k in key_objects(sim, public)] == [name]
    assert registrations(sim) == 1
    assert {tuple(sim.admin.machine(r.instance_id)["extra"]["ssh_key_names"]) for r in refs} == {(name,)}

    sim.admin.clear_calls()
    for ref in refs:
        await p.terminate(ref)
        await p.release(ref.key)
    assert [k["name"] for k in key_objects(sim, public)] == [name], "no machine's terminate removes it"
    # The account showed no per-machine key object of the installation: nothing to look for.
    assert "GET /ssh-keys" not in sim.admin.call_counts()["lambda"]
    assert [r for r in await p.list_owned() if name.endswith(r.key)] == [], "the sweep never sees it"


async def test_a_key_object_deleted_from_the_account_is_registered_again(sim: FakeCloudServer,
                                                                        p: LambdaProvider) -> None:
    public = fresh_key()
    await p.create(await offer(p), spec(p, ssh_public_keys=[public]))
    [held] = key_objects(sim, public)
    sim.engine.delete_ssh_key("lambda", held["id"])  # by hand, in the dashboard
    machines = len(sim.admin.machines())

    s = spec(p, ssh_public_keys=[public])
    with pytest.raises(Transient, match="deleted from the account"):  # the launch named the key it knew
        await p.create(await offer(p), s)
    assert len(sim.admin.machines()) == machines, "the refused launch made nothing"
    ref = await p.create(await offer(p), s)  # the activity's retry
    [again] = key_objects(sim, public)
    assert again["id"] != held["id"]
    assert sim.admin.machine(ref.instance_id)["extra"]["ssh_key_names"] == [again["name"]]


async def test_a_per_machine_key_object_from_before_is_listed_and_released(sim: FakeCloudServer,
                                                                          p: LambdaProvider) -> None:
    await p.create(await offer(p), spec(p))  # the installation's own key object exists too
    key = "gp-older-a1"
    sim.engine.add_ssh_key("lambda", instance_name(p.installation_id, key), fresh_key())

    assert [(r.kind, r.key) for r in await p.list_owned() if not r.is_machine] == [("ssh-key", key)]
    await p.release(key)
    assert [r for r in await p.list_owned() if not r.is_machine] == []
    assert [k for k in sim.engine.ssh_keys["lambda"].values()
            if k["name"] == instance_name(p.installation_id, key)] == []


async def test_a_machines_own_key_object_holding_the_key_is_never_adopted(sim: FakeCloudServer,
                                                                        p: LambdaProvider) -> None:
    """An older launch's per-machine key object holds the same public key; its release deletes it,
    so launches name the installation's own."""
    public = fresh_key()
    sim.engine.add_ssh_key("lambda", instance_name(p.installation_id, "gp-older-a1"), public)
    ref = await p.create(await offer(p), spec(p, ssh_public_keys=[public]))
    name = key_object_name(p.installation_id, public)
    assert sim.admin.machine(ref.instance_id)["extra"]["ssh_key_names"] == [name]

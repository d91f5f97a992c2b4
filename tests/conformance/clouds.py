"""The conformance harness: an adapter paired with its simulated cloud, both found through the
registry (a new cloud needs no entry here)."""

from __future__ import annotations

import functools
import inspect
import uuid
from dataclasses import dataclass, field
from typing import Any

import asyncssh

from providers import registry
from providers.base import CloudProvider, InstanceRef, LaunchSpec, Offer, Ownership
from tests import simclouds

# Clouds checked against a real engine of their own instead of a simulation: docker (a real Docker
# Engine API, podman's where no Docker runs), whose applicable checks run in tests/docker_/test_docker.py
# through a fault-injecting proxy in front of the engine's socket.
REAL_ENGINE_CLOUDS = frozenset({"docker"})


def production_clouds() -> list[str]:
    """Every registered cloud (test-only adapters registered with register_for_tests excluded), but
    those of REAL_ENGINE_CLOUDS."""
    return [e.id for e in registry.entries() if e.id not in REAL_ENGINE_CLOUDS]


def new_installation_id() -> str:
    # [a-z0-9]{8}, like store.identity: never a prefix of another id, so name-prefix ownership is exact.
    return uuid.uuid4().hex[:8]


@functools.cache
def conformance_public_key() -> str:
    """A real OpenSSH public key (the simulated clouds parse what they are given)."""
    key = asyncssh.generate_private_key("ssh-ed25519", comment="conformance")
    return key.export_public_key().decode().strip()


def new_key() -> str:
    return f"conf-{uuid.uuid4().hex[:12]}"


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


@dataclass
class Harness:
    """One adapter paired with its simulated cloud, plus helpers the checks share."""

    cloud: str  # the registry id: the adapter and its simulation facade
    server: Any
    admin: Any
    installation_id: str = field(default_factory=new_installation_id)
    provider_cls: type[CloudProvider] | None = None  # override, e.g. a deliberately broken adapter
    # The machine may be up before anyone looks: a real engine whose boot nothing here can hold (a
    # simulation holds it: create_booting).
    boots_before_first_look: bool = False

    @property
    def token(self) -> str:
        return str(self.server.tokens[self.cloud])

    def provider(self, *, installation_id: str | None = None, token: str | None = None) -> CloudProvider:
        cls = self.provider_cls or registry.adapter_class(self.cloud)
        creds = cls.parse_credentials(simclouds.credentials(self.server, self.cloud, token))
        return cls(creds, options=simclouds.options(self.server, self.cloud),
                   installation_id=installation_id or self.installation_id)

    def spec(self, key: str | None = None, *, installation_id: str | None = None,
             **extra: Any) -> LaunchSpec:
        key = key or new_key()
        return LaunchSpec(
            key=key,
            owner=Ownership(installation_id=installation_id or self.installation_id, allocation_id=key),
            ssh_public_keys=[conformance_public_key()],
            **extra,
        )

    async def admin_do(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call the admin client whether its methods are sync or async."""
        return await _maybe_await(getattr(self.admin, method)(*args, **kwargs))

    async def create_booting(self, p: CloudProvider, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        """`p.create(offer, spec)`, the machine held booting (the simulation's `hold_boots`) until
        `boot_now`: however slow the host, a look at it finds it booting."""
        await self.admin_do("configure", hold_boots=True)
        try:
            return await p.create(offer, spec)
        finally:
            await self.admin_do("configure", hold_boots=False)

    async def boot_now(self, ref: InstanceRef) -> None:
        await self.admin_do("boot_now", ref.instance_id)

    async def add_fault(self, op: str, kind: str, times: int = 1, **params: Any) -> None:
        await self.admin_do("add_fault", self.cloud, op, kind, times=times, **params)

    async def machine_ids(self) -> set[str]:
        """Ids of every machine the cloud has ever made (terminated ones included)."""
        machines = await self.admin_do("machines")
        if isinstance(machines, dict):
            machines = machines.get("machines", [])
        return {str(m["id"]) for m in machines}

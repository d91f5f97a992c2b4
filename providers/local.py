"""The `local` cloud: our own simulated cloud serving real SSH machines on this host
(fakeclouds/README.md, "The `local` API"). Ownership is carried in labels; the machine
name is the idempotency key (names are unique among live machines)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from providers import rest
from providers.base import (
    Capabilities,
    FailureScope,
    GpuSpec,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    SelfEnd,
    Transient,
    rank_offers,
)
from providers.cloudtime import created_at
from providers.credentials import ApiKeyCredentials
from providers.listing import Listing

DEFAULT_ENDPOINT = "http://127.0.0.1:8765/local/v1"

LABEL_INSTALLATION = "gpuprov-installation"
LABEL_ALLOCATION = "gpuprov-allocation"
LABEL_KEY = "gpuprov-key"

_CODES: dict[str, rest.ErrorKind] = {
    "unauthorized": "auth",
    "insufficient_capacity": "capacity",
    "quota_exceeded": "quota",
    "rate_limited": "rate_limit",
    "invalid_request": "invalid",
}

_STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "terminating": InstanceState.TERMINATING,
    "terminated": InstanceState.TERMINATED,
    "error": InstanceState.ERROR,
}


class LocalProvider(rest.RestCloudProvider):
    id: ClassVar[str] = "local"
    credentials_model: ClassVar[type[ApiKeyCredentials]] = ApiKeyCredentials
    default_endpoint: ClassVar[str] = DEFAULT_ENDPOINT
    # No public API: the local cloud is only ever our own simulation, reached where the administrator
    # (or `make run`) allows it (GPUPROV_ALLOWED_ENDPOINTS).
    api_hosts: ClassVar[tuple[str, ...]] = ()
    error_codes: ClassVar[Mapping[str, rest.ErrorKind]] = _CODES
    listing: ClassVar[Listing] = Listing(
        tagline="Try gpuprov without any account",
        how_to_connect=("The local cloud runs simulated machines on this host: `make run` connects it with "
                        "its generated key ($GPUPROV_HOME/cloud-tokens.json). No account needed."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="local cloud",
        k3s="none",
        k3s_reason="the local cloud's machines are process sandboxes on this host; k3s cannot run there",
        ports=False,
        ports_reason="--port needs a firewall API; the local cloud's machines share this host's network",
        spot=True,
        custom_image=False,
        login_user="gpuprov",
        regions=["local-1", "local-2"],
        boot_timeout_s=300.0,  # our machines boot in about a second: minutes mean a broken boot
        self_end=SelfEnd(
            method="shutdown",
            how=("a guest shutdown ends the local cloud's machine and its (simulated) bill: the local "
                 "cloud is gpuprov's own simulation, whose shutdown is simulated and never reaches this "
                 "host"),
            command="sudo shutdown -h now",
        ),
    )

    # ------------------------------------------------------------------ plumbing

    def _ref(self, m: dict[str, Any]) -> InstanceRef:
        labels = m.get("labels") or {}
        return InstanceRef(provider=self.id, instance_id=str(m["id"]),
                           key=str(labels.get(LABEL_KEY) or m.get("name") or ""), region=m.get("region"),
                           created_at=created_at(m.get("created_at")))

    async def _machines(self, **params: str) -> list[dict[str, Any]]:
        body = self._json(await self._call("GET", "/machines", params=params))
        machines = body.get("machines") if isinstance(body, dict) else None
        if not isinstance(machines, list):
            raise Transient(f"{self.id}: unexpected machines listing")
        return machines

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        body = self._json(await self._call("GET", "/account"))
        with rest.parsing(self.id, "account"):
            return str(body.get("name") or body["id"])

    async def offers(self, query: OfferQuery) -> list[Offer]:
        if query.spot is True and not self.capabilities.spot:
            return []
        body = self._json(await self._call("GET", "/offers"))
        with rest.parsing(self.id, "offers"):
            out = [self._offer(o) for o in body["offers"]]
        return rank_offers(out, query)

    def _offer(self, o: dict[str, Any]) -> Offer:
        gpu = None
        if o.get("gpu_name") and o.get("gpu_count"):
            gpu = GpuSpec(name=o["gpu_name"], count=int(o["gpu_count"]), memory_gib=o.get("gpu_memory_gib"))
        return Offer(
            provider=self.id, instance_type=o["instance_type"], gpu=gpu, vcpus=int(o["vcpus"]),
            memory_gib=float(o["memory_gib"]), region=o["region"],
            price_per_hour=float(o["price_per_hour"]), spot=bool(o.get("spot", False)),
            available=bool(o.get("available", True)),
        )

    async def _lookup(self, key: str) -> dict[str, Any] | None:
        """The live machine named `key`, whoever owns it."""
        for m in await self._machines(name=key):
            if m.get("name") == key and m.get("status") != "terminated":
                return m
        return None

    async def _find_for_create(self, key: str) -> InstanceRef | None:
        m = await self._lookup(key)
        if m is None:
            return None
        if (m.get("labels") or {}).get(LABEL_INSTALLATION) != self.installation_id:
            # Never adopt someone else's machine as ours.
            raise InvalidRequest(f"{self.id}: machine name {key!r} is taken by another installation")
        with rest.parsing(self.id, "machine"):
            return self._ref(m)

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        found = await self._find_for_create(spec.key)
        if found is not None:
            return found
        payload = {
            "name": spec.key,
            "instance_type": offer.instance_type,
            "region": offer.region,
            "spot": offer.spot,
            "ssh_public_keys": spec.ssh_public_keys,
            "user_data": spec.user_data,
            "labels": {
                LABEL_INSTALLATION: self.installation_id,
                LABEL_ALLOCATION: spec.owner.allocation_id,
                LABEL_KEY: spec.key,
            },
            "ports": spec.ports,
        }
        scope = FailureScope(provider=self.id, region=offer.region, instance_type=offer.instance_type)
        resp = await self._call("POST", "/machines", json=payload, scope=scope,
                                allow=(409,))
        if resp.status_code == 409:
            # A concurrent/earlier create won the name: that machine is ours.
            found = await self._find_for_create(spec.key)
            if found is None:
                raise Transient(f"{self.id}: name {spec.key!r} conflicted but no live machine has it")
            return found
        with rest.parsing(self.id, "create"):
            return self._ref(self._json(resp))

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        resp = await self._call("GET", f"/machines/{ref.instance_id}", allow=(404,))
        if resp.status_code == 404:
            return None
        m = self._json(resp)
        with rest.parsing(self.id, "machine"):
            return self._status(ref, m)

    def _status(self, ref: InstanceRef, m: dict[str, Any]) -> InstanceStatus:
        status = str(m.get("status"))
        return InstanceStatus(
            ref=ref,
            state=_STATES.get(status, InstanceState.ERROR),
            host=m.get("host"),
            ssh_port=int(m.get("ssh_port") or 22),
            ssh_user=m.get("ssh_user") or self.capabilities.login_user,
            instance_type=m.get("instance_type"),
            detail=status,
        )

    async def terminate(self, ref: InstanceRef) -> None:
        # 404 = already gone = success.
        await self._call("DELETE", f"/machines/{ref.instance_id}", allow=(404,))

    async def _owned(self) -> list[dict[str, Any]]:
        machines = await self._machines(label=f"{LABEL_INSTALLATION}={self.installation_id}")
        # Filter again client-side: ownership must not rest on the server honouring the filter.
        with rest.parsing(self.id, "machines"):
            return [m for m in machines
                    if (m.get("labels") or {}).get(LABEL_INSTALLATION) == self.installation_id
                    and m.get("status") != "terminated"]

    async def list_owned(self) -> list[InstanceRef]:
        machines = await self._owned()
        with rest.parsing(self.id, "machines"):
            return [self._ref(m) for m in machines]

    def listing_calls(self, machines: int) -> int:
        return 1  # not paged

    async def list_machines(self) -> list[InstanceStatus]:
        # GET /machines (one call, not paged) answers the machine objects GET /machines/{id} does.
        machines = await self._owned()
        with rest.parsing(self.id, "machines"):
            return [self._status(self._ref(m), m) for m in machines]

    async def find_all(self, key: str) -> list[InstanceRef]:
        # Names are unique among live machines: at most one (no side resources: release is a no-op).
        found = await self.find(key)
        return [found] if found is not None else []

    async def find(self, key: str) -> InstanceRef | None:
        m = await self._lookup(key)
        if m is None or (m.get("labels") or {}).get(LABEL_INSTALLATION) != self.installation_id:
            return None
        with rest.parsing(self.id, "machine"):
            return self._ref(m)

"""Lambda Cloud (PROVIDER-APIS.md, "Lambda Cloud"). Bearer API key, REST + JSON.

Lambda has no idempotency key, no tags and does not enforce unique instance names, so the
name carries everything: `gpuprov-<installation>-<key>` is both the ownership mark (prefix)
and the idempotency key (create lists instances and looks for it before launching). Each
machine gets its own SSH key object named like the instance: a side resource that terminate
removes, and `release(key)` too when no machine was ever launched with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from typing import Any, ClassVar

import yaml

from providers import rest
from providers.base import (
    Capabilities,
    CapacityError,
    FailureScope,
    GpuSpec,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchRequirements,
    LaunchSpec,
    Offer,
    OfferQuery,
    QuotaError,
    Transient,
    rank_offers,
)
from providers.credentials import ApiKeyCredentials
from providers.gpus import normalize_gpu

DEFAULT_ENDPOINT = "https://cloud.lambda.ai/api/v1"  # OpenAPI 1.10 production (lambdalabs.com: deprecated)
NAME_MAX = 64
NOT_FOUND = "global/object-does-not-exist"

_CODES: dict[str, rest.ErrorKind] = {
    "global/invalid-api-key": "auth",
    "global/account-inactive": "auth",
    "instance-operations/launch/insufficient-capacity": "capacity",
    "global/quota-exceeded": "quota",
    "global/invalid-parameters": "invalid",
}

_STATES = {
    "booting": InstanceState.PENDING,
    "active": InstanceState.RUNNING,
    "unhealthy": InstanceState.ERROR,
    "terminating": InstanceState.TERMINATING,
    "terminated": InstanceState.TERMINATED,
}

# Lambda's public regions; the simulated cloud serves a subset.
REGIONS = [
    "us-east-1", "us-east-2", "us-east-3", "us-west-1", "us-west-2", "us-west-3", "us-south-1", "us-south-2",
    "us-south-3", "us-midwest-1", "europe-central-1", "asia-south-1", "asia-northeast-1", "asia-northeast-2",
    "me-west-1", "australia-east-1",
]

def instance_name(installation_id: str, key: str) -> str:
    """`gpuprov-<installation>-<key>`, at most 64 chars. A key too long for that is shortened
    deterministically (head + hash), so the same key always yields the same name."""
    prefix = f"gpuprov-{installation_id}-"
    if len(prefix) + len(key) <= NAME_MAX:
        return prefix + key
    room = NAME_MAX - len(prefix) - 9  # "-" + 8 hex chars of hash
    if room < 1:
        raise InvalidRequest(f"lambda: installation id {installation_id!r} is too long for a Lambda name")
    return f"{prefix}{key[:room]}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def merge_user_data(extra_keys: list[str], user_data: str | None) -> str | None:
    """cloud-init user data that authorizes `extra_keys` (Lambda takes one SSH key name per
    launch) and keeps the caller's own user data, as a MIME multipart when both exist.
    Unconfirmed: that Lambda's launch honours `user_data` (PROVIDER-APIS.md)."""
    if not extra_keys:
        return user_data
    # Dumped, never formatted: each key is one YAML string whatever it holds, so no key text can
    # add a directive (a "key" with a line break and `runcmd:` stays inside its own string).
    keys_part = "#cloud-config\n" + yaml.safe_dump({"ssh_authorized_keys": [k.strip() for k in extra_keys]},
                                                   default_flow_style=False, width=1 << 20)
    if not user_data:
        return keys_part
    msg = MIMEMultipart()
    msg.attach(MIMEText(keys_part, "cloud-config"))
    subtype = "cloud-config" if user_data.lstrip().startswith("#cloud-config") else "x-shellscript"
    msg.attach(MIMEText(user_data, subtype))
    return msg.as_string()


class LambdaProvider(rest.RestCloudProvider):
    id: ClassVar[str] = "lambda"
    credentials_model: ClassVar[type[ApiKeyCredentials]] = ApiKeyCredentials
    default_endpoint: ClassVar[str] = DEFAULT_ENDPOINT
    # Lambda's OpenAPI (1.8.3 and 1.10) `servers`: cloud.lambda.ai is production, cloud.lambdalabs.com
    # the deprecated secondary (research/provider-facts.md, "A. Lambda Cloud").
    api_hosts: ClassVar[tuple[str, ...]] = ("cloud.lambda.ai", "cloud.lambdalabs.com")
    error_codes: ClassVar[Mapping[str, rest.ErrorKind]] = _CODES
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Lambda Cloud",
        k3s="ssh",
        ports=False,
        ports_reason="--port needs a firewall API; Lambda Cloud's firewall rulesets are unconfirmed",
        spot=False,
        custom_image=False,
        login_user="ubuntu",
        side_resources=["ssh-key"],
        regions=REGIONS,
        # No idempotency token: a launch whose answer was lost may still land this long after it
        # was sent (the request timeout is 30 s; the margin covers a slow backend). [guess]
        create_in_flight_s=90.0,
        boot_timeout_s=1200.0,  # Lambda documents boots of "a few minutes"; 20 min is a broken boot
    )

    # ------------------------------------------------------------------ plumbing

    async def _data(self, method: str, path: str, **kwargs: Any) -> Any:
        """The `data` member of a successful answer (Lambda wraps every payload in it)."""
        body = rest.json_body(await self._call(method, path, **kwargs), provider=self.id)
        if not isinstance(body, dict) or "data" not in body:
            raise Transient(f"{self.id}: answer without 'data' from {method} {path}")
        return body["data"]

    @property
    def _prefix(self) -> str:
        return f"gpuprov-{self.installation_id}-"

    def _name(self, key: str) -> str:
        return instance_name(self.installation_id, key)

    def _ref(self, inst: dict[str, Any], key: str | None = None) -> InstanceRef:
        name = str(inst.get("name") or "")
        region = inst.get("region")
        return InstanceRef(
            provider=self.id, instance_id=str(inst["id"]),
            key=key or name.removeprefix(self._prefix),
            region=region.get("name") if isinstance(region, dict) else region,
        )

    async def _instances(self) -> list[dict[str, Any]]:
        data = await self._data("GET", "/instances")
        if not isinstance(data, list):
            raise Transient(f"{self.id}: unexpected instances listing")
        return [i for i in data if isinstance(i, dict) and i.get("status") != "terminated"]

    async def _by_name(self, name: str) -> dict[str, Any] | None:
        return next((i for i in await self._instances() if i.get("name") == name), None)

    async def _ssh_keys(self) -> list[dict[str, Any]]:
        data = await self._data("GET", "/ssh-keys")
        if not isinstance(data, list):
            raise Transient(f"{self.id}: unexpected ssh-keys listing")
        return data

    async def _ensure_ssh_key(self, name: str, public_key: str) -> str:
        """The per-machine SSH key object, registered once (a retried create reuses it)."""
        if any(k.get("name") == name for k in await self._ssh_keys()):
            return name
        try:
            await self._data("POST", "/ssh-keys", json={"name": name, "public_key": public_key.strip()})
        except InvalidRequest:
            # Most likely a concurrent create registered it first; anything else re-raises.
            if not any(k.get("name") == name for k in await self._ssh_keys()):
                raise
        return name

    async def _delete_ssh_key(self, name: str) -> None:
        for k in await self._ssh_keys():
            if k.get("name") == name and k.get("id"):
                await self._call("DELETE", f"/ssh-keys/{k['id']}", allow=(404,))

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        # Lambda has no account endpoint; listing SSH keys is the cheapest authenticated call.
        # The identity is a fingerprint of the key, never the key itself.
        await self._ssh_keys()
        digest = hashlib.sha256(str(self.credentials.reveal()["api_key"]).encode()).hexdigest()[:12]
        return f"Lambda Cloud API key {digest}"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        if query.spot is True:
            return []  # Lambda sells no spot instances
        data = await self._data("GET", "/instance-types")
        with rest.parsing(self.id, "instance-types"):
            out = [offer for entry in data.values() for offer in self._offers_of(entry)]
        return rank_offers(out, query)

    def _offers_of(self, entry: dict[str, Any]) -> list[Offer]:
        it = entry["instance_type"]
        specs = it.get("specs") or {}
        gpu = None
        if int(specs.get("gpus") or 0) > 0:
            name, memory = normalize_gpu(it.get("gpu_description"), it["name"])
            gpu = GpuSpec(name=name, count=int(specs["gpus"]), memory_gib=memory)
        return [
            Offer(provider=self.id, instance_type=it["name"], gpu=gpu, vcpus=int(specs.get("vcpus") or 0),
                  memory_gib=float(specs.get("memory_gib") or 0), region=r["name"],
                  price_per_hour=int(it["price_cents_per_hour"]) / 100, spot=False, available=True)
            for r in entry.get("regions_with_capacity_available") or []
        ]

    async def create(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        self.capabilities.check(LaunchRequirements(spot=offer.spot, ports=spec.ports, image=spec.image,
                                                   region=offer.region))
        name = self._name(spec.key)
        found = await self._by_name(name)
        if found is not None:
            with rest.parsing(self.id, "instance"):
                return self._ref(found, key=spec.key)
        key_name = await self._ensure_ssh_key(name, spec.ssh_public_keys[0])
        body: dict[str, Any] = {
            "region_name": offer.region,
            "instance_type_name": offer.instance_type,
            "ssh_key_names": [key_name],
            "quantity": 1,
            "name": name,
        }
        user_data = merge_user_data(spec.ssh_public_keys[1:], spec.user_data)
        if user_data:
            body["user_data"] = user_data
        try:
            data = await self._data("POST", "/instance-operations/launch", json=body,
                                    scope=FailureScope(provider=self.id, region=offer.region,
                                                       instance_type=offer.instance_type))
        except (CapacityError, QuotaError, InvalidRequest):
            # Definitely not launched: drop the key now rather than leave it for terminate.
            # (Transient/RateLimited may have launched; the retry reuses the key.)
            await self._delete_ssh_key(key_name)
            raise
        with rest.parsing(self.id, "launch"):
            instance_id = str(data["instance_ids"][0])
        return InstanceRef(provider=self.id, instance_id=instance_id, key=spec.key, region=offer.region)

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        resp = await self._call("GET", f"/instances/{ref.instance_id}", allow=(404,))
        if resp.status_code == 404:
            return None
        body = rest.json_body(resp, provider=self.id)
        with rest.parsing(self.id, "instance"):
            inst = body["data"]
            status = str(inst.get("status"))
            return InstanceStatus(
                ref=ref,
                state=_STATES.get(status, InstanceState.ERROR),
                host=inst.get("ip") or None,
                ssh_port=22,  # Lambda serves SSH on 22 at the instance's own address
                ssh_user=self.capabilities.login_user,
                instance_type=(inst.get("instance_type") or {}).get("name"),
                detail=status,
            )

    async def terminate(self, ref: InstanceRef) -> None:
        resp = await self._call("POST", "/instance-operations/terminate",
                                json={"instance_ids": [ref.instance_id]}, allow=(400, 404))
        if not resp.is_success and rest.error_code(resp) != NOT_FOUND:
            raise rest.map_response_error(resp, provider=self.id, codes=_CODES)
        # The SSH key object belongs to the name: it goes with the last machine that carries it
        # (a duplicate's terminate leaves it to the twin; release() removes it after both).
        name = self._name(ref.key)
        others = [i for i in await self._instances() if str(i.get("id")) != ref.instance_id]
        if not any(i.get("name") == name for i in others):
            await self._delete_ssh_key(name)

    async def list_owned(self) -> list[InstanceRef]:
        instances = await self._instances()
        with rest.parsing(self.id, "instances"):
            machines = [self._ref(i) for i in instances if str(i.get("name") or "").startswith(self._prefix)]
        # An SSH key object named like a machine that is not there: left by a launch that never
        # happened (or a terminate cut short). It is ours, so it is listed, for the sweep to release.
        names = {str(i.get("name") or "") for i in instances}
        with rest.parsing(self.id, "ssh-keys"):
            leftovers = [InstanceRef(provider=self.id, instance_id=str(k["id"]), kind="ssh-key",
                                     key=str(k["name"]).removeprefix(self._prefix))
                         for k in await self._ssh_keys()
                         if str(k.get("name") or "").startswith(self._prefix) and k.get("name") not in names]
        return machines + leftovers

    async def find(self, key: str) -> InstanceRef | None:
        # By the full name, so keys shortened to fit Lambda's 64 chars are found too.
        found = await self._by_name(self._name(key))
        if found is None:
            return None
        with rest.parsing(self.id, "instance"):
            return self._ref(found, key=key)

    async def find_all(self, key: str) -> list[InstanceRef]:
        # Lambda does not enforce unique names: two creates that raced past the lookup made two.
        name = self._name(key)
        instances = await self._instances()
        with rest.parsing(self.id, "instances"):
            return [self._ref(i, key=key) for i in instances if i.get("name") == name]

    async def release(self, key: str) -> None:
        # The SSH key object is registered before the launch: a launch that failed (5xx, a lost
        # answer, a worker that gave up) leaves it with no machine whose terminate would remove it.
        await self._delete_ssh_key(self._name(key))

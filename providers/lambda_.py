"""Lambda Cloud (official OpenAPI 1.10; research/provider-facts.md, section A). API key as a bearer
token, REST + JSON, every answer `{"data": ...}` or `{"error": {code, message, suggestion?}}`.

Lambda has no idempotency key and does not enforce unique instance names, and its listing filters
by nothing but cluster, so the name carries the key: `gpuprov-<installation>-<key>` is looked up
before every launch. Instances also carry ownership tags (`gpuprov-installation`, `gpuprov-key`),
the stronger mark where present. A launch takes exactly one SSH key *name*: the installation's key
object (`gpuprov-<installation>-<digest>`, providers/account_objects.py), registered once and named in
every launch (the other keys go in through cloud-init). Before 2026-12 each machine had a key
object named like it; `release(key)` still removes such a one. When ports or direct Kubernetes access
are asked for, a machine gets its own firewall ruleset in the offer's region (tcp/22 always, those
ports from anywhere, 6443 only from `k8s_api_from`) — a side resource terminate removes once the
machine is gone, and `release(key)` too when no machine came. A ruleset
cannot be deleted while an instance that carries it is listed (`firewall-ruleset-in-use`), which
includes a `terminating` one. k3s is installed at boot by cloud-init (`user_data`, at most 1 MB).
`--image` is an image id (32 hex digits or a UUID) or an image family (`GET /images`).

Lambda limits each key to one request per second and one launch per 12 s (five a minute): every
call of this process goes through one pacer per key (providers/pacing.py), and workers run Lambda's
launches on their own Temporal task queue at `launches_per_s` (worker.py). A 429 (its body and
Retry-After are undocumented; SkyPilot reads neither) is RateLimited.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx
import yaml

from providers import account_objects, cloudinit, naming, pacing, rest
from providers.base import (
    K8S_API_PORT,
    Capabilities,
    CapacityError,
    FailureScope,
    GpuSpec,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    ProviderError,
    QuotaError,
    SelfEnd,
    Transient,
    launch_request,
    rank_offers,
)
from providers.batched_calls import BatchedCalls
from providers.credentials import ApiKeyCredentials
from providers.fresh_listing import FreshListing
from providers.gpus import normalize_gpu
from providers.listing import Listing

DEFAULT_ENDPOINT = "https://cloud.lambda.ai/api/v1"  # OpenAPI 1.10 production (lambdalabs.com: deprecated)
NAME_MAX = 64
NOT_FOUND = "global/object-does-not-exist"
IN_USE = "firewall-rulesets/firewall-ruleset-in-use"
LAUNCH = "/instance-operations/launch"
TERMINATE = "/instance-operations/terminate"
USER_DATA_MAX = 1_000_000  # "cannot exceed 1MB"; whether 10^6 or 2^20 bytes is undocumented: the stricter
CALL_INTERVAL_S = 1.0  # "generally limited to one request per second"
LAUNCH_INTERVAL_S = 12.0  # "one request per 12 seconds, or five requests per minute"
TAG_INSTALLATION = "gpuprov-installation"
TAG_KEY = "gpuprov-key"
_INSTALLATION_KEY = re.compile(r"[0-9a-f]{12}")  # what follows the prefix in the installation's key object
_IMAGE_ID = re.compile(r"^([0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$")


class _Codes(dict[str, rest.ErrorKind]):
    """Lambda's codes; `provider/...` (an upstream's failure: outage, connectivity) is transient."""

    def get(self, code: str, default: Any = None) -> Any:  # type: ignore[override]
        if code.startswith("provider/"):
            return "transient"
        return super().get(code, default)


_CODES = _Codes({
    "global/invalid-api-key": "auth",
    "global/account-inactive": "auth",
    "global/invalid-address": "auth",  # the account's billing address: nothing a retry can fix
    "global/forbidden": "auth",
    "instance-operations/launch/insufficient-capacity": "capacity",
    "global/quota-exceeded": "quota",
    "global/invalid-parameters": "invalid",
    NOT_FOUND: "invalid",  # at launch: an SSH key, ruleset, image or file system that does not exist
    "global/not-found": "invalid",
    "instance-operations/launch/file-system-in-wrong-region": "invalid",
    "global/internal-error": "transient",
    "global/conflict": "transient",
})

_STATES = {
    "booting": InstanceState.PENDING,
    "active": InstanceState.RUNNING,
    "unhealthy": InstanceState.ERROR,
    "terminating": InstanceState.TERMINATING,
    "terminated": InstanceState.TERMINATED,
    "preempted": InstanceState.TERMINATED,  # Lambda took it back: gone, not billing
}
_GONE = ("terminated", "preempted")

# Lambda's public regions (the OpenAPI's region enum, less its test regions); the simulated cloud
# serves a subset. Planning without --region looks at the US ones.
REGIONS = [
    "us-east-1", "us-east-2", "us-east-3", "us-west-1", "us-west-2", "us-west-3", "us-south-1", "us-south-2",
    "us-south-3", "us-midwest-1", "us-midwest-2", "europe-central-1", "asia-south-1", "asia-northeast-1",
    "asia-northeast-2", "me-west-1", "australia-east-1",
]
US_REGIONS = [r for r in REGIONS if r.startswith("us-")]


def instance_name(installation_id: str, key: str) -> str:
    """`gpuprov-<installation>-<key>`, at most NAME_MAX chars (providers/naming.py)."""
    return naming.owned_name(installation_id, key, NAME_MAX, what="a Lambda Cloud instance name")


def merge_user_data(extra_keys: list[str], user_data: str | None, *, k3s: bool = False) -> str | None:
    """cloud-init user data (`user_data` is documented: plain text, cloud-init format, at most 1 MB)
    that authorizes `extra_keys` (a launch takes one SSH key name), installs k3s at boot when asked,
    and keeps the caller's own user data: one part alone, or a MIME multipart."""
    keys_part = None
    if extra_keys:
        # Dumped, never formatted: each key is one YAML string whatever it holds, so no key text can
        # add a directive (a "key" with a line break and `runcmd:` stays inside its own string).
        keys_part = "#cloud-config\n" + yaml.safe_dump(
            {"ssh_authorized_keys": [k.strip() for k in extra_keys]}, default_flow_style=False, width=1 << 20)
    return cloudinit.combine(keys_part, cloudinit.K3S_AT_BOOT if k3s else None, user_data)


def image_spec(image: str) -> dict[str, str]:
    """`--image` as Lambda's launch takes it: an image id, else a family name."""
    return {"id": image} if _IMAGE_ID.match(image) else {"family": image}


class LambdaProvider(rest.RestCloudProvider):
    id: ClassVar[str] = "lambda"
    credentials_model: ClassVar[type[ApiKeyCredentials]] = ApiKeyCredentials
    default_endpoint: ClassVar[str] = DEFAULT_ENDPOINT
    # Lambda's OpenAPI (1.8.3 and 1.10) `servers`: cloud.lambda.ai is production, cloud.lambdalabs.com
    # the deprecated secondary (research/provider-facts.md, "A. Lambda Cloud").
    api_hosts: ClassVar[tuple[str, ...]] = ("cloud.lambda.ai", "cloud.lambdalabs.com")
    error_codes: ClassVar[Mapping[str, rest.ErrorKind]] = _CODES
    listing: ClassVar[Listing] = Listing(
        tagline="A second, independent US source",
        how_to_connect=("In the Lambda Cloud dashboard open API keys → Generate API key and paste it here."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Lambda Cloud",
        k3s="cloud-init",
        k8s_api=True,
        ports=True,  # a per-instance firewall ruleset
        spot=False,
        custom_image=True,  # image id or family
        login_user="ubuntu",
        # A machine's firewall ruleset (with ports or Kubernetes API access). The SSH key object is the
        # installation's, not the machine's.
        side_resources=["firewall-ruleset"],
        regions=REGIONS,
        default_regions=US_REGIONS,
        # No idempotency token: a launch whose answer was lost may still land this long after it
        # was sent (the request timeout is 30 s; the margin covers a slow backend). [guess]
        create_in_flight_s=90.0,
        boot_timeout_s=1200.0,  # Lambda documents boots of "a few minutes"; 20 min is a broken boot
        launches_per_s=1 / LAUNCH_INTERVAL_S,
        self_end=SelfEnd(
            method="none",
            how=("a guest shutdown does not end the bill: an instance bills from launch until it is "
                 "terminated (dashboard or Cloud API), and the API keys are account-wide"),
            source="https://docs.lambda.ai/public-cloud/billing/",
        ),
    )

    # ------------------------------------------------------------------ plumbing

    def pacer(self) -> pacing.Pacer:
        """This key's pacer in this process (every adapter of the key shares it)."""
        return pacing.shared(self.id, self.endpoint, str(self.credentials.reveal()["api_key"]),
                             CALL_INTERVAL_S, LAUNCH_INTERVAL_S)

    def paced(self) -> bool:
        return self.pacer().scale > 0  # 0: a simulation with its limits off

    async def _call(self, method: str, path: str, *, scope: FailureScope | str | None = None,
                    allow: tuple[int, ...] = (), **kwargs: Any) -> httpx.Response:
        async with self.pacer().slot(launch=path == LAUNCH):
            return await super()._call(method, path, scope=scope, allow=allow, **kwargs)

    async def _data(self, method: str, path: str, **kwargs: Any) -> Any:
        """The `data` member of a successful answer (Lambda wraps every payload in it)."""
        body = rest.json_body(await self._call(method, path, **kwargs), provider=self.id)
        if not isinstance(body, dict) or "data" not in body:
            raise Transient(f"{self.id}: answer without 'data' from {method} {path}")
        return body["data"]

    _listings: dict[str, FreshListing[dict[str, Any]]] | None = None  # per path, made at first use

    async def _list(self, path: str) -> list[dict[str, Any]]:
        """Every item of a listing (not paged). Concurrent callers share one call that began after
        each asked (providers/fresh_listing.py): every create looks its names up here first."""
        if self._listings is None:
            self._listings = {}
        listings = self._listings
        if path not in listings:
            async def fetch() -> list[dict[str, Any]]:
                data = await self._data("GET", path)
                if not isinstance(data, list):
                    raise Transient(f"{self.id}: unexpected {path} listing")
                return [d for d in data if isinstance(d, dict)]

            listings[path] = FreshListing(fetch)
        return await listings[path].get()

    @property
    def _prefix(self) -> str:
        return f"gpuprov-{self.installation_id}-"

    def _name(self, key: str) -> str:
        return instance_name(self.installation_id, key)

    def _tags(self, key: str) -> list[dict[str, str]]:
        return [{"key": TAG_INSTALLATION, "value": self.installation_id}, {"key": TAG_KEY, "value": key}]

    def _owned_key(self, inst: dict[str, Any]) -> str | None:
        """The key an instance of ours carries (from its tags, else its name), or None if not ours."""
        tags = {str(t.get("key")): str(t.get("value")) for t in inst.get("tags") or [] if isinstance(t, dict)}
        if TAG_INSTALLATION in tags:
            return tags.get(TAG_KEY) if tags[TAG_INSTALLATION] == self.installation_id else None
        name = str(inst.get("name") or "")  # made before tags were set, or tags lost
        return name.removeprefix(self._prefix) if name.startswith(self._prefix) else None

    def _ref(self, inst: dict[str, Any], key: str) -> InstanceRef:
        region = inst.get("region")
        return InstanceRef(provider=self.id, instance_id=str(inst["id"]), key=key,
                           region=region.get("name") if isinstance(region, dict) else region)

    async def _instances(self) -> list[dict[str, Any]]:
        """Instances not gone (a preempted one is gone: Lambda took it back)."""
        return [i for i in await self._list("/instances") if i.get("status") not in _GONE]

    async def _named(self, name: str) -> list[dict[str, Any]]:
        return [i for i in await self._instances() if i.get("name") == name]

    _key_names: dict[str, str] | None = None  # public key -> its key object's name, once seen
    # Whether the account's last SSH key listing showed a per-machine key object of ours (as launches
    # made them before 2026-12); None: not listed yet. Release asks for one only while it may exist.
    _machine_keys: bool | None = None

    async def _ssh_keys(self) -> list[dict[str, Any]]:
        keys = await self._list("/ssh-keys")
        self._machine_keys = any(self._machine_key(k) for k in keys)
        return keys

    def _machine_key(self, k: dict[str, Any]) -> bool:
        """A key object named like a machine of ours (never the installation's own)."""
        name = str(k.get("name") or "")
        suffix = name.removeprefix(self._prefix)
        return name.startswith(self._prefix) and not _INSTALLATION_KEY.fullmatch(suffix)

    async def _key_object(self, public_key: str) -> str:
        """The name of the key object holding the installation's key: looked up (or registered) once
        per adapter, then remembered — every launch of this key names it, and Lambda's one request a
        second is better spent on the launch (providers/account_objects.py)."""
        if self._key_names is None:
            self._key_names = {}
        if public_key not in self._key_names:
            async def held() -> list[tuple[str, str]]:
                # Never a machine's own key object (older launches'): its release deletes it.
                return [(str(k["name"]), str(k["public_key"])) for k in await self._ssh_keys()
                        if k.get("name") and k.get("public_key") and not self._machine_key(k)]

            async def register(name: str, line: str) -> None:
                await self._data("POST", "/ssh-keys", json={"name": name, "public_key": line})

            self._key_names[public_key] = await account_objects.ensure_key_object(
                held, register, provider=self.id, installation_id=self.installation_id,
                public_key=public_key, max_length=NAME_MAX)
        return self._key_names[public_key]

    async def _forget_key_object_if_gone(self, public_key: str, name: str) -> bool:
        """After a launch refused as invalid: whether the remembered key object is gone (deleted in the
        dashboard since it was looked up), in which case it is forgotten and a retry registers it."""
        if not any(k.get("name") == name for k in await self._ssh_keys()):
            (self._key_names or {}).pop(public_key, None)
            return True
        return False

    async def _delete_ssh_key(self, name: str) -> None:
        for k in await self._ssh_keys():
            if k.get("name") == name and k.get("id"):
                # Unknown id: 404 global/not-found (1.10), 400 global/invalid-parameters (1.8.3) — gone.
                await self._call("DELETE", f"/ssh-keys/{k['id']}", allow=(400, 404))

    async def _rulesets(self, name: str | None = None) -> list[dict[str, Any]]:
        found = await self._list("/firewall-rulesets")
        return [r for r in found if name is None or r.get("name") == name]

    async def _ensure_ruleset(self, name: str, region: str, ports: list[int], k8s_api_from: list[str]) -> str:
        """The machine's firewall ruleset in `region`: tcp/22 (whether an instance with its own ruleset
        keeps the global rules is undocumented) and `ports`, from anywhere; the Kubernetes API port
        from `k8s_api_from` only. Made once per key."""
        with rest.parsing(self.id, "firewall-rulesets"):
            for rs in await self._rulesets(name):
                if (rs.get("region") or {}).get("name") == region:
                    return str(rs["id"])
        rules = [{"protocol": "tcp", "port_range": [p, p], "source_network": "0.0.0.0/0",
                  "description": "SSH (gpuprov)" if p == 22 else f"port {p} (gpuprov)"}
                 for p in dict.fromkeys([22, *ports])]
        rules += [{"protocol": "tcp", "port_range": [K8S_API_PORT, K8S_API_PORT], "source_network": cidr,
                   "description": "Kubernetes API (gpuprov)"} for cidr in k8s_api_from]
        data = await self._data("POST", "/firewall-rulesets",
                                json={"name": name, "region": region, "rules": rules})
        with rest.parsing(self.id, "firewall-ruleset"):
            return str(data["id"])

    async def _delete_rulesets(self, name: str, *, strict: bool) -> None:
        """Delete the key's rulesets; one still attached to a listed instance (a terminating one too)
        stays — Transient when `strict` (release: the machine is seen gone, so it will free soon)."""
        for rs in await self._rulesets(name):
            resp = await self._call("DELETE", f"/firewall-rulesets/{rs.get('id')}", allow=(400, 404))
            code = "" if resp.is_success else rest.error_code(resp)
            if code == IN_USE:
                if strict:
                    raise Transient(f"{self.id}: firewall ruleset {name} is still in use (its instance is "
                                    "still terminating)")
            elif not resp.is_success and code != NOT_FOUND:
                raise rest.map_response_error(resp, provider=self.id, codes=_CODES)

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        # Lambda has no account endpoint; listing SSH keys is the cheapest authenticated call.
        # The identity is a fingerprint of the key, never the key itself.
        await self._list("/ssh-keys")
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

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        user_data = merge_user_data(spec.ssh_public_keys[1:], spec.user_data, k3s=spec.k3s)
        if user_data and len(user_data.encode()) > USER_DATA_MAX:
            raise InvalidRequest(f"{self.id}: user data and SSH keys exceed Lambda's 1 MB of user data")
        name = self._name(spec.key)
        found = [] if spec.unsent else await self._named(name)
        if found:
            with rest.parsing(self.id, "instance"):
                return self._ref(found[0], spec.key)
        key_name = await self._key_object(spec.ssh_public_keys[0])
        body: dict[str, Any] = {
            "region_name": offer.region,
            "instance_type_name": offer.instance_type,
            "ssh_key_names": [key_name],
            "quantity": 1,  # not in the 1.10 schema, but its own example and SkyPilot send it
            "name": name,
            "tags": self._tags(spec.key),
        }
        ruleset = bool(spec.ports or spec.k8s_api_from)
        if ruleset:
            body["firewall_rulesets"] = [{"id": await self._ensure_ruleset(name, offer.region, spec.ports,
                                                                            spec.k8s_api_from)}]
        if spec.image:
            body["image"] = image_spec(spec.image)
        if user_data:
            body["user_data"] = user_data
        try:
            with launch_request():  # the send is recorded as it leaves: after the pacer's wait
                data = await self._data("POST", LAUNCH, json=body,
                                        scope=FailureScope(provider=self.id, region=offer.region,
                                                           instance_type=offer.instance_type))
        except (CapacityError, QuotaError, InvalidRequest) as e:
            # Definitely not launched: drop the ruleset now rather than leave it to release.
            # (Transient/RateLimited may have launched; the retry reuses it.)
            if ruleset:
                await self._delete_rulesets(name, strict=False)
            if isinstance(e, InvalidRequest) and await self._forget_key_object_if_gone(
                    spec.ssh_public_keys[0], key_name):
                raise Transient(f"{self.id}: the SSH key object {key_name} was deleted from the account; "
                                "the retry registers it again") from None
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
            return self._status(body["data"], ref)

    def listing_calls(self, machines: int) -> int:
        return 1  # not paged

    async def list_machines(self) -> list[InstanceStatus]:
        # One GET /instances (Lambda's listing is not paged): the watch's whole round. A preempted
        # instance stays listed until terminated: reported (gone, preempted) rather than left out,
        # so the watch needs no `get` to learn why it went.
        instances = [i for i in await self._list("/instances") if i.get("status") != "terminated"]
        with rest.parsing(self.id, "instances"):
            return [self._status(i, self._ref(i, key)) for i in instances
                    if (key := self._owned_key(i)) is not None]

    def _status(self, inst: dict[str, Any], ref: InstanceRef) -> InstanceStatus:
        """One instance object, as GET /instances/{id} and GET /instances both return it."""
        status = str(inst.get("status"))
        return InstanceStatus(
            ref=ref,
            state=_STATES.get(status, InstanceState.ERROR),
            host=(inst.get("ip") or None) if status not in _GONE else None,
            ssh_port=22,  # Lambda serves SSH on 22 at the instance's own address
            ssh_user=self.capabilities.login_user,
            instance_type=(inst.get("instance_type") or {}).get("name"),
            detail=status,
            # The OpenAPI's InstanceStatus enum (1.8.3 and 1.10) has `preempted`: Lambda took the
            # instance back (research/provider-facts.md A.1 row 5). Lambda documents no notice.
            preempted=status == "preempted",
        )

    _terminations: BatchedCalls[str, bool | ProviderError] | None = None  # made at first use

    async def _terminate(self, instance_ids: list[str]) -> dict[str, bool | ProviderError]:
        """One terminate call for `instance_ids` ("Terminates one or more instances"): whether each
        was gone already, or why its terminate failed. A call of several that is refused (one unknown
        id answers 404 for all in the simulation; Lambda's own behaviour is undocumented) is made
        again for each id alone, so one machine's answer never fails another's teardown. A call that
        fails outright (a 5xx, a timeout, the rate limit) fails each teardown in it: each retries."""
        resp = await self._call("POST", TERMINATE, json={"instance_ids": instance_ids}, allow=(400, 404))
        if resp.is_success:
            return dict.fromkeys(instance_ids, False)
        if len(instance_ids) == 1:
            if rest.error_code(resp) != NOT_FOUND:
                raise rest.map_response_error(resp, provider=self.id, codes=_CODES)
            return {instance_ids[0]: True}
        answers: dict[str, bool | ProviderError] = {}
        for i in instance_ids:
            try:
                answers.update(await self._terminate([i]))
            except ProviderError as e:
                answers[i] = e
        return answers

    async def terminate(self, ref: InstanceRef) -> None:
        # A preempted instance is terminated too: that is what removes it from Lambda's lists.
        # Terminates asked while one is under way (or waits for the key's turn) go in one call.
        if self._terminations is None:
            self._terminations = BatchedCalls(self._terminate)
        gone = await self._terminations.call(ref.instance_id)
        if isinstance(gone, ProviderError):
            raise gone
        # The ruleset belongs to the name: it goes with the last machine that carries it (a
        # duplicate's terminate leaves it to the twin). It is refused while its instance is still
        # terminating, so only tried when it was gone already: else release() removes it once the
        # machine is seen gone.
        if gone:
            name = self._name(ref.key)
            if not [i for i in await self._named(name) if str(i.get("id")) != ref.instance_id]:
                await self._delete_rulesets(name, strict=False)

    async def list_owned(self) -> list[InstanceRef]:
        instances = await self._instances()
        with rest.parsing(self.id, "instances"):
            machines = [self._ref(i, key) for i in instances if (key := self._owned_key(i)) is not None]
        # A firewall ruleset (or, from before 2026-12, an SSH key object) named like a machine that is
        # not there: left by a launch that never happened (or a terminate cut short). It is ours:
        # listed, for the sweep. The installation's own key object is no machine's.
        names = {str(i.get("name") or "") for i in instances}
        with rest.parsing(self.id, "side resources"):
            leftovers = [InstanceRef(provider=self.id, instance_id=str(k["id"]), kind="ssh-key",
                                     key=str(k["name"]).removeprefix(self._prefix))
                         for k in await self._ssh_keys()
                         if self._machine_key(k) and k.get("name") not in names]
            leftovers += [InstanceRef(provider=self.id, instance_id=str(r["id"]), kind="firewall-ruleset",
                                      key=str(r["name"]).removeprefix(self._prefix),
                                      region=(r.get("region") or {}).get("name"))
                          for r in await self._rulesets()
                          if str(r.get("name") or "").startswith(self._prefix) and r.get("name") not in names]
        return machines + leftovers

    async def find(self, key: str) -> InstanceRef | None:
        found = await self._named(self._name(key))
        if not found:
            return None
        with rest.parsing(self.id, "instance"):
            return self._ref(found[0], key)

    async def find_all(self, key: str) -> list[InstanceRef]:
        # By the full name, so keys shortened to fit Lambda's 64 chars are found too. Lambda does not
        # enforce unique names: two creates that raced past the lookup made two.
        with rest.parsing(self.id, "instances"):
            return [self._ref(i, key) for i in await self._named(self._name(key))]

    async def release(self, key: str) -> None:
        # Registered before the launch: a launch that failed (5xx, a lost answer, a worker that gave
        # up) leaves them with no machine whose terminate would remove them. A preempted instance
        # still listed holds its ruleset until terminated: terminated here first.
        name = self._name(key)
        with rest.parsing(self.id, "instances"):
            held = [str(i["id"]) for i in await self._list("/instances")
                    if i.get("name") == name and i.get("status") == "preempted"]
        if held:
            await self._call("POST", TERMINATE, json={"instance_ids": held}, allow=(404,))
        await self._delete_rulesets(name, strict=True)
        if self._machine_keys is not False:  # a per-machine key object, as launches made them before 2026-12
            await self._delete_ssh_key(name)

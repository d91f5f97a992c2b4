"""DigitalOcean GPU Droplets (research/provider-facts.md B.3; PROVIDER-APIS.md "DigitalOcean"; the
official OpenAPI in `digitalocean/openapi`). Bearer personal access token, REST + JSON at /v2.

- Offers: `GET /sizes`, the sizes with `gpu_info`, one offer per region the size lists (a sold-out
  region drops out of the list; a create there still fails with 422 "Size is not available in this
  region.", which is capacity, as is every other "not available" answer).
- No idempotency key, and names are not unique: the droplet's name `gpuprov-<installation>-<key>` is
  the ownership mark and the key. Create looks it up first (`create_in_flight_s` covers a create
  whose answer was lost), `find_all` returns every droplet of a key. Listings show GPU droplets only
  with `type=gpus`, which cannot be combined with `tag_name`, so lookups list `type=gpus` (every
  page) and match names here.
- Side resources, made before the droplet: a tag named like the droplet, and a cloud firewall of
  the same name attached to that tag, always opening SSH plus the requested ports from anywhere, and
  the Kubernetes API port (K8S_API_PORT) only from the networks in `k8s_api_from` (none: it stays
  closed); a cloud firewall denies what it does not allow, so it also allows all outbound traffic.
  A retried create finds the firewall by name and adds nothing. Both are removed once the droplet is
  gone (terminate, else `release`); `list_owned` reports those left without a droplet.
  Every droplet also carries the installation tag `gpuprov:<installation>`.
- SSH keys: the first key is registered once as an account key and named by its MD5 fingerprint
  (looked up with `GET /account/keys/{fingerprint}`, never by listing: listings are limited to 10
  per minute) — a droplet created without any account key gets a root password e-mailed instead.
  Further keys go in the user data (`ssh_authorized_keys`), so one create costs no key listing.
- Capacity and quota are both 422 `unprocessable_entity`, told apart by the message; a 429 carries
  `retry-after` only for the per-minute burst limit, otherwise `ratelimit-reset` says when a
  request leaves the hourly window.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx
import yaml
from pydantic import SecretStr

from providers import account_objects, cloudinit, rest
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
    RateLimited,
    SelfEnd,
    Transient,
    launch_request,
    rank_offers,
)
from providers.cloudtime import created_at
from providers.credentials import Credentials, field
from providers.gpus import normalize_gpu
from providers.listing import Listing

DEFAULT_ENDPOINT = "https://api.digitalocean.com/v2"
NAME_MAX = 255  # droplet, tag and firewall names
USER_DATA_MAX = 64 * 1024
PAGE_SIZE = 200  # the most a listing returns per page
MAX_PAGES = 100
FIREWALL, TAG = "firewall", "tag"
ANYWHERE = ["0.0.0.0/0", "::/0"]
CAPACITY_WORDS = ("not available in this region", "size is not available", "is currently unavailable")
QUOTA_WORDS = ("droplet limit",)
_IMAGE = re.compile(r"^(?:\d{1,12}|[a-z0-9][a-z0-9.-]{0,63})$")

_CODES: dict[str, rest.ErrorKind] = {
    "unauthorized": "auth",
    "forbidden": "auth",
    "too_many_requests": "rate_limit",
    "server_error": "transient",
    "service_unavailable": "transient",
}

# new -> active; `off`: powered off. gpuprov never powers a droplet off, so one that is off went
# down by itself (crashed, or shut down from inside): broken for us, like `archive` (kept but not
# running). Both are torn down by terminate.
_STATES = {
    "new": InstanceState.PENDING,
    "active": InstanceState.RUNNING,
    "off": InstanceState.ERROR,
    "archive": InstanceState.ERROR,
}

# Regions that sell GPU Droplets (DigitalOcean's GPU Droplet availability page); planning looks in
# the North American ones unless --region names another.
NORTH_AMERICA = ["tor1", "nyc2", "atl1", "ric1", "nyc1", "nyc3", "sfo2", "sfo3"]
REGIONS = [*NORTH_AMERICA, "ams3", "fra1", "lon1", "sgp1", "blr1", "syd1"]


class DigitalOceanCredentials(Credentials):
    api_key: SecretStr = field("Personal access token", "secret", min_length=1, max_length=200,
                               help="A token with droplet, tag, firewall, ssh_key, sizes and account scopes")


def md5_fingerprint(public_key: str) -> str:
    """How DigitalOcean names an SSH key: the MD5 of the key blob, colon-separated hex."""
    parts = public_key.split()
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (IndexError, binascii.Error, ValueError):
        raise InvalidRequest("digitalocean: an SSH public key is not in OpenSSH format") from None
    digest = hashlib.md5(blob, usedforsecurity=False).hexdigest()
    return ":".join(digest[i:i + 2] for i in range(0, 32, 2))


def user_data(extra_keys: list[str], extra: str | None, *, k3s: bool) -> str | None:
    """cloud-init: the keys beyond the first (which is an account key), k3s at boot when asked,
    then the caller's own user data. [unconfirmed] that the GPU images' cloud-init puts top-level
    `ssh_authorized_keys` on root (their default user; DigitalOcean logs in as root)."""
    keys = None
    if extra_keys:
        # Dumped, never formatted: each key stays one YAML string whatever it holds.
        keys = "#cloud-config\n" + yaml.safe_dump({"ssh_authorized_keys": [k.strip() for k in extra_keys]},
                                                  default_flow_style=False, width=1 << 20)
    return cloudinit.combine(keys, cloudinit.K3S_AT_BOOT if k3s else None, extra)


# A cloud firewall drops whatever it does not allow, outbound too (apt, k3s, images). That cloud
# firewalls apply to GPU Droplets as to others is [unconfirmed]. `ports` is required on every rule,
# "0" for ICMP (`firewall_rule_base` in the official spec).
OUTBOUND: list[dict[str, Any]] = [
    *({"protocol": proto, "ports": "1-65535", "destinations": {"addresses": ANYWHERE}}
      for proto in ("tcp", "udp")),
    {"protocol": "icmp", "ports": "0", "destinations": {"addresses": ANYWHERE}},
]


def inbound_rules(ports: list[int], k8s_api_from: list[str]) -> list[dict[str, Any]]:
    """SSH and `ports` from anywhere; the Kubernetes API port only from `k8s_api_from` (none: no rule).
    A port asked for both ways is opened once, from anywhere."""
    opened = list(dict.fromkeys([22, *ports]))
    rules = [{"protocol": "tcp", "ports": str(p), "sources": {"addresses": ANYWHERE}} for p in opened]
    sources = list(dict.fromkeys(k8s_api_from))
    if sources and K8S_API_PORT not in opened:
        rules.append({"protocol": "tcp", "ports": str(K8S_API_PORT), "sources": {"addresses": sources}})
    return rules


def default_image(offer: Offer) -> str:
    """DigitalOcean's AI/ML-ready base images (CUDA drivers, or ROCm on AMD) [sdk dstack]."""
    if offer.gpu is not None and offer.gpu.name.startswith("MI"):
        return "gpu-amd-base"
    return "gpu-h100x8-base" if offer.gpu is not None and offer.gpu.count >= 8 else "gpu-h100x1-base"


class DigitalOceanProvider(rest.RestCloudProvider):
    id: ClassVar[str] = "digitalocean"
    credentials_model: ClassVar[type[DigitalOceanCredentials]] = DigitalOceanCredentials
    default_endpoint: ClassVar[str] = DEFAULT_ENDPOINT
    api_hosts: ClassVar[tuple[str, ...]] = ("api.digitalocean.com",)
    error_codes: ClassVar[Mapping[str, rest.ErrorKind]] = _CODES
    listing: ClassVar[Listing] = Listing(
        tagline="Toronto RTX Ada / L40S, US H100 / MI300X",
        how_to_connect=("In the DigitalOcean control panel open API → Tokens → Generate New Token with read "
                        "and write scope (droplet, firewall, tag, ssh_key), and paste it here."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="DigitalOcean",
        k3s="cloud-init",
        k8s_api=True,
        ports=True,
        spot=False,
        custom_image=True,
        login_user="root",
        side_resources=[FIREWALL, TAG],
        regions=REGIONS,
        default_regions=NORTH_AMERICA,
        # No idempotency key: a create whose answer was lost may still land this long after it was
        # sent (the request timeout is 30 s; the margin covers a slow backend). [guess]
        create_in_flight_s=90.0,
        boot_timeout_s=1200.0,  # GPU Droplets boot in a few minutes; 20 is a broken boot
        self_end=SelfEnd(
            method="none",
            how=("a Droplet shut down from its OS is powered off and still billable; only destroying it "
                 "through the API ends the bill, and API tokens are account-wide, not per Droplet"),
            source="https://docs.digitalocean.com/reference/doctl/reference/compute/droplet-action/shutdown/",
        ),
    )
    page_size: int = PAGE_SIZE  # items asked per listing page (tests make it small)

    _key_fingerprints: dict[str, str] | None = None  # public key -> registered fingerprint, per instance

    # ------------------------------------------------------------------ plumbing

    async def _call(self, method: str, path: str, *, scope: FailureScope | str | None = None,
                    allow: tuple[int, ...] = (), **kwargs: Any) -> httpx.Response:
        resp = await rest.request(self._http(), method, path, provider=self.id, allow=range(400, 600),
                                  **kwargs)
        if resp.is_success or resp.status_code in allow:
            return resp
        raise self._error(resp, scope)

    def _error(self, resp: httpx.Response, scope: FailureScope | str | None) -> ProviderError:
        """DigitalOcean's `{id, message}`: 422 means capacity, quota or a bad request by its words;
        a 429 waits for `retry-after` (burst limit) or else for `ratelimit-reset` (hourly limit)."""
        code, message = _fields(resp)
        if resp.status_code == 422:
            words = message.lower()
            if any(w in words for w in CAPACITY_WORDS):
                code = "capacity"
            elif any(w in words for w in QUOTA_WORDS):
                # The droplet limit is the account's: it covers every region and size.
                code, scope = "quota", FailureScope(provider=self.id)
        err = rest.map_error(provider=self.id, code=code, message=message, status=resp.status_code,
                             scope=scope, codes={**_CODES, "capacity": "capacity", "quota": "quota"},
                             retry_after=resp.headers.get("retry-after"))
        if isinstance(err, RateLimited) and not resp.headers.get("retry-after"):
            err.retry_after = _until_reset(resp.headers.get("ratelimit-reset"), err.retry_after)
        return err

    async def _pages(self, path: str, member: str, **params: str) -> list[dict[str, Any]]:
        """Every item of a paginated listing. `links.pages.next` is followed by its page number only,
        on our own endpoint: the link names DigitalOcean's host, which a proxy or simulation is not,
        and the token must go nowhere else."""
        items: list[dict[str, Any]] = []
        number = 1
        for _ in range(MAX_PAGES):
            query = {**params, "per_page": self.page_size, "page": number}
            body = self._json(await self._call("GET", path, params=query))
            with rest.parsing(self.id, path):
                got = body[member]
                items += [i for i in got if isinstance(i, dict)]
                nxt = ((body.get("links") or {}).get("pages") or {}).get("next")
                if not nxt:
                    return items
                following = int(httpx.URL(str(nxt)).params["page"])
            if following <= number:
                raise Transient(f"{self.id}: {path} listing links back to page {following}")
            number = following
        raise Transient(f"{self.id}: {path} listing has more than {MAX_PAGES} pages")

    @property
    def _prefix(self) -> str:
        return f"gpuprov-{self.installation_id}-"

    @property
    def _installation_tag(self) -> str:
        return f"gpuprov:{self.installation_id}"

    def _name(self, key: str) -> str:
        name = self._prefix + key
        if len(name) > NAME_MAX:
            raise InvalidRequest(f"{self.id}: installation id {self.installation_id!r} is too long for names")
        return name

    def _key_of(self, name: str) -> str | None:
        return name[len(self._prefix):] if name.startswith(self._prefix) else None

    def _ref(self, droplet: dict[str, Any], key: str) -> InstanceRef:
        region = droplet.get("region")
        return InstanceRef(provider=self.id, instance_id=str(droplet["id"]), key=key,
                           region=region.get("slug") if isinstance(region, dict) else None,
                           created_at=created_at(droplet.get("created_at")))

    async def _gpu_droplets(self) -> list[dict[str, Any]]:
        # type=gpus: the default listing leaves GPU droplets out. (Only GPU sizes are offered, so no
        # droplet of ours is in the default listing.)
        return await self._pages("/droplets", "droplets", type="gpus")

    async def _owned_droplets(self, key: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """(key, droplet) of every droplet of ours, of `key` only when given."""
        droplets = await self._gpu_droplets()
        with rest.parsing(self.id, "droplets"):
            found = [(self._key_of(str(d.get("name") or "")), d) for d in droplets]
            return [(k, d) for k, d in found if k is not None and key in (None, k) and d["id"] is not None]

    # ------------------------------------------------------------------ side resources

    async def _firewalls(self, name: str | None = None) -> list[dict[str, Any]]:
        found = await self._pages("/firewalls", "firewalls")
        return [f for f in found if str(f.get("name") or "").startswith(self._prefix)
                and name in (None, f.get("name"))]

    async def _tags(self) -> list[str]:
        found = await self._pages("/tags", "tags")
        return [str(t["name"]) for t in found if str(t.get("name") or "").startswith(self._prefix)]

    async def _ensure_side_resources(self, name: str, ports: list[int], k8s_api_from: list[str]) -> None:
        """The droplet's tag, then its firewall on that tag (found by name, else made)."""
        # Creating a tag that exists returns it [unconfirmed]; a refusal other than that raises.
        await self._call("POST", "/tags", json={"name": name})
        if await self._firewalls(name):
            return
        body = {"name": name, "inbound_rules": inbound_rules(ports, k8s_api_from), "outbound_rules": OUTBOUND,
                "tags": [name]}
        await self._call("POST", "/firewalls", json=body)

    async def _remove_side_resources(self, name: str) -> None:
        # Every firewall of the name (two creates that raced may each have made one), then the tag.
        for fw in await self._firewalls(name):
            await self._call("DELETE", f"/firewalls/{fw['id']}", allow=(404,))
        await self._call("DELETE", f"/tags/{name}", allow=(404,))

    async def _account_key(self, public_key: str) -> str:
        """The fingerprint of `public_key` as an account key, registered when missing. Looked up by
        fingerprint (not by listing keys, limited to 10 per minute; that the single-key GET is not
        counted against that limit is [unconfirmed]), once per key per adapter instance."""
        known = self._key_fingerprints if self._key_fingerprints is not None else {}
        self._key_fingerprints = known
        fp = md5_fingerprint(public_key)
        if known.get(public_key) == fp:
            return fp

        async def find() -> str | None:
            resp = await self._call("GET", f"/account/keys/{fp}", allow=(404,))
            return None if resp.status_code == 404 else fp

        async def register() -> str:
            await self._call("POST", "/account/keys", json={"name": f"gpuprov {self.installation_id}",
                                                            "public_key": public_key.strip()})
            return fp

        # A concurrent create's registration ("already in use") is adopted: providers/account_objects.py.
        await account_objects.ensure(find, register)
        known[public_key] = fp
        return fp

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        body = self._json(await self._call("GET", "/account"))
        with rest.parsing(self.id, "account"):
            account = body["account"]
            team = (account.get("team") or {}).get("name")
            who = rest.clean(team or account.get("email") or account["uuid"], 120)
        return f"DigitalOcean {'team' if team else 'account'} {who}"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        if query.spot is True:
            return []  # DigitalOcean sells no spot droplets
        sizes = await self._pages("/sizes", "sizes")
        with rest.parsing(self.id, "sizes"):
            out = [offer for size in sizes if size.get("gpu_info") and size.get("available", True)
                   for offer in self._offers_of(size)]
        return rank_offers(out, query)

    def _offers_of(self, size: dict[str, Any]) -> list[Offer]:
        info = size["gpu_info"]
        name, memory = normalize_gpu(str(info.get("model") or size.get("description") or ""), size["slug"])
        vram = info.get("vram") or {}
        if vram.get("amount") and str(vram.get("unit") or "gib").lower() in ("gib", "gb"):
            memory = float(vram["amount"])
        gpu = GpuSpec(name=name, count=int(info["count"]), memory_gib=memory)
        return [Offer(provider=self.id, instance_type=str(size["slug"]), gpu=gpu, vcpus=int(size["vcpus"]),
                      memory_gib=round(int(size["memory"]) / 1024, 1), region=str(region),
                      price_per_hour=float(size["price_hourly"]), spot=False, available=True)
                for region in size.get("regions") or []]

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        image: str | int = spec.image or default_image(offer)
        if not _IMAGE.match(str(image)):
            raise InvalidRequest(f"{self.id}: --image must be an image slug (gpu-h100x1-base) or numeric id")
        image = int(image) if str(image).isdigit() else image
        data = user_data(spec.ssh_public_keys[1:], spec.user_data, k3s=spec.k3s)
        if data is not None and len(data.encode()) > USER_DATA_MAX:
            raise InvalidRequest(f"{self.id}: user data and SSH keys exceed the 64 KiB DigitalOcean takes")
        name = self._name(spec.key)
        fingerprint = await self._account_key(spec.ssh_public_keys[0])
        await self._ensure_side_resources(name, spec.ports, spec.k8s_api_from)
        found = [] if spec.unsent else await self._owned_droplets(spec.key)
        if found:
            with rest.parsing(self.id, "droplet"):
                return self._ref(found[0][1], spec.key)
        body: dict[str, Any] = {
            "name": name, "region": offer.region, "size": offer.instance_type, "image": image,
            "ssh_keys": [fingerprint], "tags": [name, self._installation_tag],
            "ipv6": False, "monitoring": False, "backups": False,
        }
        if data is not None:
            body["user_data"] = data
        scope = FailureScope(provider=self.id, region=offer.region, instance_type=offer.instance_type)
        try:
            with launch_request():  # the send is recorded as it leaves (providers/base.py)
                resp = await self._call("POST", "/droplets", scope=scope, json=body)
        except (CapacityError, QuotaError, InvalidRequest):
            # Refused: nothing was made, so drop the side resources now rather than at release. (After
            # a 5xx or a lost answer the droplet may exist; the retry reuses them.)
            if not await self._owned_droplets(spec.key):
                await self._remove_side_resources(name)
            raise
        with rest.parsing(self.id, "created droplet"):
            droplet = self._json(resp)["droplet"]
            return self._ref(droplet, spec.key).model_copy(update={"region": offer.region})

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        if not ref.instance_id.isdigit():
            return None  # droplet ids are integers: no such droplet
        resp = await self._call("GET", f"/droplets/{ref.instance_id}", allow=(404,))
        if resp.status_code == 404:
            return None
        body = self._json(resp)
        with rest.parsing(self.id, "droplet"):
            return self._status(body["droplet"], ref)

    def listing_calls(self, machines: int) -> int:
        return machines // self.page_size + 1  # a page each, the last one short

    async def list_machines(self) -> list[InstanceStatus]:
        # The tagged droplets' listing, every page (200 a page): the watch's whole round.
        owned = await self._owned_droplets()
        with rest.parsing(self.id, "droplets"):
            return [self._status(d, self._ref(d, key)) for key, d in owned]

    def _status(self, droplet: dict[str, Any], ref: InstanceRef) -> InstanceStatus:
        """One droplet object, as GET /droplets/{id} and the listing both return it."""
        status = str(droplet.get("status"))
        v4 = (droplet.get("networks") or {}).get("v4") or []
        host = next((str(n["ip_address"]) for n in v4 if n.get("type") == "public"), None)
        return InstanceStatus(ref=ref, state=_STATES.get(status, InstanceState.ERROR), host=host,
                              ssh_port=22,  # SSH on 22 at the public address, as root
                              ssh_user=self.capabilities.login_user,
                              instance_type=droplet.get("size_slug"), detail=status)

    async def terminate(self, ref: InstanceRef) -> None:
        if ref.instance_id.isdigit():
            await self._call("DELETE", f"/droplets/{ref.instance_id}", allow=(404,))
            if await self.get(ref) is not None:
                return  # still listed: the next terminate (or release) removes the side resources
        # The firewall and tag belong to the key: they go with its last droplet (a duplicate's
        # terminate leaves them to the twin; release() removes them after both).
        others = [d for _, d in await self._owned_droplets(ref.key) if str(d.get("id")) != ref.instance_id]
        if not others:
            await self._remove_side_resources(self._name(ref.key))

    async def list_owned(self) -> list[InstanceRef]:
        owned = await self._owned_droplets()
        with rest.parsing(self.id, "droplets"):
            machines = [self._ref(d, key) for key, d in owned]
        keys = {m.key for m in machines}
        # A firewall or tag of a key without a droplet: left by a create refused after they were made,
        # or a terminate cut short. Listed, for the sweep to release.
        with rest.parsing(self.id, "firewalls"):
            leftovers = [InstanceRef(provider=self.id, instance_id=str(f["id"]), kind=FIREWALL, key=key)
                         for f in await self._firewalls()
                         if (key := self._key_of(str(f["name"]))) and key not in keys]
        leftovers += [InstanceRef(provider=self.id, instance_id=tag, kind=TAG, key=key)
                      for tag in await self._tags() if (key := self._key_of(tag)) and key not in keys]
        return machines + leftovers

    async def find(self, key: str) -> InstanceRef | None:
        found = await self.find_all(key)
        return found[0] if found else None

    async def find_all(self, key: str) -> list[InstanceRef]:
        # Names are not unique: two creates that raced past the lookup made two droplets.
        owned = await self._owned_droplets(key)
        with rest.parsing(self.id, "droplets"):
            return [self._ref(d, key) for _, d in owned]

    async def release(self, key: str) -> None:
        await self._remove_side_resources(self._name(key))


def _fields(resp: httpx.Response) -> tuple[str, str]:
    """(id, message) of DigitalOcean's error body; other shapes (tags answer `{"error", ...}`) as the
    REST base reads them, never quoted raw."""
    try:
        body = resp.json()
    except ValueError:
        return rest.error_fields(resp)
    if isinstance(body, dict) and isinstance(body.get("id"), str) and isinstance(body.get("message"), str):
        return rest.clean(body["id"], rest.MAX_CODE), rest.clean(body["message"])
    return rest.error_fields(resp)


def _until_reset(reset: str | None, default: float) -> float:
    """Seconds until `ratelimit-reset` (epoch seconds: when the oldest counted request expires)."""
    try:
        return max(1.0, float(reset or "") - time.time())
    except ValueError:
        return default

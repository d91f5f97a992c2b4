"""Prime Intellect (research/provider-facts.md B.5): a GPU marketplace. Bearer API key, REST + JSON.

An offer is a marketplace listing: an upstream provider (runpod, datacrunch, ...) selling a GPU
configuration (`cloudId`, `gpuType`, `socket`, `gpuCount`) in a data center of a PI region
(united_states, canada, ...). The offer's `instance_type` carries what `POST /pods` needs
(`<provider>__<count>x<gpuType>__<socket>__<cloudId>`), its region the PI region and its zone the data
center. Create looks the listing up again (disk, image, whether it is still in stock) and launches on it.

SSH keys are account-level: no pod body takes a key (neither the official CLI nor SkyPilot passes one), so
the installation's key is registered once on the account (shared, never per pod; matched by key, not
name) and pods get the account's keys [unconfirmed]. Further keys of a request are NOT installed:
registering them would open every pod of the account to them; gpuprov still logs in with its own key.

No idempotency key and no tags: the pod name `gpuprov-<installation>-<key>` is both the ownership mark
and how a retried create finds its pod (names are not unique: two racing creates make two pods, and
`find_all` returns both). The login is what the pod's `sshConnection` ("root@1.2.3.4 -p 12345") says:
user, host and a mapped port. Errors are FastAPI's `{"detail": ...}` without codes: out of stock is
recognised by its words (as SkyPilot does), 402 (payment required) is the account's quota.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from providers import account_objects, naming, rest
from providers.base import (
    AuthError,
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
    Unsupported,
    launch_request,
    rank_offers,
)
from providers.cloudtime import created_at
from providers.credentials import ApiKeyCredentials
from providers.gpus import normalize_gpu
from providers.listing import Listing as CloudListing  # `Listing` here: a marketplace listing

DEFAULT_ENDPOINT = "https://api.primeintellect.ai/api/v1"
NAME_MAX = 64  # [unconfirmed]: the API's limit on pod names is not published
PREFERRED_IMAGE = "ubuntu_22_cuda_12"  # the plain image; listings name the images they can boot
SEP = "__"
MAX_PAGES = 500  # a listing that never ends (a server bug) is an error, not a hang
# The collections where the vendor's OpenAPI (https://api.primeintellect.ai/openapi.json) puts them: with a
# trailing slash. Which form the real server answers without a redirect is [unconfirmed] (one client notes
# "use trailing slash to avoid redirects"; a FastAPI server 307s whichever form its route does not declare),
# so `_req` also follows a same-origin 307/308 to the same path with the slash added or removed.
PODS, SSH_KEYS = "/pods/", "/ssh_keys/"

# PI's region slugs (`regions=` of the availability call, `region` of its items).
REGIONS = ["united_states", "canada", "eu_east", "eu_north", "eu_west", "asia_northeast", "australia"]

_STATES = {
    "PROVISIONING": InstanceState.PENDING,
    "PENDING": InstanceState.PENDING,
    "INSTALLING": InstanceState.PENDING,  # older clients' word for ACTIVE while the image installs
    "ACTIVE": InstanceState.RUNNING,
    "STOPPED": InstanceState.STOPPED,
    "ERROR": InstanceState.ERROR,
    "DELETING": InstanceState.TERMINATING,
    "TERMINATED": InstanceState.TERMINATED,
}
_UNAVAILABLE_STOCK = {"", "unavailable", "out of stock", "none", "sold out"}

# No error codes: SkyPilot tells capacity from other refusals by the detail's words. Quota words are
# checked first ("insufficient balance" is money, not stock).
_QUOTA_WORDS = ("quota", "limit exceeded", "insufficient balance", "insufficient funds", "payment required")
_CAPACITY_WORDS = ("capacity", "unavailable", "out of stock", "not available", "sold out", "no stock",
                   "insufficient")

_USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_HOSTNAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
_SSH = re.compile(r"^(?:ssh\s+)?(?:(?P<user>[^@\s]+)@)?(?P<host>[^\s@]+)(?:\s+-p\s*(?P<port>\d{1,5}))?$")


def slash_twin(resp: httpx.Response) -> str | None:
    """Where a 307/308 sends the request when it only adds or removes the path's trailing slash on the
    same origin (the absolute URL, query included); None for any other answer or redirect."""
    if resp.status_code not in (307, 308) or "location" not in resp.headers:
        return None
    asked = resp.request.url
    try:
        target = asked.join(resp.headers["location"])
    except (httpx.InvalidURL, ValueError):
        return None
    same_origin = (target.scheme, target.host, target.port) == (asked.scheme, asked.host, asked.port)
    if not same_origin or target.path == asked.path or target.path.rstrip("/") != asked.path.rstrip("/"):
        return None
    return str(target)


def pod_name(installation_id: str, key: str) -> str:
    """`gpuprov-<installation>-<key>`, at most NAME_MAX chars (providers/naming.py)."""
    return naming.owned_name(installation_id, key, NAME_MAX, what="a Prime Intellect pod name")


@dataclass(frozen=True)
class Listing:
    """What `POST /pods` needs to name a marketplace listing, parsed from an offer's instance_type."""

    provider: str
    gpu_count: int
    gpu_type: str
    socket: str
    cloud_id: str

    def encode(self) -> str:
        return SEP.join((self.provider, f"{self.gpu_count}x{self.gpu_type}", self.socket, self.cloud_id))

    @classmethod
    def parse(cls, instance_type: str) -> Listing:
        parts = instance_type.split(SEP, 3)
        m = re.fullmatch(r"(\d+)x(.+)", parts[1]) if len(parts) == 4 else None
        if m is None or not parts[0] or not parts[3]:
            raise InvalidRequest("primeintellect: instance type must be "
                                 "<provider>__<count>x<gpuType>__<socket>__<cloudId>")
        return cls(provider=parts[0], gpu_count=int(m.group(1)), gpu_type=m.group(2), socket=parts[2],
                   cloud_id=parts[3])

    @classmethod
    def of_item(cls, item: Mapping[str, Any]) -> Listing:
        return cls(provider=str(item.get("provider") or ""), gpu_count=int(item["gpuCount"]),
                   gpu_type=str(item["gpuType"]), socket=str(item.get("socket") or ""),
                   cloud_id=str(item["cloudId"]))


def gpu_name(gpu_type: str) -> str:
    """The canonical GPU name of a PI `gpuType` ("H100_80GB" -> H100, "A6000_48GB" -> A6000; the older
    spelling "RTXA6000_48GB", outside the spec's GPUType enum, -> A6000 too)."""
    name, _ = normalize_gpu(gpu_type)
    return name[3:] if re.fullmatch(r"RTXA\d+", name) else name


def parse_ssh_connection(value: Any) -> tuple[str | None, str, int] | None:
    """(user, host, port) from `sshConnection` ("root@1.2.3.4 -p 12345"; a list of them, or `[null]`
    while provisioning). None when there is none yet or it is not a plain user@host [-p port]:
    the host is a hostname or an IP literal, never anything a shell or ssh could read as an option."""
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str) and v.strip()), None)
    if not isinstance(value, str):
        return None
    m = _SSH.match(value.strip())
    if m is None:
        return None
    user, host, port = m.group("user"), m.group("host"), m.group("port")
    if user is not None and not _USER.fullmatch(user):
        return None
    if not _valid_host(host):
        return None
    number = int(port) if port else 22
    if not 1 <= number <= 65535:
        return None
    return user, host, number


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(host))


def _first(value: Any) -> str | None:
    """`ip` may be a string, a list of them, or `[null]`."""
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str) and v.strip()), None)
    return value.strip() if isinstance(value, str) and _valid_host(value.strip()) else None


def _in_stock(item: Mapping[str, Any]) -> bool:
    return str(item.get("stockStatus") or "").strip().lower() not in _UNAVAILABLE_STOCK


def detail_of(resp: httpx.Response) -> tuple[str, bool]:
    """(message, quoted): a 422's `errors` (the spec's ErrorResponse, `[{param, details}]`), else FastAPI's
    `detail` — a string, or a list of `{loc, msg}` (FastAPI's default 422, which the spec does not
    document but a FastAPI server answers when its handler is not overridden) — cleaned and bounded; any
    other body is described (status, host, size), never quoted (quoted=False)."""
    try:
        body = resp.json()
    except ValueError:
        return rest.describe_body(resp), False
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        param, details = errors[0].get("param"), errors[0].get("details")
        if isinstance(details, str):
            return rest.clean(f"{param}: {details}" if isinstance(param, str) and param else details), True
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, str) and detail.strip():
        return rest.clean(detail), True
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        first = detail[0]
        loc = first.get("loc")
        where = ".".join(str(p) for p in loc) if isinstance(loc, list) else ""
        msg = first.get("msg")
        if isinstance(msg, str):
            return rest.clean(f"{where}: {msg}" if where else msg), True
    return rest.describe_body(resp), False


class PrimeIntellectProvider(naming.FoundByName, rest.RestCloudProvider):
    id: ClassVar[str] = "primeintellect"
    credentials_model: ClassVar[type[ApiKeyCredentials]] = ApiKeyCredentials
    default_endpoint: ClassVar[str] = DEFAULT_ENDPOINT
    api_hosts: ClassVar[tuple[str, ...]] = ("api.primeintellect.ai",)
    listing: ClassVar[CloudListing] = CloudListing(
        tagline="Marketplace breadth across many providers",
        how_to_connect=("On app.primeintellect.ai open Settings → API Keys → Create API Key with Instances "
                        "read and write access, and paste it here."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Prime Intellect",
        k3s="ssh",
        k8s_api=False,
        ports=False,
        ports_reason="--port needs a firewall API; Prime Intellect pods expose only the ports their "
                     "upstream provider maps",
        spot=False,
        custom_image=False,
        login_user="root",  # what the pods' sshConnection names; get() reports the pod's own
        side_resources=[],
        user_keys="ssh",  # account-level keys only: the user's are added by gpuprov over SSH
        regions=REGIONS,
        default_regions=[],  # anywhere
        # No idempotency token: a create whose answer was lost may land this long after it was sent
        # (30 s request timeout plus a marketplace backend's own margin) [guess].
        create_in_flight_s=90.0,
        # Marketplace pods come from many providers; some take minutes to provision [guess].
        boot_timeout_s=1800.0,
        self_end=SelfEnd(
            method="none",
            how=("assumed [unconfirmed]: a guest shutdown does not end the bill and there is no pod-scoped "
                 "key; only terminating the pod through the API (account key) ends it"),
            source="https://docs.primeintellect.ai/",
        ),
    )
    page_size: ClassVar[int] = 100  # availability and pod listings (the CLI's page size)

    # ------------------------------------------------------------------ plumbing

    async def _req(self, method: str, path: str, *, scope: FailureScope | None = None,
                   allow: tuple[int, ...] = (), **kwargs: Any) -> httpx.Response:
        """One call; error statuses are mapped here (FastAPI `detail`, no codes), transport errors by rest."""
        resp = await self._call(method, path, allow=tuple(range(300, 600)), **kwargs)
        if (twin := slash_twin(resp)) is not None:
            # Followed by hand, once: the spec's paths are right under either reading of the trailing
            # slash (see PODS). Only 307/308, which keep the method and the body (RFC 9110 15.4.8/9), so a
            # POST is resent as it was; only to this origin, so the key never goes elsewhere; only the
            # slash twin of the path asked, so no other redirect is followed (httpx's follow_redirects
            # would take 301/302/303, turning a POST into a GET, and any Location). The redirect came
            # from routing, before the server did anything: resending cannot make a second pod.
            resp = await self._call(method, twin, allow=tuple(range(300, 600)), **kwargs)
        if resp.is_success or resp.status_code in allow:
            return resp
        raise self._error(resp, scope)

    def _error(self, resp: httpx.Response, scope: FailureScope | None) -> ProviderError:
        status = resp.status_code
        detail, quoted = detail_of(resp)
        text = f"{self.id}: HTTP {status}: {detail}"
        words = detail.lower() if quoted else ""
        if status == 429:
            return RateLimited(text, retry_after=rest.parse_retry_after(resp.headers.get("Retry-After")))
        if status in (401, 403):
            return AuthError(text)
        if status == 402:  # payment required: the account's wallet or limits, on every offer
            return QuotaError(text, scope=FailureScope(provider=self.id))
        if scope is not None and 400 <= status < 500:
            if any(w in words for w in _QUOTA_WORDS):
                return QuotaError(text, scope=FailureScope(provider=self.id))
            if any(w in words for w in _CAPACITY_WORDS):
                return CapacityError(text, scope=scope)
        if status >= 500 or status == 408:
            return Transient(text, in_doubt=status in (408, 502, 504))
        return InvalidRequest(text)

    async def _json_of(self, method: str, path: str, **kwargs: Any) -> Any:
        return rest.json_body(await self._req(method, path, **kwargs), provider=self.id)

    def _name(self, key: str) -> str:
        return pod_name(self.installation_id, key)

    def _ref(self, pod: Mapping[str, Any], key: str | None = None, region: str | None = None) -> InstanceRef:
        name = str(pod.get("name") or "")
        return InstanceRef(provider=self.id, instance_id=str(pod["id"]),
                           key=key or name.removeprefix(self._prefix), region=region,
                           created_at=created_at(pod.get("createdAt")))  # ISO 8601

    async def _availability(self, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Every item of the paginated availability listing (`{items, totalCount}`, pages from 1)."""
        items: list[dict[str, Any]] = []
        page = 1
        while True:
            body = await self._json_of("GET", "/availability/gpus",
                                       params={**params, "page": page, "page_size": self.page_size})
            with rest.parsing(self.id, "availability"):
                batch = [i for i in body["items"] if isinstance(i, dict)]
                total = int(body.get("totalCount") or 0)
            items += batch
            if not batch or len(items) >= total:
                return items
            page += 1
            if page > MAX_PAGES:
                raise Transient(f"{self.id}: availability listing did not end after {MAX_PAGES} pages")

    async def _pods(self) -> list[dict[str, Any]]:
        """Every pod on the account that is not gone (`GET /pods` paginated by offset/limit)."""
        pods: list[dict[str, Any]] = []
        while True:
            body = await self._json_of("GET", PODS, params={"offset": len(pods), "limit": self.page_size})
            with rest.parsing(self.id, "pods"):
                batch = [p for p in body["data"] if isinstance(p, dict)]
                total = int(body.get("total_count") or 0)
            pods += batch
            if not batch or len(pods) >= total:
                return [p for p in pods if str(p.get("status") or "").upper() != "TERMINATED"]
            if len(pods) > MAX_PAGES * self.page_size:
                raise Transient(f"{self.id}: pod listing did not end after {MAX_PAGES} pages")

    _machines = _pods  # what naming.FoundByName lists and matches names in

    async def _ensure_ssh_key(self, public_key: str) -> None:
        """The installation's key on the account, once: matched by key type and body (any name), so a key
        registered by hand or by another installation is reused; a racing registration is fine."""
        wanted = public_key.split()[:2]

        async def find() -> bool | None:
            body = await self._json_of("GET", SSH_KEYS)
            with rest.parsing(self.id, "ssh_keys"):
                return any(str(k.get("publicKey") or "").split()[:2] == wanted for k in body["data"]) or None

        async def register() -> bool:
            await self._req("POST", SSH_KEYS, json={"name": f"gpuprov-{self.installation_id}",
                                                     "publicKey": " ".join(wanted)})
            return True

        # A concurrent create's registration is adopted; any other refusal stands.
        await account_objects.ensure(find, register)

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        body = await self._json_of("GET", "/user/whoami")
        with rest.parsing(self.id, "whoami"):
            data = body["data"]
            who = data.get("slug") or data.get("email") or data["id"]
        return f"Prime Intellect user {rest.clean(who, 100)}"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        if query.spot is True:
            return []  # spot listings exist, but gpuprov does not launch them here
        if query.region and query.region not in REGIONS:
            return []
        params: dict[str, Any] = {}
        if query.region:
            params["regions"] = [query.region]
        if query.gpu_count:
            params["gpu_count"] = query.gpu_count
        items = await self._availability(params)
        out = []
        for item in items:
            with rest.parsing(self.id, "availability item"):
                offer = self._offer(item)
            if offer is not None:
                out.append(offer)
        return rank_offers(out, query)

    def _offer(self, item: Mapping[str, Any]) -> Offer | None:
        if item.get("isSpot") or item.get("region") not in REGIONS:
            return None  # spot (unsupported), or a region the capabilities do not name
        prices = item.get("prices") or {}
        price = prices.get("onDemand") if prices.get("onDemand") is not None else prices.get("communityPrice")
        if price is None or float(price) <= 0:
            return None
        listing = Listing.of_item(item)
        gpu = None
        if listing.gpu_type.upper() != "CPU_NODE" and listing.gpu_count > 0:
            memory = item.get("gpuMemory")
            gpu = GpuSpec(name=gpu_name(listing.gpu_type), count=listing.gpu_count,
                          memory_gib=float(memory) if memory else normalize_gpu(listing.gpu_type)[1])
        return Offer(
            provider=self.id, instance_type=listing.encode(), gpu=gpu,
            vcpus=int((item.get("vcpu") or {}).get("defaultCount") or 0),
            memory_gib=float((item.get("memory") or {}).get("defaultCount") or 0),
            region=str(item["region"]), zone=item.get("dataCenter") or None, price_per_hour=float(price),
            spot=False, available=_in_stock(item),
        )

    async def _current_item(self, offer: Offer, listing: Listing, scope: FailureScope) -> dict[str, Any]:
        """The offer's listing as the marketplace shows it now (disk, images); sold out: CapacityError."""
        items = await self._availability({"regions": [offer.region], "gpu_type": listing.gpu_type,
                                          "gpu_count": listing.gpu_count})
        with rest.parsing(self.id, "availability"):
            for item in items:
                if Listing.of_item(item) == listing and (item.get("dataCenter") or None) == offer.zone \
                        and _in_stock(item):
                    return item
        raise CapacityError(f"{self.id}: {offer.instance_type} is no longer listed in "
                            f"{offer.zone or offer.region}", scope=scope)

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        if spec.user_data:
            raise Unsupported("Prime Intellect pods take no user data (no cloud-init)")
        listing = Listing.parse(offer.instance_type)
        name = pod_name(self.installation_id, spec.key)
        found = [] if spec.unsent else await self._by_name(name)
        if found:
            with rest.parsing(self.id, "pod"):
                return self._ref(found[0], key=spec.key, region=offer.region)
        # Only the installation's key goes on the account: the user's keys are added over SSH once
        # the pod answers (capabilities.user_keys), never registered account-wide.
        await self._ensure_ssh_key(spec.ssh_public_keys[0])
        scope = FailureScope(provider=self.id, region=offer.region, zone=offer.zone,
                             instance_type=offer.instance_type)
        item = await self._current_item(offer, listing, scope)
        with rest.parsing(self.id, "availability item"):
            images = [str(i) for i in item.get("images") or []]
            pod: dict[str, Any] = {
                "name": name, "cloudId": listing.cloud_id, "gpuType": listing.gpu_type,
                "socket": listing.socket or None, "gpuCount": listing.gpu_count,
                "diskSize": (item.get("disk") or {}).get("defaultCount"),
                "vcpus": (item.get("vcpu") or {}).get("defaultCount"),
                "memory": (item.get("memory") or {}).get("defaultCount"),
                "image": PREFERRED_IMAGE if PREFERRED_IMAGE in images or not images else images[0],
                "dataCenterId": offer.zone, "security": item.get("security"),
            }
        body = {"pod": {k: v for k, v in pod.items() if v is not None},
                "provider": {"type": listing.provider} if listing.provider else {}}
        with launch_request():  # the send is recorded as it leaves (providers/base.py)
            created = await self._json_of("POST", PODS, json=body, scope=scope)
        with rest.parsing(self.id, "pod"):
            return self._ref(created, key=spec.key, region=offer.region)

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        resp = await self._req("GET", "/pods/status", params={"pod_ids": [ref.instance_id]}, allow=(404,))
        if resp.status_code == 404:
            return None
        body = rest.json_body(resp, provider=self.id)
        with rest.parsing(self.id, "pod status"):
            entry = next((d for d in body["data"]
                          if isinstance(d, dict) and str(d.get("podId")) == ref.instance_id), None)
            if entry is None:  # gone: the status call leaves out pods it no longer has
                return None
            return self._status(ref, entry)

    def _status(self, ref: InstanceRef, entry: Mapping[str, Any]) -> InstanceStatus:
        word = str(entry.get("status") or "").upper()
        state = _STATES.get(word, InstanceState.PENDING)  # a new word: wait (boot timeout) rather than kill
        detail = word or None
        login = parse_ssh_connection(entry.get("sshConnection"))
        user, host, port = (login if login else (None, _first(entry.get("ip")), None))
        if state == InstanceState.RUNNING:
            progress = entry.get("installationProgress")
            if entry.get("installationFailure"):
                state, detail = InstanceState.ERROR, f"{word}: image installation failed"
            elif login is None:  # ACTIVE before SSH is reachable (the image is still installing)
                state, detail = InstanceState.PENDING, f"{word}, no SSH connection yet"
                host = None
            elif isinstance(progress, int | float) and progress < 100:
                state, detail = InstanceState.PENDING, f"{word}, installing ({progress:g}%)"
        return InstanceStatus(
            ref=ref, state=state, host=host if state != InstanceState.PENDING else None,
            ssh_port=port or 22, ssh_user=user or self.capabilities.login_user, detail=detail,
        )

    async def terminate(self, ref: InstanceRef) -> None:
        await self._req("DELETE", f"/pods/{ref.instance_id}", allow=(404,))  # 404: already gone


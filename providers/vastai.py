"""Vast.ai (research/provider-facts.md B.7). Bearer API key, REST + JSON at console.vast.ai.

Vast is a marketplace: hosts list *asks* (some of a machine's GPUs at a price, in a country) and
renting one (`PUT /api/v0/asks/{id}/`) makes an *instance*, a Docker container on that host. So an
offer here is an ask: its `instance_type` carries the ask id (`<ask id>-<n>x<GPU>`), its region the
host's country code, its price `dph_total`; the spot twin is the same ask bid at its `min_bid`
(an interruptible instance: the create passes that bid as `price`). Asks vanish as others rent
them, so a create on one that is gone fails with capacity scoped to exactly that ask.

Instances are containers (no systemd: no k3s) reached as root on a host port mapped to 22
(`public_ipaddr` + `ports["22/tcp"][0].HostPort`). The user's keys are attached to the instance
itself (`POST /instances/{id}/ssh/`), never to the account, whose keys every instance gets. No
idempotency key: the label `gpuprov-<installation>-<key>` marks ownership and is looked up
(`GET /api/v1/instances/`, paginated) before a create. No side resources.

Vast limits each endpoint to a minimum interval per caller and answers 429 without Retry-After.
Calls to the endpoints with a documented limit (create, show, list, destroy; search) wait their turn
per key and endpoint (providers/pacing.py, shared by the host's processes like Lambda's), creates
also on a launch queue Temporal dispatches at the create's rate across every worker
(`launches_per_s`); a 429 all the same (a penalty, a caller outside gpuprov) is retried with the
CLI's kind of backoff before RateLimited is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx

from providers import pacing, rest
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
    container_env,
    launch_request,
    rank_offers,
)
from providers.cloudtime import created_at
from providers.credentials import ApiKeyCredentials
from providers.gpus import normalize_gpu
from providers.listing import Listing

DEFAULT_ENDPOINT = "https://console.vast.ai"  # the CLI's server_url; paths carry /api/v0 or /api/v1
DEFAULT_IMAGE = "vastai/base-image:@vastai-automatic-tag"  # the documented default of `image`
LABEL_MAX = 256  # docs: create_instance x-input-validation
ONSTART_MAX = 4096  # docs: args, args_str and onstart together
# The docs' per-endpoint `x-rate-limit` thresholds (vast-ai/docs api-reference/openapi/yaml; the
# simulation's in fakeclouds/vastai_api.py): the minimum seconds between two calls of one endpoint by
# one key. Search allows 10 a minute, paced here as one per 6 s: never over it, and a burst of plans
# shares one search anyway (providers/fresh_listing.py); `make fuzz` met its 429s unpaced.
MIN_INTERVAL_S = {"create": 4.5, "show": 2.0, "list": 1.0, "destroy": 3.0, "search": 60 / 10}
RATE_LIMITED_RETRY_AFTER = 5.0  # Vast says nothing; the longest documented interval is 4.5 s

_CODES: dict[str, rest.ErrorKind] = {
    "no_such_ask": "capacity",
    "insufficient_credit": "quota",  # [unconfirmed] code; Vast's docs name "Insufficient credits"
    "invalid_args": "invalid",
    "invalid_price": "invalid",
    "invalid_request": "invalid",
    "auth_error": "auth",
    "invalid_user_key": "auth",
    "rate_limit_exceeded": "rate_limit",
}
_GONE = {"no_such_instance", "not_found"}

# actual_status -> state. null/created/loading: still coming up. Any stop is not ours (we never stop
# instances): an interruptible outbid, or a bid too low at create. exited: the container died.
_STATES = {
    None: InstanceState.PENDING,
    "created": InstanceState.PENDING,
    "loading": InstanceState.PENDING,
    "scheduling": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopped": InstanceState.ERROR,
    "exited": InstanceState.ERROR,
    "offline": InstanceState.ERROR,
    "unknown": InstanceState.ERROR,
}


def outbid(inst: dict[str, Any]) -> bool:
    """An interruptible (bid) instance another renter's higher bid (or an on-demand rental) stopped:
    `is_bid` ("Whether the instance was created via bidding", the docs' OpenAPI) and `actual_status`
    stopped while the user's `intended_status` is still running, or a `status_msg` saying outbid.
    [unconfirmed]: Vast documents no outbid field or message; this reads what its instance object has.
    A bid too low at create (created stopped, intended stopped) is no outbid: it never ran."""
    if inst.get("is_bid") is not True or inst.get("actual_status") != "stopped":
        return False
    return inst.get("intended_status") == "running" or "outbid" in str(inst.get("status_msg") or "").lower()


def country_of(geolocation: object) -> str | None:
    """The two-letter country code of a `geolocation` ("Texas, US" or "US"); None when there is none."""
    if not isinstance(geolocation, str):
        return None
    code = geolocation.rsplit(",", 1)[-1].strip().upper()
    return code if len(code) == 2 and code.isalpha() else None


def ask_of(offer: Offer) -> int:
    head = offer.instance_type.split("-", 1)[0]
    if not head.isdigit():
        raise InvalidRequest(f"vastai: {offer.instance_type!r} names no Vast.ai ask")
    return int(head)


def limited_endpoint(method: str, path: str) -> str | None:
    """Which of MIN_INTERVAL_S's endpoints a call is (a path as the adapter sends it), or None."""
    parts = path.strip("/").split("/")
    match method, parts:
        case "PUT", ["api", "v0", "asks", _]:
            return "create"
        case ("POST", ["api", "v0", "bundles"]) | ("PUT", ["api", "v0", "search", "asks"]):
            return "search"
        case "GET", ["api", "v1", "instances"]:
            return "list"
        case "GET", ["api", "v0", "instances", _]:
            return "show"
        case "DELETE", ["api", "v0", "instances", _]:
            return "destroy"
    return None


def error_fields(resp: httpx.Response) -> tuple[str, str]:
    """(error, message) from Vast's shapes: `{success, error, msg}`, only `msg`/`message`, or
    `{"detail"}`; anything else (a gateway's page, plain text) is described, never quoted."""
    try:
        body = resp.json()
    except ValueError:
        return "", rest.describe_body(resp)
    if not isinstance(body, dict):
        return "", rest.describe_body(resp)
    code = body.get("error")
    message = next((body[k] for k in ("msg", "message", "detail") if isinstance(body.get(k), str)), "")
    code = rest.clean(code, rest.MAX_CODE) if isinstance(code, str) else ""
    message = rest.clean(message)
    if "no_such_ask" in message:  # the 404 for a vanished ask says it in `msg` (error: invalid_args)
        code = "no_such_ask"
    return (code, message) if code or message else ("", rest.describe_body(resp))


class VastAIProvider(rest.RestCloudProvider):
    id: ClassVar[str] = "vastai"
    credentials_model: ClassVar[type[ApiKeyCredentials]] = ApiKeyCredentials
    default_endpoint: ClassVar[str] = DEFAULT_ENDPOINT
    api_hosts: ClassVar[tuple[str, ...]] = ("console.vast.ai",)
    error_codes: ClassVar[Mapping[str, rest.ErrorKind]] = _CODES
    listing: ClassVar[Listing] = Listing(
        tagline="Cheapest GPU marketplace",
        how_to_connect=("On console.vast.ai open Account → Keys (cloud.vast.ai/manage-keys) and create an API"
                        " key; paste it here."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Vast.ai",
        k3s="none",
        k3s_reason="Vast.ai instances are Docker containers without systemd; k3s cannot run there",
        ports=False,
        ports_reason="--port: Vast.ai maps container ports to host ports the host picks; no firewall API",
        spot=True,
        custom_image=True,
        login_user="root",
        # No idempotency token: a create whose answer was lost may land this long after it was sent
        # (30 s request timeout, plus the backoff over rate limits, plus margin). [guess]
        create_in_flight_s=90.0,
        launches_per_s=1 / MIN_INTERVAL_S["create"],
        boot_timeout_s=1800.0,  # image pulls on consumer uplinks can take many minutes
        self_end=SelfEnd(
            method="api",
            how=("vastai destroy instance $CONTAINER_ID with CONTAINER_API_KEY, the per-instance key Vast "
                 "sets in every instance; a stopped instance still bills its storage"),
            source="https://docs.vast.ai/guides/instances/docker-environment",
            command=(f"vastai destroy instance {container_env('CONTAINER_ID')} "
                     f"--api-key {container_env('CONTAINER_API_KEY')}"),
        ),
    )
    page_size: ClassVar[int] = 25  # the v1 list's maximum
    disk_gb: ClassVar[int] = 32
    # Between attempts of a call refused 429 without Retry-After (the CLI: 0.15 s x 1.5; longer here,
    # as the documented minimum intervals reach 4.5 s).
    backoff_s: ClassVar[tuple[float, ...]] = (0.15, 0.3, 0.6, 1.2, 2.4)

    # ------------------------------------------------------------------ plumbing

    def pacer(self, endpoint: str) -> pacing.Pacer:
        """This key's pacer for one of MIN_INTERVAL_S's endpoints, in this process (every adapter of
        the key shares it) and, once `pacing.shared_dir` is set, across the host's processes."""
        key = str(self.credentials.reveal()["api_key"])
        return pacing.shared(self.id, f"{self.endpoint} {endpoint}", key, MIN_INTERVAL_S[endpoint])

    def paced(self) -> bool:
        return pacing.time_scale() > 0  # 0: a simulation with its limits off

    def _slot(self, method: str, path: str) -> contextlib.AbstractAsyncContextManager[None]:
        endpoint = limited_endpoint(method, path)
        return self.pacer(endpoint).slot() if endpoint else contextlib.nullcontext()

    def _raise(self, resp: httpx.Response, scope: FailureScope | str | None = None) -> ProviderError:
        code, message = error_fields(resp)
        return rest.map_error(provider=self.id, code=code, message=message, status=resp.status_code,
                              scope=scope, codes=_CODES, retry_after=resp.headers.get("Retry-After"))

    async def _send(self, method: str, path: str, *, allow: tuple[int, ...] = (),
                    scope: FailureScope | None = None, **kwargs: Any) -> httpx.Response:
        """One call, retried while Vast refuses it as too frequent (a 429 there has no effect). A
        429 that says when to come back (Retry-After) is the caller's to wait out: RateLimited."""
        for delay in (*self.backoff_s, None):
            try:
                async with self._slot(method, path):
                    resp = await self._http().request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                raise rest.map_transport_error(exc, provider=self.id) from None
            if resp.status_code != 429:
                break
            header = resp.headers.get("Retry-After")
            if header is not None or delay is None:
                raise RateLimited(f"{self.id}: API requests too frequent ({method} {path})",
                                  retry_after=rest.parse_retry_after(header, RATE_LIMITED_RETRY_AFTER))
            await asyncio.sleep(delay)
        if resp.is_success or resp.status_code in allow:
            return resp
        raise self._raise(resp, scope)

    def _body(self, resp: httpx.Response) -> dict[str, Any]:
        body = rest.json_body(resp, provider=self.id)
        if not isinstance(body, dict):
            raise Transient(f"{self.id}: answer is not a JSON object ({resp.request.url.path})")
        return body

    @property
    def _prefix(self) -> str:
        return f"gpuprov-{self.installation_id}-"

    def _label(self, key: str) -> str:
        label = self._prefix + key
        if len(label) > LABEL_MAX:  # keys are ≤ 63 chars: only an absurd installation id gets here
            raise InvalidRequest(f"{self.id}: label {len(label)} chars long; Vast.ai takes {LABEL_MAX}")
        return label

    def _ref(self, inst: dict[str, Any], key: str | None = None) -> InstanceRef:
        label = str(inst.get("label") or "")
        return InstanceRef(provider=self.id, instance_id=str(int(inst["id"])),
                           key=key or label.removeprefix(self._prefix),
                           region=country_of(inst.get("geolocation")),
                           created_at=created_at(inst.get("start_date")))  # epoch seconds (a float)

    async def _instances(self, filters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every instance of the account matching `filters`, page after page (next_token)."""
        params: dict[str, Any] = {"select_filters": json.dumps(filters or {}), "limit": self.page_size,
                                  "order_by": json.dumps([{"col": "id", "dir": "asc"}])}
        out: list[dict[str, Any]] = []
        for _ in range(10_000):  # a cursor that never ends is a broken answer, not a long list
            body = self._body(await self._send("GET", "/api/v1/instances/", params=params))
            with rest.parsing(self.id, "instances"):
                page = body.get("instances") or []
                out += [i for i in page if isinstance(i, dict)]
                token = body.get("next_token")
            if not token:
                return out
            params["after_token"] = str(token)
        raise Transient(f"{self.id}: the instance list never ended")

    async def _by_label(self, label: str) -> list[dict[str, Any]]:
        return await self._instances({"label": {"eq": label}})

    async def _attach_keys(self, instance_id: str, keys: list[str], *, fresh: bool) -> None:
        """The user's keys on the instance itself. A retried create finds the instance: it attaches
        only what is missing (a second attach of a key is refused)."""
        wanted = list(dict.fromkeys(k.strip() for k in keys))
        if not fresh:
            body = self._body(await self._send("GET", f"/api/v0/instances/{instance_id}/ssh/"))
            with rest.parsing(self.id, "instance ssh keys"):
                listed = body.get("ssh_keys") or []
                if isinstance(listed, str):  # documented: a JSON string holding the array
                    listed = json.loads(listed)
                have = {str(k.get("public_key") or "").strip() for k in listed if isinstance(k, dict)}
            wanted = [k for k in wanted if k not in have]
        for key in wanted:
            await self._send("POST", f"/api/v0/instances/{instance_id}/ssh/", json={"ssh_key": key})

    def _gone(self, resp: httpx.Response) -> bool:
        """Vast's word for an instance that is not there (`no_such_instance`); a bare 404 (a wrong
        endpoint, a proxy) is not taken for it: that would let a live instance be forgotten."""
        return error_fields(resp)[0] in _GONE

    async def _destroy(self, instance_id: str) -> None:
        resp = await self._send("DELETE", f"/api/v0/instances/{instance_id}/", allow=(404,))
        if (resp.is_success and not _failed(resp)) or self._gone(resp):
            return  # destroyed, or already gone
        raise self._raise(resp)

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        body = self._body(await self._send("GET", "/api/v0/users/current/"))
        with rest.parsing(self.id, "user"):
            user = int(body["id"])
        digest = hashlib.sha256(str(self.credentials.reveal()["api_key"]).encode()).hexdigest()[:12]
        return f"Vast.ai user {user} (API key {digest})"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        q: dict[str, Any] = {
            # the CLI's default filters
            "verified": {"eq": True}, "external": {"eq": False}, "rentable": {"eq": True},
            "rented": {"eq": False},
            "direct_port_count": {"gte": 1},  # SSH is reached on a directly mapped port
            "type": "ondemand", "order": [["dph_total", "asc"]], "allocated_storage": self.disk_gb,
        }
        if query.region:
            q["geolocation"] = {"in": [query.region.upper()]}
        if query.gpu_count:
            q["num_gpus"] = {"eq": query.gpu_count}
        resp = await self._send("POST", "/api/v0/bundles/", json=q, allow=(404,))
        if resp.status_code == 404:  # search answers a bad key 404 "Invalid user key" (docs)
            message = error_fields(resp)[1]
            if "user key" in message.lower():
                raise AuthError(f"{self.id}: {message}")
            raise InvalidRequest(f"{self.id}: offer search not found ({message})")
        body = self._body(resp)
        out: list[Offer] = []
        with rest.parsing(self.id, "offers"):
            for row in body["offers"]:
                out += self._offers_of(row)
        return rank_offers(out, query)

    def _offers_of(self, row: dict[str, Any]) -> list[Offer]:
        region = country_of(row.get("geolocation"))
        count = int(row.get("num_gpus") or 0)
        if region is None or count < 1 or not row.get("dph_total"):
            return []  # no country to plan with, or not a GPU ask
        name, _ = normalize_gpu(str(row.get("gpu_name") or ""))
        gpu = GpuSpec(name=name, count=count, memory_gib=round(float(row["gpu_ram"]) / 1024, 1))
        def offer(price: float, spot: bool) -> Offer:
            return Offer(provider=self.id, instance_type=f"{int(row['id'])}-{count}x{name}", gpu=gpu,
                         vcpus=max(1, int(float(row.get("cpu_cores_effective") or 0))),
                         memory_gib=round(float(row.get("cpu_ram") or 0) / 1024, 1), region=region,
                         price_per_hour=round(price, 4), spot=spot)

        out = [offer(float(row["dph_total"]), False)]
        bid = row.get("min_bid")
        if isinstance(bid, int | float) and 0 < bid < float(row["dph_total"]):
            # The spot twin: the same ask, bid at its minimum (the bid is what the create passes).
            out.append(offer(float(bid), True))
        return out

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        ask = ask_of(offer)
        label = self._label(spec.key)
        found = [] if spec.unsent else await self._by_label(label)
        if found:
            with rest.parsing(self.id, "instance"):
                ref = self._ref(min(found, key=lambda i: int(i["id"])), key=spec.key)
            await self._attach_keys(ref.instance_id, spec.ssh_public_keys, fresh=False)
            return ref
        body: dict[str, Any] = {"client_id": "me", "image": spec.image or DEFAULT_IMAGE, "label": label,
                                "disk": self.disk_gb, "runtype": "ssh"}
        if spec.user_data:
            body["onstart"] = self._onstart(spec.user_data)
        if offer.spot:
            body["price"] = offer.price_per_hour  # the bid: the ask's min bid when it was offered
        scope = FailureScope(provider=self.id, region=offer.region, instance_type=offer.instance_type)
        try:
            with launch_request():  # the send is recorded as it leaves (providers/base.py)
                resp = await self._send("PUT", f"/api/v0/asks/{ask}/", json=body, scope=scope,
                                        allow=(404, 410))
        except QuotaError as exc:  # out of credit: the whole account, not this ask
            raise QuotaError(exc.message, FailureScope(provider=self.id)) from None
        if resp.status_code in (404, 410):  # the ask was rented by someone else meanwhile
            raise CapacityError(f"{self.id}: ask {ask} is no longer available", scope)
        answer = self._body(resp)
        if answer.get("success") is not True:
            raise await self._refused(resp, answer, scope)
        with rest.parsing(self.id, "create"):
            instance_id = str(int(answer["new_contract"]))
        await self._attach_keys(instance_id, spec.ssh_public_keys, fresh=True)
        return InstanceRef(provider=self.id, instance_id=instance_id, key=spec.key, region=offer.region)

    async def _refused(self, resp: httpx.Response, answer: dict[str, Any],
                       scope: FailureScope) -> ProviderError:
        """A create answered `success: false`. An interruptible one bid too low still makes an
        instance (stopped, billing its storage): destroy it before saying so."""
        contract = answer.get("new_contract")
        code, message = error_fields(resp)
        if contract is not None:
            # Should this destroy fail, the instance still carries our label: a retried create finds
            # it (stopped: the wait for running fails and tears it down), and the sweep lists it.
            try:
                await self._destroy(str(int(contract)))
            except (ValueError, TypeError):
                raise Transient(f"{self.id}: refused create named an unreadable instance") from None
            # The ask at that price is gone (someone bid higher): skip it, as when it vanishes.
            return CapacityError(f"{self.id}: ask refused the bid ({code or 'error'}: {message})", scope)
        err = self._raise(resp, scope)
        if isinstance(err, QuotaError):  # out of credit: the whole account
            return QuotaError(err.message, FailureScope(provider=self.id))
        return err

    def _onstart(self, user_data: str) -> str:
        """Vast runs `onstart` as a shell script when the container starts: no cloud-init."""
        head = user_data.lstrip()
        if head.startswith("#cloud-config") or head.startswith("Content-Type: multipart/") \
                or head.startswith("MIME-Version"):
            raise InvalidRequest(f"{self.id}: user data must be a shell script (Vast.ai runs it as onstart; "
                                 "there is no cloud-init)")
        if len(user_data) > ONSTART_MAX:
            raise InvalidRequest(f"{self.id}: user data is {len(user_data)} chars; "
                                 f"Vast.ai takes {ONSTART_MAX}")
        return user_data

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        if not ref.instance_id.isdigit():
            return None  # not a Vast instance id: no such instance
        resp = await self._send("GET", f"/api/v0/instances/{ref.instance_id}/", params={"owner": "me"},
                                allow=(404,))
        if resp.status_code == 404:
            if self._gone(resp):
                return None
            raise self._raise(resp)
        inst = self._body(resp).get("instances")
        if inst is None:  # destroyed instances are gone at once
            return None
        with rest.parsing(self.id, "instance"):
            return self._status(ref, inst)

    def _status(self, ref: InstanceRef, inst: dict[str, Any]) -> InstanceStatus:
        actual = inst.get("actual_status")
        state = _STATES.get(actual, InstanceState.ERROR)
        host = str(inst.get("public_ipaddr") or "").strip() or None  # real answers end in a newline
        port: int | None = None
        mapped = (inst.get("ports") or {}).get("22/tcp")
        if isinstance(mapped, list) and mapped and isinstance(mapped[0], dict) and mapped[0].get("HostPort"):
            port = int(mapped[0]["HostPort"])  # a string in the answer
        if state == InstanceState.RUNNING and (host is None or port is None):
            state = InstanceState.PENDING  # up, but its SSH port is not mapped yet
        detail = " - ".join(str(x) for x in (actual, inst.get("status_msg")) if x)
        if outbid(inst):
            state = InstanceState.STOPPED  # stopped by the host, not broken: it would resume if the bid won
        return InstanceStatus(
            ref=ref, state=state, host=host if state == InstanceState.RUNNING else None,
            ssh_port=port if state == InstanceState.RUNNING and port else 22,
            ssh_user=self.capabilities.login_user, instance_type=None, detail=rest.clean(detail) or None,
            preempted=outbid(inst),
        )

    async def terminate(self, ref: InstanceRef) -> None:
        if ref.instance_id.isdigit():
            await self._destroy(ref.instance_id)

    async def _owned(self) -> list[dict[str, Any]]:
        """Our instances (by label prefix), every page of the account's listing."""
        return [i for i in await self._instances() if str(i.get("label") or "").startswith(self._prefix)]

    async def list_owned(self) -> list[InstanceRef]:
        instances = await self._owned()
        with rest.parsing(self.id, "instances"):
            return [self._ref(i) for i in instances]

    def listing_calls(self, machines: int) -> int:
        return machines // self.page_size + 1  # a page each, the last one short

    async def list_machines(self) -> list[InstanceStatus]:
        # The v1 listing's instance objects carry actual_status, public_ipaddr and the port map the
        # single GET reads: one call a page. Destroyed instances are gone from it at once.
        instances = await self._owned()
        with rest.parsing(self.id, "instances"):
            return [self._status(self._ref(i), i) for i in instances]

    async def find(self, key: str) -> InstanceRef | None:
        found = await self._by_label(self._label(key))
        with rest.parsing(self.id, "instance"):
            return self._ref(min(found, key=lambda i: int(i["id"])), key=key) if found else None

    async def find_all(self, key: str) -> list[InstanceRef]:
        # Labels are not unique: two creates that raced past the lookup made two.
        found = await self._by_label(self._label(key))
        with rest.parsing(self.id, "instances"):
            return [self._ref(i, key=key) for i in found]


def _failed(resp: httpx.Response) -> bool:
    """A 2xx whose JSON says `success: false` (Vast answers some refusals so)."""
    try:
        body = resp.json()
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("success") is False

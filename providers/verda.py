"""Verda (formerly DataCrunch): REST + JSON at api.verda.com/v1, OAuth2 client credentials.

The model (provider-facts.md B.4, the official SDK verda-cloud/sdk-python): an instance is a VM of
an instance type in a location (FIN-01..03, ICE-01); `POST /instances` answers its id as plain text
and makes an OS volume with it. There are no tags and no idempotency key, so the hostname carries
ownership and identity (`gpuprov-<installation>-<key>`; the description repeats it with the full
key), and create looks for it before launching. k3s is installed at boot by a per-instance startup
script (`/scripts`, named like the instance; the caller's user data rides along when it is a
script). SSH keys (`/sshkeys`) are shared: one per installation and public key. Terminate deletes the
instance with its OS volume for good, then its startup script; Verda refuses to delete an instance
while it provisions, so terminate waits that out (bounded, then Transient). A volume or script left
without its instance is listed by `list_owned` and removed by `release(key)`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import textwrap
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, ClassVar

import httpx
from pydantic import SecretStr

from providers import cloudinit, naming, rest
from providers.auth import OAuth2Error
from providers.base import (
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
    QuotaError,
    SelfEnd,
    Transient,
    Unsupported,
    launch_request,
    rank_offers,
)
from providers.cloudtime import created_at
from providers.credentials import Credentials, field
from providers.gpus import normalize_gpu
from providers.listing import Listing

DEFAULT_ENDPOINT = "https://api.verda.com/v1"  # the SDK's default base URL
NAME_MAX = 60  # hostname length dstack keeps to [unconfirmed]
LOCATIONS = ["FIN-01", "FIN-02", "FIN-03", "ICE-01"]
COUNTRIES = {"FI": ["FIN-01", "FIN-02", "FIN-03"], "IS": ["ICE-01"]}  # /locations' country_code
DEFAULT_IMAGE = "ubuntu-24.04-cuda-12.8-open-docker"  # dstack's choice; older GPUs need another
OS_VOLUME_GB = 100  # [guess] room for the CUDA image, container images and k3s
REFRESH_MARGIN_S = 30.0
# Delete is refused while an instance provisions: wait this long for it to be up, then Transient.
PROVISIONING_WAIT_S = 20.0

VOLUME, SCRIPT = "volume", "startup-script"
PROVISIONING = {"ordered", "provisioning"}
GONE_MESSAGES = ("invalid instance id", "can't discontinue a discontinued instance")
# No documented capacity code: a create refused with one of these words is out of capacity [unconfirmed].
CAPACITY_WORDS = ("capacity", "not enough resources", "not available", "no available", "out of stock",
                  "sold out")

_CODES: dict[str, rest.ErrorKind] = {
    "invalid_request": "invalid",
    "unauthorized_request": "auth",
    "insufficient_funds": "quota",
    "forbidden_action": "invalid",  # a state refusal ("Can't discontinue ..."), not a permission one
    "not_found": "invalid",
    "server_error": "transient",
    "service_unavailable": "transient",
}

_STATES = {
    "ordered": InstanceState.PENDING,
    "provisioning": InstanceState.PENDING,
    "restoring": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "starting_hibernation": InstanceState.STOPPING,
    "hibernating": InstanceState.STOPPED,
    "offline": InstanceState.STOPPED,
    "error": InstanceState.ERROR,
    "discontinued": InstanceState.TERMINATED,
}

_SCRIPT_KEY = re.compile(r"^# gpuprov-key: ([a-z0-9][a-z0-9-]*)$", re.M)


class VerdaCredentials(Credentials):
    client_id: str = field("Client ID", min_length=1, max_length=200,
                           help="Verda console → Keys → Cloud API credentials")
    client_secret: SecretStr = field("Client secret", "secret", min_length=1)


def instance_name(installation_id: str, key: str) -> str:
    """`gpuprov-<installation>-<key>`, at most NAME_MAX chars (providers/naming.py)."""
    return naming.owned_name(installation_id, key, NAME_MAX, what="a Verda hostname")


def startup_script(key: str, *, k3s: bool, user_data: str | None) -> str:
    """The instance's startup script: k3s at boot (when asked), then the caller's own script. The
    caller's text never becomes shell: it is base64 in a here-document, decoded to a file and run."""
    lines = ["#!/bin/sh", "# gpuprov startup script", f"# gpuprov-key: {key}"]
    if k3s:
        lines.append(cloudinit.K3S_AT_BOOT.split("\n", 1)[1].rstrip("\n"))  # its body, without "#!"
    if user_data:
        if not user_data.startswith("#!"):
            raise Unsupported("Verda runs a startup script at boot, not cloud-init: user data must be a "
                              "script starting with #!")
        encoded = "\n".join(textwrap.wrap(base64.b64encode(user_data.encode()).decode(), 76))
        lines += ['f=$(mktemp) && base64 -d > "$f" <<\'GPUPROV_USER_DATA\'', encoded, "GPUPROV_USER_DATA",
                  'chmod 700 "$f" && "$f"', 'rm -f "$f"']  # the decoded text is not left behind
    return "\n".join(lines) + "\n"


class VerdaAuth(httpx.Auth):
    """OAuth2 as the SDK does it: client credentials (JSON body) for an access + refresh token,
    the refresh-token grant once the access token expires (or a request is refused with 401), and
    client credentials again when the refresh token is refused too. Concurrent requests share one
    refresh. Token endpoint failures raise OAuth2Error, which the REST base maps (401 → AuthError)."""

    requires_response_body = True

    def __init__(self, token_url: str, client_id: Callable[[], str], client_secret: Callable[[], str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.token_url, self._id, self._secret, self._clock = token_url, client_id, client_secret, clock
        self._access: str | None = None
        self._refresh: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()
        self.grants: dict[str, int] = {"client_credentials": 0, "refresh_token": 0}

    def _grant(self, refresh: bool) -> httpx.Request:
        body = {"grant_type": "refresh_token", "refresh_token": self._refresh} if refresh else {
            "grant_type": "client_credentials", "client_id": self._id(), "client_secret": self._secret()}
        return httpx.Request("POST", self.token_url, json=body, headers={"Accept": "application/json"})

    def _store(self, response: httpx.Response, grant: str) -> None:
        try:
            body = response.json()
            access, expires_in = str(body["access_token"]), float(body.get("expires_in") or 3600)
            refresh = body.get("refresh_token")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise OAuth2Error(502, "token endpoint answered without an access_token") from None
        self._access = access
        self._refresh = str(refresh) if refresh else None
        self._expires_at = self._clock() + max(0.0, expires_in - min(REFRESH_MARGIN_S, expires_in / 10))
        self.grants[grant] += 1

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        for attempt in range(2):
            async with self._lock:
                if self._access is None or self._clock() >= self._expires_at:
                    self._access = None
                    if self._refresh is not None:
                        response = yield self._grant(refresh=True)
                        await response.aread()
                        if response.status_code == 200:
                            self._store(response, "refresh_token")
                        elif response.status_code in (400, 401):  # the refresh token expired too
                            self._refresh = None
                        else:
                            raise OAuth2Error(response.status_code, _token_error(response))
                    if self._access is None:
                        response = yield self._grant(refresh=False)
                        await response.aread()
                        if response.status_code != 200:
                            raise OAuth2Error(response.status_code, _token_error(response))
                        self._store(response, "client_credentials")
                token = self._access
            request.headers["Authorization"] = f"Bearer {token}"
            response = yield request
            if response.status_code != 401 or attempt == 1:
                return
            async with self._lock:  # expired or revoked early: refresh once, then give up
                if self._access == token:
                    self._expires_at = 0.0

    def sync_auth_flow(self, request: httpx.Request) -> Any:
        raise RuntimeError("VerdaAuth works with httpx.AsyncClient only")


def _token_error(response: httpx.Response) -> str:
    code, message = rest.error_fields(response)  # cleaned, bounded; other bodies only described
    return ": ".join(p for p in (code, message) if p) or f"token endpoint answered {response.status_code}"


class VerdaProvider(rest.RestCloudProvider):
    id: ClassVar[str] = "verda"
    credentials_model: ClassVar[type[VerdaCredentials]] = VerdaCredentials
    default_endpoint: ClassVar[str] = DEFAULT_ENDPOINT
    api_hosts: ClassVar[tuple[str, ...]] = ("api.verda.com", "api.datacrunch.io")  # the latter: pre-rename
    error_codes: ClassVar[Mapping[str, rest.ErrorKind]] = _CODES
    listing: ClassVar[Listing] = Listing(
        tagline="European capacity, spot pricing",
        how_to_connect=("In the Verda (DataCrunch) cloud dashboard open Keys → Cloud API credentials → "
                        "Create: copy the client ID and client secret."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Verda",
        k3s="cloud-init",  # at boot, through the instance's startup script
        k8s_api=False,  # no firewall API to open 6443: reached through an SSH tunnel
        ports=False,
        ports_reason="--port needs a firewall API; Verda has none",
        spot=True,
        custom_image=True,  # an image type, e.g. ubuntu-24.04-cuda-12.8-open-docker
        login_user="root",
        side_resources=[VOLUME, SCRIPT],
        regions=[*LOCATIONS, *COUNTRIES],  # a location, or a country: every location in it
        # No idempotency key: a create whose answer was lost may still land this long after it was
        # sent (the request timeout is 30 s; the margin covers a slow backend). [guess]
        create_in_flight_s=90.0,
        boot_timeout_s=1200.0,
        self_end=SelfEnd(
            method="none",
            how=("assumed [unconfirmed]: a shut-down instance keeps its GPU and its bill; only deleting "
                 "it through the API (account credentials) ends it; no vendor page found saying either"),
        ),
    )
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock: Callable[[], float] = time.monotonic  # tests move time for the token cache
        self._auth: VerdaAuth | None = None
        self._supported_os: dict[str, list[str]] = {}  # instance type -> image types it boots

    def auth(self) -> httpx.Auth:
        secrets = self.credentials.reveal()
        self._auth = VerdaAuth(f"{self.endpoint}/oauth2/token", lambda: str(secrets["client_id"]),
                               lambda: str(secrets["client_secret"]), clock=self.clock)
        return self._auth

    # ------------------------------------------------------------------ plumbing

    @property
    def _prefix(self) -> str:
        return f"gpuprov-{self.installation_id}-"

    def _name(self, key: str) -> str:
        return instance_name(self.installation_id, key)

    def _key_of(self, name: str, description: str = "") -> str:
        # The description holds the full key when the hostname had to be shortened.
        if description.startswith(self._prefix) and " " not in description:
            return description.removeprefix(self._prefix)
        return name.removeprefix(self._prefix)

    async def _list(self, path: str, **params: Any) -> list[dict[str, Any]]:
        body = self._json(await self._call("GET", path, params=params or None))
        if not isinstance(body, list):
            raise Transient(f"{self.id}: unexpected {path} listing")
        return [row for row in body if isinstance(row, dict)]

    async def _instances(self) -> list[dict[str, Any]]:
        """Instances that are not deleted (Verda's listing leaves discontinued ones out)."""
        return [i for i in await self._list("/instances") if i.get("status") != "discontinued"]

    async def _by_name(self, name: str) -> list[dict[str, Any]]:
        return [i for i in await self._instances() if i.get("hostname") == name]

    async def _instance(self, instance_id: str) -> dict[str, Any] | None:
        resp = await self._call("GET", f"/instances/{instance_id}", allow=(400, 404))
        if not resp.is_success:
            if resp.status_code == 404 or _gone(resp):
                return None
            raise rest.map_response_error(resp, provider=self.id, codes=_CODES)
        body = self._json(resp)
        if not isinstance(body, dict):
            raise Transient(f"{self.id}: unexpected instance answer")
        return body

    def _ref(self, inst: dict[str, Any], key: str | None = None) -> InstanceRef:
        name, desc = str(inst.get("hostname") or ""), str(inst.get("description") or "")
        return InstanceRef(provider=self.id, instance_id=str(inst["id"]), key=key or self._key_of(name, desc),
                           region=inst.get("location"), created_at=created_at(inst.get("created_at")))

    async def _ssh_key_ids(self, public_keys: list[str]) -> list[str]:
        """The shared SSH key object of each public key (one per installation and key), made once."""
        existing = await self._list("/sshkeys")
        ids = []
        for public_key in public_keys:
            line = public_key.strip()
            name = f"{self._prefix}ssh-{hashlib.sha256(line.encode()).hexdigest()[:12]}"
            found = next((k for k in existing
                          if k.get("name") == name and str(k.get("key", "")).strip() == line), None)
            if found is None:
                resp = await self._call("POST", "/sshkeys", json={"name": name, "key": line})
                found = {"id": resp.text.strip(), "name": name, "key": line}
                existing.append(found)
            ids.append(str(found["id"]))
        return ids

    async def _script_id(self, name: str, script: str) -> str:
        for s in await self._list("/scripts"):
            if s.get("name") == name and s.get("script") == script:
                return str(s["id"])
        resp = await self._call("POST", "/scripts", json={"name": name, "script": script})
        return resp.text.strip()

    async def _drop_scripts(self, key: str, *, unless_live: bool = True) -> None:
        """Delete the key's startup scripts (unless a live instance still carries its name: twins)."""
        names = {self._name(key), self._prefix + key}
        if unless_live and any(i.get("hostname") in names for i in await self._instances()):
            return
        for s in await self._list("/scripts"):
            if s.get("name") in names or _script_key(s) == key:
                await self._call("DELETE", f"/scripts/{s['id']}", allow=(404,))

    async def _image_for(self, instance_type: str) -> str:
        if instance_type not in self._supported_os:
            await self._types()
        supported = self._supported_os.get(instance_type) or []
        if not supported or DEFAULT_IMAGE in supported:
            return DEFAULT_IMAGE
        return next((i for i in supported if "cuda" in i), supported[0])

    async def _types(self) -> list[dict[str, Any]]:
        types = await self._list("/instance-types", currency="usd")
        with rest.parsing(self.id, "instance-types"):
            self._supported_os.update({str(t["instance_type"]): [str(o) for o in t.get("supported_os") or []]
                                       for t in types})
        return types

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        await self._call("GET", "/balance")  # the cheapest authenticated call
        return f"Verda API client {rest.clean(self.credentials.reveal()['client_id'], 60)}"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        region = query.region
        locations = COUNTRIES.get(region or "") or ([region] if region else None)
        if locations is not None and not set(locations) <= set(LOCATIONS):
            return []
        types = {str(t.get("instance_type")): t for t in await self._types()}
        out: list[Offer] = []
        for spot in (False, True):
            if query.spot is not None and query.spot != spot:
                continue
            params = {"isSpot": str(spot).lower()}
            if locations is not None and len(locations) == 1:
                params["location_code"] = locations[0]
            with rest.parsing(self.id, "instance-availability"):
                for row in await self._list("/instance-availability", **params):
                    location = str(row["location_code"])
                    if locations is not None and location not in locations:
                        continue
                    out += [offer for name in row.get("availabilities") or []
                            if name in types and (offer := self._offer(types[name], location, spot))]
        # The country (or location) filter is done: rank by everything else.
        return rank_offers(out, query.model_copy(update={"region": None}))

    def _offer(self, t: dict[str, Any], location: str, spot: bool) -> Offer | None:
        with rest.parsing(self.id, "instance-types"):
            price = float(t["spot_price"] if spot else t["price_per_hour"])
            if price <= 0:
                return None  # no spot market for it
            count = int((t.get("gpu") or {}).get("number_of_gpus") or 0)
            gpu = None
            if count > 0:
                name, _ = normalize_gpu(t.get("model") or (t.get("gpu") or {}).get("description"))
                total = float((t.get("gpu_memory") or {}).get("size_in_gigabytes") or 0)
                gpu = GpuSpec(name=name, count=count, memory_gib=total / count if total else None)
            return Offer(provider=self.id, instance_type=str(t["instance_type"]), gpu=gpu,
                         vcpus=int((t.get("cpu") or {}).get("number_of_cores") or 0),
                         memory_gib=float((t.get("memory") or {}).get("size_in_gigabytes") or 0),
                         region=location, price_per_hour=price, spot=spot, available=True)

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        if offer.region not in LOCATIONS:
            raise InvalidRequest(f"{self.id}: an offer names a location, not {offer.region!r}")
        script = startup_script(spec.key, k3s=spec.k3s, user_data=spec.user_data)
        name = self._name(spec.key)
        found = [] if spec.unsent else await self._by_name(name)
        if found:
            with rest.parsing(self.id, "instance"):
                return self._ref(found[0], key=spec.key)
        # The script goes first, always (even with nothing to run but its marker): every machine's
        # side resources then share one lifecycle, and a launch that never happened leaves it for
        # release(key) to find.
        body: dict[str, Any] = {
            "instance_type": offer.instance_type,
            "image": spec.image or await self._image_for(offer.instance_type),
            "ssh_key_ids": await self._ssh_key_ids(spec.ssh_public_keys),
            "startup_script_id": await self._script_id(name, script),
            "hostname": name,
            "description": self._prefix + spec.key,
            "location_code": offer.region,
            "os_volume": {"name": name, "size": OS_VOLUME_GB, "on_spot_discontinue": "delete_permanently"},
            "is_spot": offer.spot,
        }
        if offer.spot:
            body["contract"] = "SPOT"
        scope = FailureScope(provider=self.id, region=offer.region, instance_type=offer.instance_type)
        try:
            with launch_request():  # the send is recorded as it leaves (providers/base.py)
                resp = await self._call("POST", "/instances", json=body, scope=scope,
                                        allow=(400, 402, 403, 404))
            if not resp.is_success:
                raise self._create_error(resp, scope)
        except (CapacityError, QuotaError, InvalidRequest):
            # Definitely not launched: drop the script now rather than leave it for release().
            # (Transient/RateLimited may have launched; the retry reuses it.)
            await self._drop_scripts(spec.key)
            raise
        instance_id = resp.text.strip().strip('"')
        if not instance_id or len(instance_id) > 100 or not instance_id.isprintable():
            raise Transient(f"{self.id}: create answered without an instance id", in_doubt=True)
        return InstanceRef(provider=self.id, instance_id=instance_id, key=spec.key, region=offer.region)

    def _create_error(self, resp: httpx.Response, scope: FailureScope) -> Exception:
        code, message = rest.error_fields(resp)
        text = f"{self.id}: {code or resp.status_code}: {message}"
        if code == "insufficient_funds":  # the account's balance: nothing launches anywhere
            return QuotaError(text, FailureScope(provider=self.id))
        if any(word in message.lower() for word in CAPACITY_WORDS):
            return CapacityError(text, scope)
        return rest.map_response_error(resp, provider=self.id, scope=scope, codes=_CODES)

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        inst = await self._instance(ref.instance_id)
        if inst is None:
            return None
        with rest.parsing(self.id, "instance"):
            return self._status(inst, ref)

    def _status(self, inst: dict[str, Any], ref: InstanceRef) -> InstanceStatus:
        """One instance object, as GET /instances/{id} and GET /instances both return it."""
        status = str(inst.get("status"))
        return InstanceStatus(
            ref=ref, state=_STATES.get(status, InstanceState.ERROR),
            host=inst.get("ip") or None,
            ssh_port=22,  # Verda serves SSH on 22 at the instance's own address
            ssh_user=self.capabilities.login_user,
            instance_type=inst.get("instance_type"), detail=status,
        )

    async def terminate(self, ref: InstanceRef) -> None:
        deadline = self.clock() + PROVISIONING_WAIT_S
        delay = 0.1
        while True:
            inst = await self._instance(ref.instance_id)
            if inst is None or inst.get("status") == "discontinued":
                break
            if inst.get("status") not in PROVISIONING and await self._delete(ref, inst):
                break
            if self.clock() >= deadline:
                raise Transient(f"{self.id}: instance {ref.instance_id} is still provisioning; Verda deletes "
                                f"it only once it is up")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        await self._drop_scripts(ref.key)

    async def _delete(self, ref: InstanceRef, inst: dict[str, Any]) -> bool:
        """Delete the instance with its OS volume; False when Verda says it is still provisioning."""
        body: dict[str, Any] = {"action": "delete", "id": [ref.instance_id]}
        if inst.get("os_volume_id"):
            body.update(volume_ids=[str(inst["os_volume_id"])], delete_permanently=True)
        resp = await self._call("PUT", "/instances", json=body, allow=(400, 403, 404))
        if resp.is_success or resp.status_code == 404 or _gone(resp):
            return True
        if "provisioning" in rest.error_fields(resp)[1].lower():
            return False
        raise rest.map_response_error(resp, provider=self.id, codes=_CODES)

    def _ours(self, instances: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [i for i in instances if str(i.get("hostname") or "").startswith(self._prefix)]

    def listing_calls(self, machines: int) -> int:
        return 1  # not paged

    async def list_machines(self) -> list[InstanceStatus]:
        # GET /instances (not paged) answers the same instance objects as GET /instances/{id}; the
        # scripts and volumes list_owned also reads are not machines.
        instances = self._ours(await self._instances())
        with rest.parsing(self.id, "instances"):
            return [self._status(i, self._ref(i)) for i in instances]

    async def list_owned(self) -> list[InstanceRef]:
        instances = await self._instances()
        with rest.parsing(self.id, "instances"):
            refs = [self._ref(i) for i in self._ours(instances)]
            names = {str(i.get("hostname")) for i in instances}
            ids = {str(i.get("id")) for i in instances}
        # Side resources whose instance is gone (or never came): ours by name, listed for the sweep.
        with rest.parsing(self.id, "scripts"):
            refs += [InstanceRef(provider=self.id, instance_id=str(s["id"]), kind=SCRIPT,
                                 key=_script_key(s) or self._key_of(str(s["name"])))
                     for s in await self._list("/scripts")
                     if str(s.get("name") or "").startswith(self._prefix) and s.get("name") not in names]
        with rest.parsing(self.id, "volumes"):
            refs += [InstanceRef(provider=self.id, instance_id=str(v["id"]), kind=VOLUME,
                                 key=self._key_of(str(v["name"])), region=v.get("location"))
                     for v in await self._list("/volumes")
                     if str(v.get("name") or "").startswith(self._prefix)
                     and str(v.get("instance_id")) not in ids]
        return refs

    async def find(self, key: str) -> InstanceRef | None:
        found = await self.find_all(key)
        return found[0] if found else None

    async def find_all(self, key: str) -> list[InstanceRef]:
        # Hostnames are not unique: two creates that raced past the lookup made two.
        with rest.parsing(self.id, "instances"):
            return [self._ref(i, key=key) for i in await self._by_name(self._name(key))]

    async def release(self, key: str) -> None:
        # The script is made before the launch; the OS volume outlives an instance deleted without it
        # (by hand, or a spot instance discontinued with keep_detached).
        names = {self._name(key), self._prefix + key}
        await self._drop_scripts(key, unless_live=False)
        for v in await self._list("/volumes"):
            if v.get("name") in names and not v.get("instance_id"):
                await self._call("DELETE", f"/volumes/{v['id']}", json={"is_permanent": True}, allow=(404,))


def _gone(resp: httpx.Response) -> bool:
    return rest.error_fields(resp)[1].lower().rstrip(".") in GONE_MESSAGES


def _script_key(script: dict[str, Any]) -> str | None:
    m = _SCRIPT_KEY.search(str(script.get("script") or ""))
    return m.group(1) if m else None

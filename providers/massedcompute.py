"""Massed Compute (research/provider-facts.md B.2; PROVIDER-APIS.md "Massed Compute"). Bearer API
key, REST + JSON at `https://vm.massedcompute.com/api/v1`.

The model: a product (`gpu_1x_l40`) from the live GPU inventory is launched from an image (an
integer `imageId`, required: the default Ubuntu image when none is asked for) in a region, or
`"any"` where Massed picks; gpuprov sends the offer's region, so a capacity refusal names it.
The API reports an instance's `ip`, `username` and a cleartext `password`: SSH is port 22 at
`ip`, the user is the one the API names, and the password is dropped as soon as an answer is
read (never stored, logged or returned).

No idempotency key, no tags, no firewall API, no spot. The instance name carries everything:
`gpuprov-<installation>-<key>` is the ownership mark (prefix) and the idempotency key (create
lists instances and looks for it first). SSH keys are account objects referenced by name at
launch: the installation's key is registered once per installation (named from the installation
and the key's fingerprint, shared by every machine, so no per-machine side resource); further
keys are appended to the login user's authorized_keys by the startup `command`, each one a
re-serialised OpenSSH public key quoted with shlex. Error bodies, codes and statuses other than
"rented" are [unconfirmed]: the mapping below also reads capacity from a refusal's words.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import shlex
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from providers import account_objects, naming, rest, ssh_keys
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
    ProviderError,
    QuotaError,
    SelfEnd,
    Transient,
    launch_request,
    rank_offers,
)
from providers.cloudtime import created_at
from providers.credentials import ApiKeyCredentials
from providers.gpus import normalize_gpu
from providers.listing import Listing

DEFAULT_ENDPOINT = "https://vm.massedcompute.com/api/v1"
NAME_MAX = 64  # [unconfirmed]: no documented limit on instanceName; Lambda-like 64 is assumed
LOGIN_USER = "Ubuntu"  # what the API's `username` says (documented sample; the seed: Ubuntu@22)

# [unconfirmed] codes: the simulation's choice (fakeclouds/massedcompute_api.py). The status
# decides for any other code (rest.map_error), and capacity is also read from the message.
_CODES: dict[str, rest.ErrorKind] = {
    "unauthorized": "auth",
    "insufficient_capacity": "capacity",
    "instance_limit_reached": "quota",
    "billing_not_configured": "quota",  # the account cannot launch anything here: fail over
    "rate_limited": "rate_limit",
    "invalid_request": "invalid",
    "invalid_product": "invalid",
    "invalid_image": "invalid",
    "invalid_region": "invalid",
    "invalid_ssh_key": "invalid",
}
_CAPACITY_WORDS = re.compile(r"capacity|out of stock|sold out|no (?:gpus? |instances? )?available", re.I)
_GONE_CODES = {"not_found", "instance_not_found"}

# Status values: "rented" is documented; the rest are [unconfirmed] words a rental API uses.
_BOOTING = {"pending", "provisioning", "deploying", "creating", "starting", "booting", "installing"}
_UP = {"rented", "running", "active"}
_TERMINATING = {"terminating", "stopping", "deleting", "cancelling"}
_TERMINATED = {"terminated", "cancelled", "canceled", "deleted", "ended"}

_USER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
# Memory per GPU when a product's description does not say (the inventory has no GPU field).
_GPU_MEMORY_GIB = {"A5000": 24.0, "A6000": 48.0, "A40": 48.0, "L40": 48.0, "L40S": 48.0, "RTX6000ADA": 48.0,
                   "A100": 80.0, "H100": 80.0, "RTX4090": 24.0, "RTX3090": 24.0}
_COUNT_RE = re.compile(r"^gpu_(\d+)x_", re.I)
_ANY_ERROR = tuple(range(400, 600))


def instance_name(installation_id: str, key: str) -> str:
    """`gpuprov-<installation>-<key>`, at most NAME_MAX chars (providers/naming.py)."""
    return naming.owned_name(installation_id, key, NAME_MAX, what="a Massed Compute instance name")


def authorized_keys_command(public_keys: list[str], user: str) -> str | None:
    """A startup command that adds `public_keys` to `user`'s authorized_keys (once each), or None.
    Each key is re-serialised from its parsed form (providers/ssh_keys.py: one line, no control
    characters) and passed as one shlex-quoted word, so no key text can become shell syntax.
    Who runs the command (root at boot is assumed) is [unconfirmed]: the home is looked up for
    `user`, falling back to the runner's own $HOME."""
    if not public_keys:
        return None
    try:
        lines = [ssh_keys.public_key_line(k) for k in public_keys]
    except ssh_keys.KeyRefused as e:
        raise InvalidRequest(f"massedcompute: an SSH public key was refused: {e}") from None
    words = " ".join(shlex.quote(line) for line in lines)
    u = shlex.quote(user)
    return (f'h=$(getent passwd {u} | cut -d: -f6); h=${{h:-$HOME}}; umask 077; mkdir -p "$h/.ssh" && '
            f'for k in {words}; do grep -qxF "$k" "$h/.ssh/authorized_keys" 2>/dev/null '
            f'|| printf \'%s\\n\' "$k" >> "$h/.ssh/authorized_keys"; done; '
            f'chown -R {u} "$h/.ssh" 2>/dev/null || true')


def _scrub(inst: Any) -> dict[str, Any]:
    """An instance from an answer, without its cleartext password: dropped on arrival, so nothing
    later (a status, an exception, a log) can carry it."""
    if not isinstance(inst, dict):
        raise TypeError("instance is not an object")
    return {k: v for k, v in inst.items() if k != "password"}


def _ip(value: Any) -> str | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return None


def _state(inst: dict[str, Any]) -> tuple[InstanceState, str]:
    status = str(inst.get("status") or "").strip().lower()
    if status in _UP:
        # A rented VM is still booting until os_booted says so, and unreachable without an ip.
        booted = inst.get("os_booted") in (1, True, "1", "true")
        up = booted and _ip(inst.get("ip")) is not None
        return (InstanceState.RUNNING if up else InstanceState.PENDING), status
    if status in _BOOTING:
        return InstanceState.PENDING, status
    if status in _TERMINATING:
        return InstanceState.TERMINATING, status
    if status in _TERMINATED:
        return InstanceState.TERMINATED, status
    return InstanceState.ERROR, rest.clean(status, 40) or "unknown"


def _gpu(name: str, description: str) -> GpuSpec | None:
    count = _COUNT_RE.match(name)
    if count is None:
        return None  # not a GPU product
    model, memory = normalize_gpu(description, name)
    return GpuSpec(name=model, count=int(count.group(1)), memory_gib=memory or _GPU_MEMORY_GIB.get(model))


class MassedComputeProvider(naming.FoundByName, rest.RestCloudProvider):
    id: ClassVar[str] = "massedcompute"
    credentials_model: ClassVar[type[ApiKeyCredentials]] = ApiKeyCredentials
    default_endpoint: ClassVar[str] = DEFAULT_ENDPOINT
    api_hosts: ClassVar[tuple[str, ...]] = ("vm.massedcompute.com",)  # the OpenAPI `servers` entry
    error_codes: ClassVar[Mapping[str, rest.ErrorKind]] = _CODES
    listing: ClassVar[Listing] = Listing(
        tagline="Cheap 24–48 GB NVIDIA GPUs in the US",
        how_to_connect=("In the Massed Compute console (vm.massedcompute.com) open Account → API Keys, create"
                        " a key and paste it here."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Massed Compute",
        k3s="ssh",
        k8s_api=False,
        ports=False,
        ports_reason="Massed Compute has no firewall API",
        spot=False,
        custom_image=True,  # an image id or name from GET /images
        login_user=LOGIN_USER,
        side_resources=[],
        regions=[],  # whatever the inventory names (all in the US); "any" lets Massed choose
        default_regions=[],  # anywhere
        # No idempotency token: a launch whose answer was lost may still land this long after it
        # was sent (the request timeout is 30 s; the margin covers a slow backend). [guess]
        create_in_flight_s=90.0,
        boot_timeout_s=1800.0,  # desktop images take minutes to boot; 30 min is a broken boot [guess]
        self_end=SelfEnd(
            method="none",
            how=("assumed [unconfirmed]: a guest shutdown keeps the VM billed and there is no VM-scoped "
                 "key; the docs say only active VMs bill per minute, and deleting via the API ends it"),
            source="https://vm-docs.massedcompute.com/docs/billing/overview",
        ),
    )

    # ------------------------------------------------------------------ plumbing

    async def _get(self, path: str, what: str, **kwargs: Any) -> dict[str, Any]:
        body = rest.json_body(await self._call("GET", path, **kwargs), provider=self.id)
        if not isinstance(body, dict):
            raise Transient(f"{self.id}: unexpected {what} response")
        return body

    def _name(self, key: str) -> str:
        return instance_name(self.installation_id, key)

    def _ref(self, inst: dict[str, Any], key: str | None = None) -> InstanceRef:
        name = str(inst.get("name") or "")
        region = inst.get("region_name")  # [unconfirmed] field; None when absent
        return InstanceRef(provider=self.id, instance_id=str(inst["uuid"]),
                           key=key or name.removeprefix(self._prefix),
                           region=region if isinstance(region, str) and region else None,
                           # `created` (MC-MCP's listing shape); its format is [unconfirmed]: ISO or epoch
                           created_at=created_at(inst.get("created")))

    async def _instances(self) -> list[dict[str, Any]]:
        body = await self._get("/instance", "instance listing")
        with rest.parsing(self.id, "instance listing"):
            listed = body["runningInstances"]
            if not isinstance(listed, list):
                raise TypeError("runningInstances is not a list")
            instances = [_scrub(i) for i in listed]
        return [i for i in instances if _state(i)[0] != InstanceState.TERMINATED]

    _machines = _instances  # what naming.FoundByName lists and matches names in

    # ------------------------------------------------------------------ SSH keys and images

    async def _key_objects(self) -> list[dict[str, Any]]:
        body = rest.json_body(await self._call("GET", "/ssh-keys"), provider=self.id)
        # [unconfirmed] shape: a bare list, or wrapped like the instance listings.
        keys = body.get("sshKeys", body.get("ssh_keys")) if isinstance(body, dict) else body
        if not isinstance(keys, list):
            raise Transient(f"{self.id}: unexpected ssh-keys response")
        return [k for k in keys if isinstance(k, dict)]

    async def _ensure_key_object(self, public_key: str) -> str:
        """The name of an account SSH key object holding `public_key`, registered once per
        installation (providers/account_objects.py)."""
        async def held() -> list[tuple[str, str]]:
            return [(o["name"], public) for o in await self._key_objects()
                    if isinstance(o.get("name"), str)
                    and isinstance(public := o.get("publicKey", o.get("public_key")), str)]

        async def register(name: str, line: str) -> None:
            await self._call("POST", "/ssh-keys", json={"name": name, "publicKey": line})

        return await account_objects.ensure_key_object(
            held, register, provider=self.id, installation_id=self.installation_id, public_key=public_key,
            max_length=NAME_MAX)

    async def _image_id(self, wanted: str | None) -> int:
        """The integer imageId launch requires: `wanted` as an id or a name (case-insensitive),
        else the default Ubuntu image (22.04 and a "base" image preferred, then the lowest id)."""
        body = await self._get("/images", "images")
        with rest.parsing(self.id, "images"):
            images = [(int(i["id"]), str(i.get("name") or "")) for i in body["images"] if isinstance(i, dict)]
        if wanted:
            w = wanted.strip()
            for image_id, name in images:
                if (w.isdigit() and int(w) == image_id) or name.casefold() == w.casefold():
                    return image_id
            raise InvalidRequest(f"{self.id}: no image {rest.clean(w, 80)!r} "
                                 "(GET /images lists the ids and names)")
        ubuntu = [(("22.04" not in n), ("base" not in n.lower()), i)
                  for i, n in images if "ubuntu" in n.lower()]
        if not ubuntu:
            raise InvalidRequest(f"{self.id}: no Ubuntu image to boot; name one with --image")
        return min(ubuntu)[2]

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        await self._call("POST", "/account/token/validation")
        # The identity is a fingerprint of the key, never the key itself.
        digest = hashlib.sha256(str(self.credentials.reveal()["api_key"]).encode()).hexdigest()[:12]
        return f"Massed Compute API key {digest}"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        if query.spot is True:
            return []  # Massed sells no spot instances
        body = await self._get("/gpu-inventory", "gpu-inventory")
        with rest.parsing(self.id, "gpu-inventory"):
            out = [o for entry in body["gpu_inventory"].values() for o in self._offers_of(entry)]
        return rank_offers(out, query)

    def _offers_of(self, entry: dict[str, Any]) -> list[Offer]:
        it = entry["instance_type"]
        specs = it.get("specs") or {}
        if int(entry.get("capacity_available") or 0) <= 0:
            return []
        name = str(it["name"])
        gpu = _gpu(name, str(it.get("description") or ""))
        return [
            Offer(provider=self.id, instance_type=name, gpu=gpu, vcpus=int(specs.get("vcpu_count") or 0),
                  memory_gib=float(specs.get("memory_gib") or 0), region=str(r["name"]),
                  price_per_hour=int(it["price_cents_per_hour"]) / 100, spot=False, available=True)
            for r in entry.get("regions_with_capacity_available") or []
        ]

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        if spec.user_data:
            raise InvalidRequest(f"{self.id}: Massed Compute takes a startup command, "
                                 "not cloud-init user data")
        name = self._name(spec.key)
        found = [] if spec.unsent else await self._by_name(name)
        if found:
            with rest.parsing(self.id, "instance"):
                return self._ref(found[0], key=spec.key)
        image_id = await self._image_id(spec.image)
        key_name = await self._ensure_key_object(spec.ssh_public_keys[0])
        body: dict[str, Any] = {"imageId": image_id, "productName": offer.instance_type,
                                "regionName": offer.region, "instanceName": name, "sshKeys": [key_name]}
        command = authorized_keys_command(spec.ssh_public_keys[1:], LOGIN_USER)
        if command:
            body["command"] = command
        scope = FailureScope(provider=self.id, region=offer.region, instance_type=offer.instance_type)
        answer = await self._launch(body, scope)
        uuid = self._launched_uuid(answer)
        if uuid is None:  # [unconfirmed] answer shape: fall back on the unique name
            again = await self._by_name(name)
            if not again:
                raise Transient(f"{self.id}: launch answered without an instance, and none is listed yet",
                                in_doubt=True)
            with rest.parsing(self.id, "instance"):
                return self._ref(again[0], key=spec.key)
        return InstanceRef(provider=self.id, instance_id=uuid, key=spec.key, region=offer.region)

    async def _launch(self, body: dict[str, Any], scope: FailureScope) -> Any:
        # Every refusal comes back as a response: its words are read too (see _launch_error).
        with launch_request():  # the send is recorded as it leaves (providers/base.py)
            resp = await self._call("POST", "/instance/launch", json=body, allow=_ANY_ERROR)
        if resp.is_success:
            return rest.json_body(resp, provider=self.id)
        raise self._launch_error(resp, scope)

    def _launch_error(self, resp: httpx.Response, scope: FailureScope) -> ProviderError:
        code, message = rest.error_fields(resp)
        err = rest.map_error(provider=self.id, code=code, message=message, status=resp.status_code,
                             scope=scope, codes=_CODES, retry_after=resp.headers.get("Retry-After"))
        if isinstance(err, QuotaError):
            # An account limit or unconfigured billing: nothing launches on this account, anywhere.
            return QuotaError(err.message, FailureScope(provider=self.id))
        if code not in _CODES and resp.status_code < 500 and _CAPACITY_WORDS.search(message):
            return CapacityError(err.message, scope)  # an unknown code whose words say "no capacity"
        return err

    @staticmethod
    def _launched_uuid(answer: Any) -> str | None:
        if not isinstance(answer, dict):
            return None
        for holder in (answer, answer.get("instance"), answer.get("runningInstance")):
            if isinstance(holder, dict):
                for field in ("instanceUuid", "uuid"):
                    if isinstance(holder.get(field), str) and holder[field]:
                        return str(holder[field])
        uuids = answer.get("instanceUuids")
        if isinstance(uuids, list) and len(uuids) == 1 and isinstance(uuids[0], str):
            return uuids[0]
        return None

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        resp = await self._call("GET", f"/instance/{quote(ref.instance_id, safe='')}", allow=(404,))
        if resp.status_code == 404:
            return None
        body = rest.json_body(resp, provider=self.id)
        with rest.parsing(self.id, "instance"):
            return self._status(ref, _scrub(body["runningInstance"]))

    def _status(self, ref: InstanceRef, inst: dict[str, Any]) -> InstanceStatus:
        """One (scrubbed) instance, as GET /instance/{uuid} and the GET /instance listing give it."""
        state, detail = _state(inst)
        user = inst.get("username")
        product = inst.get("product_name")  # [unconfirmed] field
        return InstanceStatus(
            ref=ref, state=state,
            host=_ip(inst.get("ip")) if state == InstanceState.RUNNING else None,
            ssh_port=22,  # the API reports only the ip: SSH is on 22 there
            ssh_user=user if isinstance(user, str) and _USER_RE.fullmatch(user) else LOGIN_USER,
            instance_type=product if isinstance(product, str) and product else None,
            detail=detail,
        )

    async def terminate(self, ref: InstanceRef) -> None:
        resp = await self._call("POST", "/instance/terminate", json={"instanceUuids": [ref.instance_id]},
                                allow=(400, 404))
        if resp.is_success or resp.status_code == 404:
            return  # already gone is success
        if rest.error_code(resp) not in _GONE_CODES:
            raise rest.map_response_error(resp, provider=self.id, codes=_CODES)


"""Microsoft Azure on its official SDKs: azure-identity (ClientSecretCredential), azure-mgmt-compute,
azure-mgmt-network and azure-mgmt-resource, all blocking, so every call runs on SdkCloudProvider's
thread pool. The SDKs are imported on first use.

Layout in the subscription: one resource group per installation and region
(`gpuprov-<installation>-<region>`, made by `prepare`) holding a shared virtual network; per machine a
network security group (SSH + the requested ports), a Standard static public IP and a NIC, then the VM.
Everything carries the tags `gpuprov-installation`, `gpuprov-key`, `gpuprov-allocation`.

Idempotency: the VM's name is derived from our key and ARM's PUT converges — a retried create
finds the VM (or PUTs the same parameters again) and never makes a second one. Create waits for the
long-running operation's verdict (bounded): `(Zonal)AllocationFailed` arrives there, after the VM
resource exists as `Failed`; the adapter deletes that VM and raises CapacityError for the zone.
`SkuNotAvailable` (409) and `OperationNotAllowed` (409, quota) come back at once. A create refused
for good drops the network it made (the workflow moves on without a terminate for that key). The
instance id is the VM's `vmId`: a later VM under the same name is another machine, never this ref's.

Terminate deletes the VM, waits for it to go (bounded), then the NIC, public IP and NSG in that
order (Azure refuses to delete an NSG or an IP still attached). Called again, it converges.

Pointing it elsewhere: ConnectionOptions.endpoint names ARM. One of Azure's ARM hosts (`api_hosts`:
public, US Government, China) keeps that cloud's Entra authority; any other endpoint E (a proxy, the
simulation) serves both halves: the authority E/login (instance discovery off, as for any private
authority) and ARM at E/arm. `ca_bundle` is trusted besides the default CAs. SDK retries are off
(`retry_total=0`): Temporal owns retries; long-running operations poll per Retry-After, else with a
short backoff.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import threading
from datetime import datetime
from typing import Any, ClassVar

from pydantic import SecretStr

from providers import cloudinit
from providers.azure_prices import SIZES
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
    Transient,
    rank_offers,
)
from providers.cloudtime import created_at
from providers.credentials import Credentials, field
from providers.listing import Listing
from providers.rest import ErrorKind
from providers.sdk import SdkCloudProvider, SdkError

DEFAULT_ARM_HOST = "management.azure.com"
# Azure's clouds: ARM host -> its Microsoft Entra authority (public, US Government, China).
AUTHORITIES = {
    "management.azure.com": "login.microsoftonline.com",
    "management.usgovcloudapi.net": "login.microsoftonline.us",
    "management.chinacloudapi.cn": "login.chinacloudapi.cn",
}
SUBSCRIPTION_API_VERSION = "2022-12-01"
DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"  # Ubuntu 22.04 with NVIDIA drivers and CUDA
TAG_INSTALLATION, TAG_KEY, TAG_ALLOCATION = "gpuprov-installation", "gpuprov-key", "gpuprov-allocation"
VM_NAME_MAX = 64
MAX_CUSTOM_DATA = 65535
VNET, SUBNET, ADDRESS_SPACE = "gpuprov-vnet", "default", "10.64.0.0/16"
NSG_FIRST_PRIORITY = 1000
# The SDK's poller sleeps what Retry-After says; without one (or 0) ours backs off from the first
# delay to the last (the SDK's own default is a flat 30 s: a create would answer half a minute late).
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.1, 5.0

_GUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"

# Azure regions with GPU sizes this adapter prices (providers/azure_prices.py sells by size).
REGIONS = [
    "eastus",
    "eastus2",
    "southcentralus",
    "westus2",
    "westus3",
    "northcentralus",
    "centralus",
    "westeurope",
    "northeurope",
    "swedencentral",
    "uksouth",
    "francecentral",
    "germanywestcentral",
    "switzerlandnorth",
    "japaneast",
    "koreacentral",
    "southeastasia",
    "centralindia",
    "australiaeast",
    "canadacentral",
]

_CODES: dict[str, ErrorKind] = {
    "AllocationFailed": "capacity",
    "ZonalAllocationFailed": "capacity",
    "OverconstrainedAllocationRequest": "capacity",
    "OverconstrainedZonalAllocationRequest": "capacity",
    "SkuNotAvailable": "capacity",
    "OperationNotAllowed": "quota",  # refined in _map: only a quota message is quota
    "QuotaExceeded": "quota",
    "TooManyRequests": "rate_limit",
    "SubscriptionRequestsThrottled": "rate_limit",
    "InvalidAuthenticationToken": "auth",
    "ExpiredAuthenticationToken": "auth",
    "AuthenticationFailed": "auth",
    "AuthorizationFailed": "auth",
    "SubscriptionNotFound": "auth",
    "InvalidSubscriptionId": "auth",
    "InternalServerError": "transient",
    "InternalExecutionError": "transient",
    "ServiceUnavailable": "transient",
    "GatewayTimeout": "transient",
    "BadGateway": "transient",
    "RetryableError": "transient",
    "RetryableErrorDueToAnotherOperation": "transient",
    # Deletes racing the machine's own deletion: retrying after it is gone succeeds.
    "NicInUse": "transient",
    "PublicIPAddressCannotBeDeleted": "transient",
    "InUseNetworkSecurityGroupCannotBeDeleted": "transient",
    "Conflict": "transient",
    "ResourceGroupNotFound": "transient",  # deleted behind our back: prepare() makes it again
}



class AzureCredentials(Credentials):
    """A service principal (app registration) with a client secret, and the subscription to use."""

    tenant_id: str = field(
        "Tenant ID",
        min_length=1,
        max_length=256,
        pattern=r"^([0-9a-fA-F-]{36}|[A-Za-z0-9][A-Za-z0-9.-]{0,253})$",
        help="Directory (tenant) ID: a GUID, or the tenant's domain",
    )
    subscription_id: str = field("Subscription ID", pattern=_GUID, max_length=36)
    client_id: str = field("Client ID (Application ID)", pattern=_GUID, max_length=36)
    client_secret: SecretStr = field("Client Secret", "secret", min_length=1, max_length=1024)


def vm_name(installation_id: str, key: str) -> str:
    """`gpuprov-<installation>-<key>`, at most 64 characters (Linux VM names); a longer one is
    shortened deterministically (head + hash), so a key always yields the same name."""
    name = f"gpuprov-{installation_id}-{key}"
    if len(name) <= VM_NAME_MAX and not name.endswith("-"):
        return name
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    head = name[: VM_NAME_MAX - 9].rstrip("-")
    return f"{head}-{digest}"


def group_name(installation_id: str, region: str) -> str:
    return f"gpuprov-{installation_id}-{region}"


def parse_image(urn: str) -> dict[str, str]:
    """An image URN `publisher:offer:sku:version` as an imageReference."""
    parts = urn.split(":")
    if len(parts) != 4 or not all(parts):
        raise InvalidRequest(
            "azure: --image takes an image URN publisher:offer:sku:version "
            "(e.g. Canonical:ubuntu-24_04-lts:server:latest)"
        )
    return dict(zip(("publisher", "offer", "sku", "version"), parts, strict=True))


def custom_data(user_data: str | None, *, k3s: bool) -> str:
    """Base64 cloud-init for osProfile.customData: k3s at boot (when asked), then the caller's own
    user data (MIME multipart, so cloud-init runs both)."""
    text = cloudinit.boot_user_data(user_data, k3s=k3s) or ""
    raw = text.encode()
    if len(raw) > MAX_CUSTOM_DATA:
        raise InvalidRequest(f"azure: user data is {len(raw)} bytes; Azure takes at most {MAX_CUSTOM_DATA}")
    return base64.b64encode(raw).decode()


def _caps(sku: dict[str, Any]) -> dict[str, str]:
    return {str(c.get("name")): str(c.get("value")) for c in sku.get("capabilities") or []}


def _number(value: str | None) -> float:
    try:
        return float(value or 0)
    except ValueError:
        return 0.0


@functools.cache
def _backoff_polling() -> type:
    """ARMPolling that honours Retry-After and otherwise backs off 0.1, 0.2, 0.4 ... 5 s."""
    from azure.core.pipeline.policies._utils import get_retry_after
    from azure.mgmt.core.polling.arm_polling import ARMPolling

    class BackoffPolling(ARMPolling):  # type: ignore[misc]
        _next = BACKOFF_FIRST_S

        def _extract_delay(self) -> float:
            given = get_retry_after(self._pipeline_response)
            if given:
                return float(given)
            delay, self._next = self._next, min(self._next * 2, BACKOFF_MAX_S)
            return delay

    return BackoffPolling


def _polling() -> Any:
    """A fresh poller strategy for one long-running operation."""
    return _backoff_polling()(BACKOFF_MAX_S)


def _time_created(vm: dict[str, Any]) -> datetime | None:
    """The VM's `properties.timeCreated` (ISO 8601, compute API 2021-11-01 and later)."""
    return created_at((vm.get("properties") or {}).get("timeCreated"))


class _Clients:
    """The SDK clients of one connection (thread-safe; made once, on a pool thread)."""

    def __init__(self, credential: Any, compute: Any, network: Any, resource: Any) -> None:
        self.credential, self.compute, self.network, self.resource = credential, compute, network, resource


class AzureProvider(SdkCloudProvider):
    id: ClassVar[str] = "azure"
    credentials_model: ClassVar[type[AzureCredentials]] = AzureCredentials
    error_codes: ClassVar[dict[str, ErrorKind]] = _CODES
    # A connection's endpoint names the ARM host (the Entra authority follows from it).
    api_hosts: ClassVar[tuple[str, ...]] = tuple(AUTHORITIES)
    listing: ClassVar[Listing] = Listing(
        tagline="Enterprise-grade GPU VMs",
        connect_name="Azure",
        how_to_connect=("Create an app registration: Microsoft Entra ID → App registrations → New "
                        "registration; its Overview shows the Application (client) ID and the Directory "
                        "(tenant) ID. Under Certificates & secrets add a client secret and copy its Value. In"
                        " Subscriptions → (yours) → Access control (IAM) give the app the Contributor role; "
                        "the subscription's Overview shows its Subscription ID."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Microsoft Azure",
        k3s="cloud-init",
        k8s_api=True,
        ports=True,
        spot=True,
        custom_image=True,
        login_user="ubuntu",
        side_resources=["nsg", "nic", "public-ip"],
        regions=REGIONS,
        region_required=True,
        boot_timeout_s=1200.0,
    )
    # How long create waits for the create operation's verdict, and terminate for the VM to go,
    # before returning (the next call, or get(), carries on). Real VMs take minutes.
    create_wait_s: ClassVar[float] = 90.0
    terminate_wait_s: ClassVar[float] = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._clients: _Clients | None = None
        self._prepared: set[str] = set()

    # ------------------------------------------------------------------ plumbing

    @property
    def _creds(self) -> dict[str, Any]:
        return self.credentials.reveal()

    @property
    def _endpoint(self) -> str | None:
        return self.options.endpoint.rstrip("/") if self.options.endpoint else None

    def _arm_host(self) -> str:
        from urllib.parse import urlsplit

        return (urlsplit(self._endpoint).hostname or "").lower() if self._endpoint else DEFAULT_ARM_HOST

    def _arm_base(self) -> str:
        """The endpoint itself when it is one of Azure's ARM hosts, else `<endpoint>/arm` (a proxy or
        a simulation serving both halves under one base)."""
        if self._endpoint is None:
            return f"https://{DEFAULT_ARM_HOST}"
        return self._endpoint if self._arm_host() in AUTHORITIES else f"{self._endpoint}/arm"

    def _authority(self) -> dict[str, Any]:
        """azure-identity's authority for the endpoint: Azure's own for its ARM hosts, else
        `<endpoint>/login` without instance discovery (which only knows Microsoft's hosts)."""
        if self._arm_host() in AUTHORITIES:
            return {"authority": AUTHORITIES[self._arm_host()]}
        return {"authority": f"{self._endpoint}/login", "disable_instance_discovery": True}

    def _client_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"retry_total": 0, "connection_timeout": 10, "read_timeout": 60}
        ca_file = self.ca_bundle_file()
        if ca_file:
            kwargs["connection_verify"] = ca_file
        return kwargs

    def _sdk_clients(self) -> _Clients:
        """Made on first use, on a pool thread (importing the SDKs takes a while)."""
        with self._lock:
            if self._clients is not None:
                return self._clients
            from azure.identity import ClientSecretCredential
            from azure.mgmt.compute import ComputeManagementClient
            from azure.mgmt.network import NetworkManagementClient
            from azure.mgmt.resource.resources import ResourceManagementClient

            creds = self._creds
            cred_kwargs: dict[str, Any] = {"retry_total": 0}
            client_kwargs = self._client_kwargs()
            if "connection_verify" in client_kwargs:  # the token endpoint trusts what ARM's clients do
                cred_kwargs["connection_verify"] = client_kwargs["connection_verify"]
            cred_kwargs.update(self._authority())
            client_kwargs["base_url"] = self._arm_base()
            if self._arm_host() in AUTHORITIES:
                client_kwargs["credential_scopes"] = [f"https://{self._arm_host()}/.default"]
            credential = ClientSecretCredential(
                creds["tenant_id"], creds["client_id"], creds["client_secret"], **cred_kwargs
            )
            sub = creds["subscription_id"]
            self._clients = _Clients(
                credential,
                ComputeManagementClient(credential, sub, **client_kwargs),
                NetworkManagementClient(credential, sub, **client_kwargs),
                ResourceManagementClient(credential, sub, **client_kwargs),
            )
            return self._clients

    async def _c(self) -> _Clients:
        return await self._sdk(self._sdk_clients)

    def sdk_error(self, exc: Exception) -> SdkError | None:
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

        if isinstance(exc, ClientAuthenticationError) and exc.response is None:
            # azure-identity wraps everything that goes wrong getting a token in this one class: Entra's
            # refusals (their words carry an AADSTS code; an unknown tenant fails the discovery), but
            # also a refused connection or a 5xx — those are worth retrying, not an auth failure.
            text = str(exc.message or exc)
            if "AADSTS" in text or "Unable to get authority configuration" in text:
                return SdkError("AuthenticationFailed", text[:500], 401)
            return None
        if isinstance(exc, HttpResponseError) and exc.response is not None:
            error = getattr(exc, "error", None)
            code = str(getattr(error, "code", "") or "")
            message = str(getattr(error, "message", "") or exc.reason or "")
            return SdkError(
                code, message[:500], int(exc.status_code or 0),
                getattr(exc.response, "headers", {}).get("Retry-After"),
            )
        return None

    def _map(self, exc: Exception, scope: FailureScope | str | None) -> ProviderError:
        err = self.sdk_error(exc)
        if err is not None and err.code == "OperationNotAllowed" and "quota" not in err.message.lower():
            # "...not allowed since the VM is marked for deletion" and the like: a passing state
            return Transient(f"{self.id}: {err.code}: {err.message}")
        return super()._map(exc, scope)

    def _group(self, region: str) -> str:
        return group_name(self.installation_id, region)

    def _name(self, key: str) -> str:
        return vm_name(self.installation_id, key)

    def _tags(self, spec_key: str, allocation: str | None = None) -> dict[str, str]:
        tags = {TAG_INSTALLATION: self.installation_id, TAG_KEY: spec_key}
        if allocation:
            tags[TAG_ALLOCATION] = allocation
        return tags

    def _is_404(self, exc: Exception) -> bool:
        return getattr(exc, "status_code", None) == 404

    async def _get_or_none(self, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        """`fn(...)`'s answer as wire JSON, or None when the resource (or its group) does not exist."""

        def call() -> dict[str, Any] | None:
            from azure.core.exceptions import ResourceNotFoundError

            try:
                return dict(fn(*args, **kwargs).as_dict())
            except ResourceNotFoundError:
                return None

        return await self._sdk(call)

    async def _wait(self, poller: Any, within: float) -> bool:
        """Whether the SDK's poller (polling on its own thread) reached its end within `within` seconds."""
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        poller.add_done_callback(lambda _: loop.call_soon_threadsafe(done.set))
        try:
            await asyncio.wait_for(done.wait(), within)
        except TimeoutError:
            return False
        return True

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        from azure.core.rest import HttpRequest

        c = await self._c()
        sub = self._creds["subscription_id"]

        def get() -> dict[str, Any]:
            resp = c.resource.send_request(
                HttpRequest("GET", f"/subscriptions/{sub}?api-version={SUBSCRIPTION_API_VERSION}")
            )
            resp.raise_for_status()
            return dict(resp.json())

        body = await self._sdk(get)
        if body.get("state") == "Disabled":
            raise AuthError(f"{self.id}: subscription {sub} is disabled")
        return f"Azure subscription {body.get('displayName') or sub} ({sub})"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        c = await self._c()
        flt = f"location eq '{query.region}'" if query.region else None

        def skus() -> list[dict[str, Any]]:
            return [s.as_dict() for s in c.compute.resource_skus.list(filter=flt)]

        out: list[Offer] = []
        for sku in await self._sdk(skus):
            out += self._offers_of(sku)
        return rank_offers(out, query)

    def _offers_of(self, sku: dict[str, Any]) -> list[Offer]:
        if sku.get("resourceType") != "virtualMachines":
            return []
        name = str(sku.get("name") or "")
        info = SIZES.get(name)
        caps = _caps(sku)
        gpus = int(_number(caps.get("GPUs")))
        if info is None or gpus < 1:
            return []  # not a GPU size, or not in the price table (no price: no offer)
        restrictions = sku.get("restrictions") or []
        out = []
        for loc in sku.get("locationInfo") or []:
            location = str(loc.get("location") or "").lower()
            if location not in REGIONS:
                continue
            blocked_zones: set[str] = set()
            blocked = False
            for r in restrictions:
                info_r = r.get("restrictionInfo") or {}
                if location not in [str(x).lower() for x in info_r.get("locations") or r.get("values") or []]:
                    continue
                if r.get("type") == "Location":
                    blocked = True
                else:
                    blocked_zones |= {str(z) for z in info_r.get("zones") or []}
            if blocked:
                continue
            zones = sorted(str(z) for z in loc.get("zones") or [])
            places: list[str | None] = [z for z in zones if z not in blocked_zones] if zones else [None]
            markets = [(False, info.on_demand)]
            if caps.get("LowPriorityCapable") == "True" and info.spot is not None:
                markets.append((True, info.spot))
            for zone in places:
                for spot, price in markets:
                    out.append(
                        Offer(
                            provider=self.id,
                            instance_type=name,
                            gpu=GpuSpec(name=info.gpu, count=gpus, memory_gib=info.gpu_memory_gib),
                            vcpus=int(_number(caps.get("vCPUs"))),
                            memory_gib=_number(caps.get("MemoryGB")),
                            region=location,
                            zone=zone,
                            price_per_hour=price,
                            spot=spot,
                        )
                    )
        return out

    async def prepare(self, region: str) -> None:
        """The installation's resource group in `region` and its virtual network (idempotent PUTs)."""
        if region in self._prepared:
            return
        c = await self._c()
        group = self._group(region)
        tags = {TAG_INSTALLATION: self.installation_id}
        await self._sdk(
            c.resource.resource_groups.create_or_update, group, {"location": region, "tags": tags}
        )
        vnet = {
            "location": region,
            "tags": tags,
            "properties": {
                "addressSpace": {"addressPrefixes": [ADDRESS_SPACE]},
                "subnets": [{"name": SUBNET, "properties": {"addressPrefix": ADDRESS_SPACE}}],
            },
        }
        poller = await self._sdk(
            c.network.virtual_networks.begin_create_or_update, group, VNET, vnet, polling=_polling()
        )
        await self._sdk(poller.result)
        self._prepared.add(region)

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        image = parse_image(spec.image or DEFAULT_IMAGE)
        data = custom_data(spec.user_data, k3s=spec.k3s)
        await self.prepare(offer.region)
        c = await self._c()
        group, name = self._group(offer.region), self._name(spec.key)
        scope = FailureScope(
            provider=self.id, region=offer.region, zone=offer.zone, instance_type=offer.instance_type
        )

        try:
            found = await self._get_or_none(c.compute.virtual_machines.get, group, name)
            if found is not None:
                return await self._adopt(found, offer, spec, scope)
            return await self._launch(c, group, name, offer, spec, image, data, scope)
        except (CapacityError, QuotaError, InvalidRequest):
            # Definitely no machine (a Failed VM was deleted first): the workflow moves on to the next
            # offer without a terminate for this key, so its network goes now. What a delete cannot
            # remove yet (the VM still going) stays listed by list_owned for the sweep.
            await self._drop_network_quietly(c, group, name)
            raise
        except Transient as e:
            if "ResourceGroupNotFound" in e.message:
                self._prepared.discard(offer.region)
            raise

    async def _launch(self, c: _Clients, group: str, name: str, offer: Offer, spec: LaunchSpec,
                      image: dict[str, str], data: str, scope: FailureScope) -> InstanceRef:
        nic_id = await self._ensure_network(c, group, name, offer.region, spec)
        vm = self._vm_body(offer, spec, image, data, nic_id)
        try:
            poller = await self._sdk(
                c.compute.virtual_machines.begin_create_or_update,
                group,
                name,
                vm,
                polling=_polling(),
                scope=scope,
            )
        except QuotaError as e:  # a family's cores in the region, whatever the size or zone
            raise QuotaError(e.message, FailureScope(provider=self.id, region=offer.region)) from None
        if not await self._wait(poller, self.create_wait_s):
            # No verdict yet: the VM exists (Creating); get() reports it, a retried create adopts it.
            made = await self._get_or_none(c.compute.virtual_machines.get, group, name)
            if made is None:
                raise Transient(f"{self.id}: VM {name} accepted but not found", in_doubt=True)
            return self._ref(made, spec.key, offer.region)
        try:
            result = await self._sdk(poller.result, scope=scope)
        except CapacityError:  # (Zonal)AllocationFailed: the VM stays behind as Failed
            await self._drop_failed(c, group, name)
            raise
        return self._ref(result.as_dict(), spec.key, offer.region)

    async def _adopt(
        self, vm: dict[str, Any], offer: Offer, spec: LaunchSpec, scope: FailureScope
    ) -> InstanceRef:
        """The VM a create under this key already made. One whose allocation failed is deleted and
        reported as the capacity failure it was."""
        props = vm.get("properties") or {}
        if props.get("provisioningState") == "Failed":
            c = await self._c()
            view = await self._get_or_none(
                c.compute.virtual_machines.instance_view, self._group(offer.region), self._name(spec.key)
            )
            code, message = _failure(view)
            await self._drop_failed(c, self._group(offer.region), self._name(spec.key))
            if self.error_codes.get(code) == "capacity":
                raise CapacityError(f"{self.id}: {code}: {message}", scope)
            raise Transient(f"{self.id}: VM failed ({code or 'unknown'}): {message}; deleted, retry")
        return self._ref(vm, spec.key, offer.region)

    async def _drop_network_quietly(self, c: _Clients, group: str, name: str) -> None:
        try:
            await self._delete_side_resources(c, group, name)
        except ProviderError:
            pass  # reported by list_owned; release() or the sweep finishes it

    async def _drop_failed(self, c: _Clients, group: str, name: str) -> None:
        """Azure may leave a VM resource behind when provisioning fails: delete it."""
        poller = await self._sdk(c.compute.virtual_machines.begin_delete, group, name, polling=_polling())
        await self._wait(poller, self.terminate_wait_s)

    def _ref(self, vm: dict[str, Any], key: str, region: str) -> InstanceRef:
        vm_id = (vm.get("properties") or {}).get("vmId")
        if not vm_id:
            raise Transient(f"{self.id}: VM without a vmId")
        return InstanceRef(provider=self.id, instance_id=str(vm_id), key=key, region=region,
                           created_at=_time_created(vm))

    async def _ensure_network(self, c: _Clients, group: str, name: str, region: str, spec: LaunchSpec) -> str:
        """NSG (SSH + requested ports), public IP and NIC for the machine: idempotent PUTs."""
        tags = self._tags(spec.key, spec.owner.allocation_id)
        rules = [self._rule("ssh", 22, NSG_FIRST_PRIORITY)]
        rules += [
            self._rule(f"port-{p}", p, NSG_FIRST_PRIORITY + 10 * (i + 1))
            for i, p in enumerate(sorted(set(spec.ports) - {22}))
        ]
        nsg = await self._sdk(
            c.network.network_security_groups.begin_create_or_update,
            group,
            f"{name}-nsg",
            {"location": region, "tags": tags, "properties": {"securityRules": rules}},
            polling=_polling(),
        )
        nsg_json = (await self._sdk(nsg.result)).as_dict()
        pip = await self._sdk(
            c.network.public_ip_addresses.begin_create_or_update,
            group,
            f"{name}-ip",
            {
                "location": region,
                "tags": tags,
                "sku": {"name": "Standard", "tier": "Regional"},
                "properties": {"publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4"},
            },
            polling=_polling(),
        )
        pip_json = (await self._sdk(pip.result)).as_dict()
        vnet_id = (
            f"/subscriptions/{self._creds['subscription_id']}/resourceGroups/{group}"
            f"/providers/Microsoft.Network/virtualNetworks/{VNET}/subnets/{SUBNET}"
        )
        nic = await self._sdk(
            c.network.network_interfaces.begin_create_or_update,
            group,
            f"{name}-nic",
            {
                "location": region,
                "tags": tags,
                "properties": {
                    "ipConfigurations": [
                        {
                            "name": "ipconfig1",
                            "properties": {
                                "subnet": {"id": vnet_id},
                                "privateIPAllocationMethod": "Dynamic",
                                "publicIPAddress": {"id": pip_json["id"]},
                            },
                        }
                    ],
                    "networkSecurityGroup": {"id": nsg_json["id"]},
                },
            },
            polling=_polling(),
        )
        return str((await self._sdk(nic.result)).as_dict()["id"])

    @staticmethod
    def _rule(name: str, port: int, priority: int) -> dict[str, Any]:
        return {
            "name": name,
            "properties": {
                "protocol": "Tcp",
                "sourcePortRange": "*",
                "destinationPortRange": str(port),
                "sourceAddressPrefix": "*",
                "destinationAddressPrefix": "*",
                "access": "Allow",
                "priority": priority,
                "direction": "Inbound",
            },
        }

    def _vm_body(
        self, offer: Offer, spec: LaunchSpec, image: dict[str, str], data: str, nic_id: str
    ) -> dict[str, Any]:
        user = self.capabilities.login_user
        props: dict[str, Any] = {
            "hardwareProfile": {"vmSize": offer.instance_type},
            "storageProfile": {
                "imageReference": image,
                "osDisk": {
                    "createOption": "FromImage",
                    "deleteOption": "Delete",
                    "managedDisk": {"storageAccountType": "StandardSSD_LRS"},
                },
            },
            "osProfile": {
                "computerName": self._name(spec.key),
                "adminUsername": user,
                "customData": data,
                "linuxConfiguration": {
                    "disablePasswordAuthentication": True,
                    "ssh": {
                        "publicKeys": [
                            {"path": f"/home/{user}/.ssh/authorized_keys", "keyData": k.strip()}
                            for k in spec.ssh_public_keys
                        ]
                    },
                },
            },
            "networkProfile": {"networkInterfaces": [{"id": nic_id, "properties": {"primary": True}}]},
        }
        if offer.spot:
            props.update(priority="Spot", evictionPolicy="Delete", billingProfile={"maxPrice": -1})
        body: dict[str, Any] = {
            "location": offer.region,
            "tags": self._tags(spec.key, spec.owner.allocation_id),
            "properties": props,
        }
        if offer.zone:
            body["zones"] = [offer.zone]
        return body

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        if not ref.region:
            return None
        c = await self._c()
        group, name = self._group(ref.region), self._name(ref.key)
        vm = await self._get_or_none(c.compute.virtual_machines.get, group, name, expand="instanceView")
        if vm is None:
            return None
        props = vm.get("properties") or {}
        if props.get("vmId") != ref.instance_id:
            return None  # another VM under the name: this one is gone
        state, detail = _state(props)
        host = None
        if state == InstanceState.RUNNING:
            pip = await self._get_or_none(c.network.public_ip_addresses.get, group, f"{name}-ip")
            host = ((pip or {}).get("properties") or {}).get("ipAddress")
            if not host:
                state, detail = InstanceState.PENDING, "running, public IP not assigned yet"
        return InstanceStatus(
            ref=ref,
            state=state,
            host=host,
            ssh_port=22,
            ssh_user=self.capabilities.login_user,
            instance_type=(props.get("hardwareProfile") or {}).get("vmSize"),
            detail=detail,
        )

    async def terminate(self, ref: InstanceRef) -> None:
        if not ref.region:
            return
        c = await self._c()
        group, name = self._group(ref.region), self._name(ref.key)
        vm = await self._get_or_none(c.compute.virtual_machines.get, group, name)
        if vm is not None:
            if (vm.get("properties") or {}).get("vmId") != ref.instance_id:
                return  # another VM holds the name and the side resources
            poller = await self._sdk(c.compute.virtual_machines.begin_delete, group, name, polling=_polling())
            await self._wait(poller, self.terminate_wait_s)
            if await self._get_or_none(c.compute.virtual_machines.get, group, name) is not None:
                return  # still going: the next terminate (or release) removes the side resources
        await self._delete_side_resources(c, group, name)

    async def _delete_side_resources(self, c: _Clients, group: str, name: str) -> None:
        """NIC first: Azure refuses to delete a public IP or an NSG still attached to one."""
        for ops, suffix in (
            (c.network.network_interfaces, "nic"),
            (c.network.public_ip_addresses, "ip"),
            (c.network.network_security_groups, "nsg"),
        ):
            await self._delete(ops, group, f"{name}-{suffix}")

    async def _delete(self, ops: Any, group: str, name: str) -> None:
        def delete() -> None:
            from azure.core.exceptions import ResourceNotFoundError

            try:
                ops.begin_delete(group, name, polling=_polling()).result()
            except ResourceNotFoundError:  # the resource group is gone: so is the resource
                pass

        await self._sdk(delete)

    async def list_owned(self) -> list[InstanceRef]:
        c = await self._c()
        flt = f"tagName eq '{TAG_INSTALLATION}' and tagValue eq '{self.installation_id}'"

        def vms() -> list[dict[str, Any]]:
            return [v.as_dict() for v in c.compute.virtual_machines.list_all()]

        def tagged() -> list[dict[str, Any]]:
            return [r.as_dict() for r in c.resource.resources.list(filter=flt)]

        machines = []
        for vm in await self._sdk(vms):
            tags = vm.get("tags") or {}
            vm_id = (vm.get("properties") or {}).get("vmId")
            if tags.get(TAG_INSTALLATION) == self.installation_id and tags.get(TAG_KEY) and vm_id:
                machines.append(
                    InstanceRef(
                        provider=self.id,
                        instance_id=str(vm_id),
                        key=tags[TAG_KEY],
                        region=str(vm.get("location") or "") or None,
                        created_at=_time_created(vm),
                    )
                )
        keys = {m.key for m in machines}
        kinds = {
            "microsoft.network/networkinterfaces": "nic",
            "microsoft.network/publicipaddresses": "public-ip",
            "microsoft.network/networksecuritygroups": "nsg",
        }
        leftovers = []
        for r in await self._sdk(tagged):
            tags = r.get("tags") or {}
            kind = kinds.get(str(r.get("type") or "").lower())
            key = tags.get(TAG_KEY)
            if kind and key and key not in keys and tags.get(TAG_INSTALLATION) == self.installation_id:
                leftovers.append(
                    InstanceRef(
                        provider=self.id,
                        instance_id=str(r["id"]),
                        key=key,
                        kind=kind,
                        region=str(r.get("location") or "") or None,
                    )
                )
        return machines + leftovers

    async def release(self, key: str) -> None:
        """The key's NIC, public IP and NSG wherever they are (a create that never made its VM)."""
        c = await self._c()
        flt = f"tagName eq '{TAG_KEY}' and tagValue eq '{key}'"

        def tagged() -> list[dict[str, Any]]:
            return [r.as_dict() for r in c.resource.resources.list(filter=flt)]

        groups = set()
        for r in await self._sdk(tagged):
            if (r.get("tags") or {}).get(TAG_INSTALLATION) != self.installation_id:
                continue
            parts = str(r.get("id") or "").split("/")
            if len(parts) > 4 and parts[3].lower() == "resourcegroups":
                groups.add(parts[4])
        for group in sorted(groups):
            await self._delete_side_resources(c, group, self._name(key))

    async def aclose(self) -> None:
        clients, self._clients = self._clients, None
        if clients is not None:
            for client in (clients.compute, clients.network, clients.resource, clients.credential):
                await self._sdk(client.close)
        await super().aclose()


def _statuses(props: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((props.get("instanceView") or {}).get("statuses")) or [])


def _failure(view: dict[str, Any] | None) -> tuple[str, str]:
    """(code, message) of a failed provisioning, from an instance view's statuses."""
    for s in (view or {}).get("statuses") or []:
        code = str(s.get("code") or "")
        if code.startswith("ProvisioningState/failed/"):
            return code.rsplit("/", 1)[1], str(s.get("message") or "")
    return "", ""


def _state(props: dict[str, Any]) -> tuple[InstanceState, str]:
    provisioning = str(props.get("provisioningState") or "")
    power = next(
        (
            str(s.get("code"))[len("PowerState/") :]
            for s in _statuses(props)
            if str(s.get("code") or "").startswith("PowerState/")
        ),
        "",
    )
    if provisioning == "Failed":
        code, message = _failure(props.get("instanceView"))
        return InstanceState.ERROR, f"Failed: {code}: {message}".rstrip(": ")
    if provisioning == "Deleting":
        return InstanceState.TERMINATING, "Deleting"
    detail = f"{provisioning}, {power or 'no power state'}"
    if power == "running" and provisioning == "Succeeded":
        return InstanceState.RUNNING, detail
    if power in ("stopped", "deallocated"):
        return InstanceState.STOPPED, detail
    if power in ("stopping", "deallocating"):
        return InstanceState.STOPPING, detail
    return InstanceState.PENDING, detail

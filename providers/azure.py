"""Microsoft Azure on its official SDKs: azure-identity (ClientSecretCredential), azure-mgmt-compute,
azure-mgmt-network and azure-mgmt-resource, all blocking, so every call runs on SdkCloudProvider's
thread pool. The SDKs are imported on first use.

The contract is here; the SDKs' clients, endpoints, error codes and polling in
providers/azure_client.py (`ArmClient`, this adapter's base); the VM's ARM JSON (names, image, custom
data, NSG rules, the VM body, its state read back) in providers/azure_vm.py; regions and SKUs as
offers in providers/azure_catalog.py, priced by providers/azure_prices.py.

Layout in the subscription: one resource group per installation and region
(`gpuprov-<installation>-<region>`, made by `prepare`) holding a shared virtual network; per machine a
network security group (SSH + the requested ports from anywhere; the Kubernetes API port 6443 only
from `LaunchSpec.k8s_api_from`, and not at all when that is empty), a Standard static public IP and
a NIC, then the VM.
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

from typing import Any, ClassVar

from pydantic import SecretStr

from providers.azure_catalog import REGIONS, offers_of
from providers.azure_client import AUTHORITIES, ArmClient, Clients, polling
from providers.azure_vm import (
    DEFAULT_IMAGE,
    IMAGE_FORM,
    IMAGE_URN,
    custom_data,
    evicted,
    group_name,
    nsg_rule,
    parse_image,
    provisioning_failure,
    time_created,
    vm_body,
    vm_name,
    vm_state,
)
from providers.base import (
    K8S_API_PORT,
    AuthError,
    Capabilities,
    CapacityError,
    FailureScope,
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
    rank_offers,
)
from providers.credentials import Credentials, field
from providers.listing import Listing

SUBSCRIPTION_API_VERSION = "2022-12-01"
TAG_INSTALLATION, TAG_KEY, TAG_ALLOCATION = "gpuprov-installation", "gpuprov-key", "gpuprov-allocation"
VNET, SUBNET, ADDRESS_SPACE = "gpuprov-vnet", "default", "10.64.0.0/16"
NSG_FIRST_PRIORITY = 1000
K8S_API_PRIORITY = NSG_FIRST_PRIORITY - 10  # its own slot: the same whatever ports are asked
K8S_API_RULE = "k8s-api"

_GUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"


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


class AzureProvider(ArmClient):
    id: ClassVar[str] = "azure"
    credentials_model: ClassVar[type[AzureCredentials]] = AzureCredentials
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
        image_pattern=IMAGE_URN,
        image_form=IMAGE_FORM,
        login_user="ubuntu",
        side_resources=["nsg", "nic", "public-ip"],
        regions=REGIONS,
        region_required=True,
        boot_timeout_s=1200.0,
        self_end=SelfEnd(
            method="none",
            how=("a shutdown from inside leaves the VM Stopped but allocated and billed; only a "
                 "deallocate or delete through ARM ends it, which needs a managed identity given rights "
                 "beforehand"),
            source="https://learn.microsoft.com/en-us/azure/virtual-machines/states-billing",
        ),
    )
    # How long create waits for the create operation's verdict, and terminate for the VM to go,
    # before returning (the next call, or get(), carries on). Real VMs take minutes.
    create_wait_s: ClassVar[float] = 90.0
    terminate_wait_s: ClassVar[float] = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._prepared: set[str] = set()

    # ------------------------------------------------------------------ names and tags

    def _group(self, region: str) -> str:
        return group_name(self.installation_id, region)

    def _name(self, key: str) -> str:
        return vm_name(self.installation_id, key)

    def _tags(self, spec_key: str, allocation: str | None = None) -> dict[str, str]:
        tags = {TAG_INSTALLATION: self.installation_id, TAG_KEY: spec_key}
        if allocation:
            tags[TAG_ALLOCATION] = allocation
        return tags

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
            out += offers_of(self.id, sku)
        return rank_offers(out, query)

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
            c.network.virtual_networks.begin_create_or_update, group, VNET, vnet, polling=polling()
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

    async def _launch(self, c: Clients, group: str, name: str, offer: Offer, spec: LaunchSpec,
                      image: dict[str, str], data: str, scope: FailureScope) -> InstanceRef:
        nic_id = await self._ensure_network(c, group, name, offer.region, spec)
        vm = self._vm_body(offer, spec, image, data, nic_id)
        try:
            poller = await self._sdk(
                c.compute.virtual_machines.begin_create_or_update,
                group,
                name,
                vm,
                polling=polling(),
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
            code, message = provisioning_failure(view)
            await self._drop_failed(c, self._group(offer.region), self._name(spec.key))
            if self.error_codes.get(code) == "capacity":
                raise CapacityError(f"{self.id}: {code}: {message}", scope)
            raise Transient(f"{self.id}: VM failed ({code or 'unknown'}): {message}; deleted, retry")
        return self._ref(vm, spec.key, offer.region)

    async def _drop_network_quietly(self, c: Clients, group: str, name: str) -> None:
        try:
            await self._delete_side_resources(c, group, name)
        except ProviderError:
            pass  # reported by list_owned; release() or the sweep finishes it

    async def _drop_failed(self, c: Clients, group: str, name: str) -> None:
        """Azure may leave a VM resource behind when provisioning fails: delete it."""
        poller = await self._sdk(c.compute.virtual_machines.begin_delete, group, name, polling=polling())
        await self._wait(poller, self.terminate_wait_s)

    def _ref(self, vm: dict[str, Any], key: str, region: str) -> InstanceRef:
        vm_id = (vm.get("properties") or {}).get("vmId")
        if not vm_id:
            raise Transient(f"{self.id}: VM without a vmId")
        return InstanceRef(provider=self.id, instance_id=str(vm_id), key=key, region=region,
                           created_at=time_created(vm))

    async def _ensure_network(self, c: Clients, group: str, name: str, region: str, spec: LaunchSpec) -> str:
        """NSG (SSH + requested ports from anywhere, the Kubernetes API from `k8s_api_from`), public IP
        and NIC for the machine: idempotent PUTs (the NSG's rule list is replaced, never appended to)."""
        tags = self._tags(spec.key, spec.owner.allocation_id)
        rules = [nsg_rule("ssh", 22, NSG_FIRST_PRIORITY)]
        rules += [
            nsg_rule(f"port-{p}", p, NSG_FIRST_PRIORITY + 10 * (i + 1))
            for i, p in enumerate(sorted(set(spec.ports) - {22}))
        ]
        if spec.k8s_api_from:
            sources = list(dict.fromkeys(spec.k8s_api_from))
            rules.append(nsg_rule(K8S_API_RULE, K8S_API_PORT, K8S_API_PRIORITY, sources))
        nsg = await self._sdk(
            c.network.network_security_groups.begin_create_or_update,
            group,
            f"{name}-nsg",
            {"location": region, "tags": tags, "properties": {"securityRules": rules}},
            polling=polling(),
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
            polling=polling(),
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
            polling=polling(),
        )
        return str((await self._sdk(nic.result)).as_dict()["id"])

    def _vm_body(
        self, offer: Offer, spec: LaunchSpec, image: dict[str, str], data: str, nic_id: str
    ) -> dict[str, Any]:
        return vm_body(
            offer, spec, image, data, nic_id, user=self.capabilities.login_user,
            computer_name=self._name(spec.key), tags=self._tags(spec.key, spec.owner.allocation_id),
        )

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
        pip = None
        if vm_state(props)[0] == InstanceState.RUNNING:
            pip = await self._get_or_none(c.network.public_ip_addresses.get, group, f"{name}-ip")
        return self._status(ref, props, pip)

    def _status(self, ref: InstanceRef, props: dict[str, Any], pip: dict[str, Any] | None) -> InstanceStatus:
        """A VM's status from its properties with the instance view (`get` with $expand=instanceView,
        or the subscription's listing with statusOnly=true) and its public IP resource, if any: the
        address is on the IP, never on the VM."""
        state, detail = vm_state(props)
        host = None
        if state == InstanceState.RUNNING:
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
            detail=f"evicted (Spot): {detail}" if evicted(props) else detail,
            preempted=evicted(props),  # providers/azure_vm.py: a deallocation gpuprov did not ask for
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
            poller = await self._sdk(c.compute.virtual_machines.begin_delete, group, name, polling=polling())
            await self._wait(poller, self.terminate_wait_s)
            if await self._get_or_none(c.compute.virtual_machines.get, group, name) is not None:
                return  # still going: the next terminate (or release) removes the side resources
        await self._delete_side_resources(c, group, name)

    async def _delete_side_resources(self, c: Clients, group: str, name: str) -> None:
        """NIC first: Azure refuses to delete a public IP or an NSG still attached to one."""
        for ops, suffix in (
            (c.network.network_interfaces, "nic"),
            (c.network.public_ip_addresses, "ip"),
            (c.network.network_security_groups, "nsg"),
        ):
            await self._delete(ops, group, f"{name}-{suffix}")

    async def _listed_vms(
        self, c: Clients, *, status_only: bool = False
    ) -> list[tuple[InstanceRef, dict[str, Any]]]:
        """Our VMs in the subscription's VM listing (every page, nextLink) with their refs; with
        `status_only`, each VM's properties carry its instance view (statusOnly=true)."""

        def vms() -> list[dict[str, Any]]:
            listed = c.compute.virtual_machines.list_all(status_only="true" if status_only else None)
            return [v.as_dict() for v in listed]

        out = []
        for vm in await self._sdk(vms):
            tags = vm.get("tags") or {}
            vm_id = (vm.get("properties") or {}).get("vmId")
            if tags.get(TAG_INSTALLATION) == self.installation_id and tags.get(TAG_KEY) and vm_id:
                ref = InstanceRef(
                    provider=self.id,
                    instance_id=str(vm_id),
                    key=tags[TAG_KEY],
                    region=str(vm.get("location") or "") or None,
                    created_at=time_created(vm),
                )
                out.append((ref, vm))
        return out

    async def list_machines(self) -> list[InstanceStatus]:
        """The VM listing with statusOnly=true (the power state `get` reads from the instance view),
        and, only when one of ours runs, the subscription's public IP listing: a VM's address is on its
        public IP resource, which no VM listing carries. Two listings (each every page), whatever the
        number of machines; `get` would make two calls per machine."""
        c = await self._c()
        vms = await self._listed_vms(c, status_only=True)
        listed = [(ref, vm.get("properties") or {}) for ref, vm in vms]
        ips: dict[str, dict[str, Any]] = {}
        if any(vm_state(props)[0] == InstanceState.RUNNING for _, props in listed):

            def public_ips() -> list[dict[str, Any]]:
                return [p.as_dict() for p in c.network.public_ip_addresses.list_all()]

            ips = {str(p.get("id") or "").lower(): p for p in await self._sdk(public_ips)}
        sub = self._creds["subscription_id"]
        out = []
        for ref, props in listed:
            group, name = self._group(ref.region or ""), self._name(ref.key)
            ip_id = (f"/subscriptions/{sub}/resourceGroups/{group}"
                     f"/providers/Microsoft.Network/publicIPAddresses/{name}-ip")
            out.append(self._status(ref, props, ips.get(ip_id.lower())))
        return out

    async def list_owned(self) -> list[InstanceRef]:
        c = await self._c()
        flt = f"tagName eq '{TAG_INSTALLATION}' and tagValue eq '{self.installation_id}'"

        def tagged() -> list[dict[str, Any]]:
            return [r.as_dict() for r in c.resource.resources.list(filter=flt)]

        machines = [ref for ref, _ in await self._listed_vms(c)]
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


"""Oracle Cloud Infrastructure (PROVIDER-APIS.md "Oracle Cloud (OCI)"), on the official `oci` SDK
(pinned exactly; imported lazily by providers/oci_client.py). Single machines: bare-metal and VM GPU
shapes, one per allocation. Multi-node RDMA clusters (cluster networks, instance pools) are out of scope.

- Auth: an API signing key (User OCID, Tenancy OCID, Fingerprint, Home Region, Private Key); every
  request is signed by the SDK. Everything lives in the tenancy's root compartment.
- Regions: the tenancy's subscribed regions (`list_region_subscriptions`); planning looks in the home
  region unless --region names another. Offers are live shapes per availability domain (`list_shapes`
  with `gpus`, `gpu_description`), priced from Oracle's price list (OCI has no price API); preemptible
  capacity (`--spot`) at half.
- Create: find-or-create by key. The display name `gpuprov-<installation>-<key>` is the ownership
  mark; a create lists instances of that name first, then launches with `opc-retry-token` derived
  from the key, so a launch whose answer was lost and is retried is the same instance (24 h).
- Per machine, a network security group named like the instance (SSH plus `--port`s, TCP from
  anywhere; the Kubernetes API port 6443 only from `LaunchSpec.k8s_api_from`, none when that is
  empty) on the region's first public subnet; a retry finds it by name and adds only the rules it
  lacks. It goes once the instance is gone (terminate, else `release`), and `list_owned` reports one
  left without its instance. The subnet's security lists add what they allow (the default one: SSH).
- The public IP is only on the VNIC: `list_vnic_attachments` then `get_vnic`.
- Errors: `ServiceError(status, code, message)`; "Out of host capacity." (a 500 InternalError) is
  capacity, `LimitExceeded`/`QuotaExceeded` quota, 401 `NotAuthenticated` auth, 404
  `NotAuthorizedOrNotFound` gone (or auth, for the tenancy itself).
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from providers import cloudinit
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
    SelfEnd,
    Transient,
    launch_request,
    rank_offers,
)
from providers.gpus import normalize_gpu
from providers.listing import Listing
from providers.oci_catalog import (
    CODES,
    GONE,
    GPU_MEMORY_GIB,
    LISTING,
    NSG,
    PRICES,
    REGIONS,
    SPOT_FACTOR,
    STATES,
    SUBSCRIPTIONS_TTL_S,
    UBUNTU,
    UBUNTU_VERSION,
    USER_DATA_MAX,
    OciCredentials,
    plain,
)
from providers.oci_client import (
    ClientPool,
    Opening,
    all_pages,
    ingress_rules,
    launch_details,
    nsg_details,
    openings_of,
    wanted_openings,
)
from providers.rest import ErrorKind
from providers.sdk import SdkCloudProvider, SdkError


class OciProvider(SdkCloudProvider):
    id: ClassVar[str] = "oci"
    credentials_model: ClassVar[type[OciCredentials]] = OciCredentials
    error_codes: ClassVar[Mapping[str, ErrorKind]] = CODES
    api_hosts: ClassVar[tuple[str, ...]] = tuple(
        host for r in REGIONS for host in (f"iaas.{r}.oraclecloud.com", f"identity.{r}.oci.oraclecloud.com")
    )
    listing: ClassVar[Listing] = LISTING
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Oracle Cloud (OCI)",
        k3s="cloud-init",
        k8s_api=True,
        ports=True,
        spot=True,
        custom_image=True,
        image_pattern=r"ocid1\.image\..+",
        image_form="oci: --image must be an image OCID (ocid1.image.oc1…)",
        login_user="ubuntu",
        side_resources=[NSG],
        regions=REGIONS,
        boot_timeout_s=1800.0,  # bare-metal GPU shapes take 10-20 minutes to provision [obs]
        self_end=SelfEnd(
            method="none",
            how=("shutting an instance down from its OS does not stop billing; an instance principal "
                 "that may terminate it needs a dynamic group and policy set up beforehand"),
            source="https://docs.oracle.com/en-us/iaas/Content/Compute/Tasks/restartinginstance.htm",
        ),
    )

    _pool: ClientPool | None = None
    _subs: tuple[float, dict[str, str]] | None = None  # (when, region name -> region key)

    # ------------------------------------------------------------------ plumbing

    @property
    def _creds(self) -> OciCredentials:
        assert isinstance(self.credentials, OciCredentials)
        return self.credentials

    @property
    def _tenancy(self) -> str:
        return self._creds.tenancy_ocid

    async def _c(self, region: str) -> Any:
        """The region's clients, built on the pool (the first build imports the SDK: seconds)."""
        return await self._sdk(self._clients, region)

    def _clients(self, region: str) -> Any:
        if self._pool is None:
            c = self._creds
            self._pool = ClientPool(
                tenancy=c.tenancy_ocid,
                user=c.user_ocid,
                fingerprint=c.fingerprint,
                home_region=c.region,
                private_key=c.private_key.get_secret_value(),
                endpoint=self.options.endpoint,
                ca_file=self.ca_bundle_file,
            )
        return self._pool.get(region)

    def sdk_error(self, exc: Exception) -> SdkError | None:
        from oci.exceptions import ServiceError

        if not isinstance(exc, ServiceError):
            return None
        code, message = str(exc.code or ""), str(exc.message or "")[:300]
        if "out of host capacity" in message.lower():
            code = "OutOfHostCapacity"
        headers = exc.headers or {}
        return SdkError(code, message, int(exc.status), headers.get("retry-after"))

    def _name(self, key: str) -> str:
        return f"gpuprov-{self.installation_id}-{key}"

    def _key_of(self, name: str | None) -> str | None:
        prefix = f"gpuprov-{self.installation_id}-"
        return name[len(prefix) :] if name and name.startswith(prefix) else None

    def _tags(self, key: str) -> dict[str, str]:
        return {"gpuprov-installation": self.installation_id, "gpuprov-key": key}

    def _retry_token(self, key: str) -> str:
        """The launch's `opc-retry-token` (at most 64 characters): the key, under this installation."""
        token = f"gpuprov-{self.installation_id}-{key}"
        return token if len(token) <= 64 else hashlib.sha256(token.encode()).hexdigest()

    async def _subscriptions(self) -> dict[str, str]:
        if self._subs is None or time.monotonic() - self._subs[0] > SUBSCRIPTIONS_TTL_S:
            home = self._creds.region
            rows = await self._sdk(
                lambda: self._clients(home).identity.list_region_subscriptions(self._tenancy).data
            )
            self._subs = (
                time.monotonic(),
                {str(r.region_name): str(r.region_key).lower() for r in rows if r.status in (None, "READY")},
            )
        return self._subs[1]

    async def _regions(self) -> list[str]:
        """The regions to look in for machines: every subscribed one (one pass over a single endpoint)."""
        subs = await self._subscriptions()
        if self._pool is not None and self._pool.single_endpoint:
            return [self._creds.region]
        return sorted(subs)

    def _in_region(self, ocid: str, region: str, key: str | None) -> bool:
        parts = ocid.split(".")
        return len(parts) < 4 or not parts[3] or parts[3] in (region, key)

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        home = self._creds.region
        try:
            tenancy = await self._sdk(lambda: self._clients(home).identity.get_tenancy(self._tenancy).data)
        except InvalidRequest as exc:  # 404 NotAuthorizedOrNotFound on the tenancy itself
            raise AuthError(
                f"oci: the tenancy is not found or not authorized ({exc.message[:200]})"
            ) from None
        subs = await self._subscriptions()
        if home not in subs:
            raise AuthError(f"oci: the home region {home} is not among the tenancy's subscribed regions")
        return f"OCI tenancy {str(tenancy.name)[:100]} ({len(subs)} subscribed regions, home {home})"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        subs = await self._subscriptions()
        regions = [query.region] if query.region else [self._creds.region]
        out: list[Offer] = []
        for region in regions:
            if region in subs:
                out += await self._offers_in(region, subs[region], query)
        return rank_offers(out, query)

    async def _offers_in(self, region: str, region_key: str, query: OfferQuery) -> list[Offer]:
        clients = await self._c(region)
        ads = await self._sdk(lambda: clients.identity.list_availability_domains(self._tenancy).data)
        if self._pool is not None and self._pool.single_endpoint:  # one endpoint answers every region
            ads = [
                a for a in ads if region.upper() in str(a.name).upper() or region_key.upper() in str(a.name)
            ]
        out: list[Offer] = []
        for ad in ads:
            shapes = await self._sdk(
                all_pages, clients.compute.list_shapes, self._tenancy, availability_domain=ad.name
            )
            for s in shapes:
                price = PRICES.get(str(s.shape))
                if not s.gpus or price is None:
                    continue
                name, memory = normalize_gpu(plain(s.gpu_description), str(s.shape))
                memory = memory or GPU_MEMORY_GIB.get(str(s.shape))
                gpu = GpuSpec(name=name, count=int(s.gpus), memory_gib=memory)
                vcpus = int((s.ocpus or 1) * 2)  # an OCPU is two vCPUs on x86 shapes
                for spot in (False, True):
                    if query.spot is not None and query.spot != spot:
                        continue
                    out.append(
                        Offer(
                            provider=self.id,
                            instance_type=str(s.shape),
                            gpu=gpu,
                            vcpus=vcpus,
                            memory_gib=float(s.memory_in_gbs or 0),
                            region=region,
                            zone=str(ad.name),
                            price_per_hour=round(price * (SPOT_FACTOR if spot else 1.0), 4),
                            spot=spot,
                        )
                    )
        return out

    async def _instances(self, region: str, name: str | None = None) -> list[Any]:
        kwargs = {"display_name": name} if name else {}
        found = await self._sdk(
            all_pages, (await self._c(region)).compute.list_instances, self._tenancy, **kwargs
        )
        return [i for i in found if i.lifecycle_state not in GONE]

    def _ref(self, inst: Any, key: str, region: str) -> InstanceRef:
        """`region`: where it was listed, unless the instance names a subscribed region itself (one
        endpoint answering every region). `inst.region` is `iad`/`phx` for Ashburn and Phoenix, the
        full name elsewhere."""
        said = str(inst.region or "")
        subs = self._subs[1] if self._subs else {}
        named = said if said in subs else next((n for n, k in subs.items() if k == said.lower()), region)
        return InstanceRef(
            provider=self.id, instance_id=str(inst.id), key=key, region=named, created_at=inst.time_created
        )

    async def _nsgs(self, region: str, name: str | None = None) -> list[Any]:
        kwargs: dict[str, Any] = {"compartment_id": self._tenancy}
        if name:
            kwargs["display_name"] = name
        found = await self._sdk(
            all_pages, (await self._c(region)).network.list_network_security_groups, **kwargs
        )
        return [
            n for n in found if self._key_of(n.display_name) is not None and n.lifecycle_state != "TERMINATED"
        ]

    async def _subnet(self, region: str) -> Any:
        subs = await self._subscriptions()
        found = await self._sdk(all_pages, (await self._c(region)).network.list_subnets, self._tenancy)
        usable = [
            s
            for s in found
            if s.lifecycle_state == "AVAILABLE"
            and not s.prohibit_public_ip_on_vnic
            and self._in_region(str(s.id), region, subs.get(region))
        ]
        if not usable:
            raise InvalidRequest(
                f"oci: no public subnet in {region}'s root compartment: create a VCN with one"
            )
        return usable[0]

    async def _ensure_nsg(self, region: str, name: str, key: str, vcn: str, wanted: list[Opening]) -> str:
        """The key's NSG with its rules: found (a retry) or made. One found lacking rules (a create cut
        short between making it and adding them) gets the missing ones now, else SSH would never open;
        a rule already there is not added again."""
        net = (await self._c(region)).network
        found = await self._nsgs(region, name)
        if found:
            nsg_id = str(found[0].id)
            have = openings_of(
                await self._sdk(all_pages, net.list_network_security_group_security_rules, nsg_id)
            )
            missing = [o for o in wanted if o not in have]
            if missing:
                await self._sdk(net.add_network_security_group_security_rules, nsg_id, ingress_rules(missing))
            return nsg_id
        nsg = await self._sdk(
            lambda: (
                net.create_network_security_group(
                    nsg_details(compartment=self._tenancy, vcn=vcn, name=name, tags=self._tags(key))
                ).data
            )
        )
        await self._sdk(net.add_network_security_group_security_rules, nsg.id, ingress_rules(wanted))
        return str(nsg.id)

    async def _remove_nsgs(self, region: str, name: str) -> None:
        net = (await self._c(region)).network
        for nsg in await self._nsgs(region, name):
            try:
                await self._sdk(net.delete_network_security_group, nsg.id)
            except InvalidRequest as exc:
                if ": Conflict:" in exc.message:  # a VNIC still uses it: gone once the instance is
                    raise Transient(f"oci: network security group {name} is still in use") from None
                if ": NotAuthorizedOrNotFound:" not in exc.message:
                    raise

    async def _image(self, region: str, shape: str) -> str:
        images = await self._sdk(
            lambda: (
                self._clients(region)
                .compute.list_images(
                    self._tenancy,
                    operating_system=UBUNTU,
                    operating_system_version=UBUNTU_VERSION,
                    shape=shape,
                    sort_by="TIMECREATED",
                    sort_order="DESC",
                )
                .data
            )
        )
        if not images:
            raise InvalidRequest(f"oci: no {UBUNTU} {UBUNTU_VERSION} image for {shape} in {region}")
        return str(images[0].id)

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        data = cloudinit.boot_user_data(spec.user_data, k3s=spec.k3s)
        encoded = base64.b64encode(data.encode()).decode() if data else None
        if encoded and len(encoded) > USER_DATA_MAX:
            raise InvalidRequest("oci: user data exceeds the 32,000 bytes OCI metadata takes")
        region, name = offer.region, self._name(spec.key)
        found = await self._instances(region, name)
        if found:
            return self._ref(found[0], spec.key, region)
        subnet = await self._subnet(region)
        nsg = await self._ensure_nsg(
            region, name, spec.key, str(subnet.vcn_id), wanted_openings(spec.ports, spec.k8s_api_from)
        )
        image = spec.image or await self._image(region, offer.instance_type)
        ad = offer.zone
        if not ad:
            ads = await self._sdk(
                lambda: self._clients(region).identity.list_availability_domains(self._tenancy).data
            )
            ad = str(ads[0].name)
        details = launch_details(
            compartment=self._tenancy,
            ad=ad,
            shape=offer.instance_type,
            name=name,
            image=image,
            subnet=str(subnet.id),
            nsg=nsg,
            keys=spec.ssh_public_keys,
            user_data_b64=encoded,
            spot=offer.spot,
            tags=self._tags(spec.key),
        )
        scope = FailureScope(
            provider=self.id, region=region, zone=offer.zone, instance_type=offer.instance_type
        )
        compute = (await self._c(region)).compute
        try:
            with launch_request():
                inst = await self._sdk(
                    lambda: (
                        compute.launch_instance(details, opc_retry_token=self._retry_token(spec.key)).data
                    ),
                    scope=scope,
                )
        except (CapacityError, QuotaError, InvalidRequest) as exc:
            made = await self._instances(region, name)
            if made and ": Conflict:" in exc.message:
                # The key's token was used with another body: a create of the same key that raced this
                # one (its own NSG) launched first. Its instance is the key's; the NSGs of the name all
                # go with it (terminate, release).
                return self._ref(made[0], spec.key, region)
            if not made:  # refused: nothing made, its NSG goes now
                await self._remove_nsgs(region, name)
            raise
        return self._ref(inst, spec.key, region)

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        if not ref.instance_id.startswith("ocid1.instance."):
            return None
        clients = await self._c(ref.region or self._creds.region)
        inst = await self._gone_is_none(lambda: clients.compute.get_instance(ref.instance_id).data)
        if inst is None or inst.lifecycle_state == "TERMINATED":
            return None
        state = str(inst.lifecycle_state)
        host = None
        if state == "RUNNING":
            host = await self._public_ip(clients, ref.instance_id)
        return InstanceStatus(
            ref=ref,
            state=STATES.get(state, InstanceState.ERROR),
            host=host,
            ssh_port=22,
            ssh_user=self.capabilities.login_user,
            instance_type=inst.shape,
            detail=state,
        )

    async def list_machines(self) -> None:
        # None: the watch asks `get` per machine. ListInstances carries the state and shape but no
        # address: the public IP is only on the VNIC, reached per instance (ListVnicAttachments, then
        # GetVnic). No listing joins them: it would take ListVnicAttachments for the compartment,
        # ListPublicIps (its assignedEntityId is a private IP), and ListPrivateIps per subnet (for the
        # VNIC of each private IP) on top of ListInstances, per region: side-resource listings, and
        # the simulation serves neither of the last two.
        return None

    async def _public_ip(self, clients: Any, instance_id: str) -> str | None:
        attachments = await self._sdk(
            all_pages, clients.compute.list_vnic_attachments, self._tenancy, instance_id=instance_id
        )
        for att in attachments:
            if att.lifecycle_state == "ATTACHED" and att.vnic_id:
                vnic = await self._gone_is_none(lambda a=att: clients.network.get_vnic(a.vnic_id).data)
                if vnic is not None and vnic.public_ip:
                    return str(vnic.public_ip)
        return None

    async def _gone_is_none(self, fn: Any) -> Any:
        try:
            return await self._sdk(fn)
        except ProviderError as exc:
            if isinstance(exc, InvalidRequest) and ": NotAuthorizedOrNotFound:" in exc.message:
                return None
            raise

    async def terminate(self, ref: InstanceRef) -> None:
        region = ref.region or self._creds.region
        if ref.instance_id.startswith("ocid1.instance."):
            compute = (await self._c(region)).compute
            await self._gone_is_none(
                lambda: compute.terminate_instance(ref.instance_id, preserve_boot_volume=False)
            )
            if await self.get(ref) is not None:
                return  # still terminating: the NSG goes with the next terminate, or release
        if not [
            i for i in await self._instances(region, self._name(ref.key)) if str(i.id) != ref.instance_id
        ]:
            await self._remove_nsgs(region, self._name(ref.key))

    async def list_owned(self) -> list[InstanceRef]:
        machines: list[InstanceRef] = []
        leftovers: list[InstanceRef] = []
        for region in await self._regions():
            mine = [(k, i) for i in await self._instances(region) if (k := self._key_of(i.display_name))]
            machines += [self._ref(i, k, region) for k, i in mine]
            keys = {k for k, _ in mine}
            leftovers += [
                InstanceRef(provider=self.id, instance_id=str(n.id), kind=NSG, key=k, region=region)
                for n in await self._nsgs(region)
                if (k := self._key_of(n.display_name)) not in keys and k is not None
            ]
        return machines + leftovers

    async def find_all(self, key: str) -> list[InstanceRef]:
        out: list[InstanceRef] = []
        for region in await self._regions():
            out += [self._ref(i, key, region) for i in await self._instances(region, self._name(key))]
        return out

    async def find(self, key: str) -> InstanceRef | None:
        found = await self.find_all(key)
        return found[0] if found else None

    async def release(self, key: str) -> None:
        for region in await self._regions():
            await self._remove_nsgs(region, self._name(key))

    async def aclose(self) -> None:
        self._pool = None
        await super().aclose()

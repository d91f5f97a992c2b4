"""Nebius AI Cloud, on the official `nebius` Python SDK (gRPC; the wire in providers/nebius_wire.py).

Credentials: a service account's authorized key (service account id, public key id, the private key
.pem). Regions: Nebius scopes compute to a project and a project lives in one region, so the adapter
learns the tenant's projects (profile -> the service account's project -> its tenant -> every project)
and offers each region that has one; planning lists each project's live platforms and presets and
prices each from Nebius's billing calculator (`billing.v1alpha1.CalculatorService/Estimate`, on-demand
and preemptible), so no price table lives here.

Identity and idempotency: the instance is named `gpuprov-<installation>-<key>` (unique within a
project) and labelled `gpuprov-installation` / `gpuprov-key` / `gpuprov-allocation`; a create looks
the name up first (`GetByName`), and the Create carries an `x-idempotency-key` derived from the key,
region and type, so a retried create whose answer was lost is the same mutation. A name taken by
someone else's instance is refused, not adopted. Listing has no label filter: labels are read here.

Launch: platform + preset, a boot disk the VM manages (created and deleted with it: no side
resource), the project's subnet with a public IP (the default security group allows all traffic, so
`--port` needs nothing more), the user's SSH keys in `cloud_init_user_data` (the only way Nebius takes
one) with k3s at boot, `--spot` as a preemptible instance (stop on preemption, recovery FAIL).

Firewall and the Kubernetes API: the NIC names no security group, so the network's default one
applies, taken to allow all traffic [unconfirmed what the real default group admits]. So 6443 cannot be
restricted to the caller's networks here, and gpuprov does not offer it directly: Kubernetes access
on Nebius is through the SSH tunnel (`k8s_api=False`, against the clouds page's "direct") until the
adapter makes its own security group. Nebius's API could restrict it (vpc.v1 SecurityGroupService and
SecurityRuleService: a per-instance group whose ingress rules allow 22 and `--port`s from anywhere and
6443 from `source_cidrs` only, at most 8 CIDRs and 8 ports a rule; attached through
`NetworkInterfaceSpec.security_groups`; a side resource to find by name and remove after the
instance), but neither this adapter nor the simulation does that yet.

Operations: Create and Delete answer an operation still running (it finishes when the instance runs,
or is gone). A create polls its operation (`op.update()`) until the operation fails, or finishes, or
the instance shows it was placed (STARTING or later: the boot is `wait_running`'s to follow, and the
contract's create returns while pending), for at most CREATE_WAIT_S. A Create whose operation fails
(Nebius could not place the VM: RESOURCE_EXHAUSTED in the operation's status) is the same typed
refusal as one refused at once, and the failed instance is deleted so the name is free for the next
offer. A terminate waits on its operation (`op.wait()`) for at most DELETE_WAIT_S; past either bound
the instance's own state (`get`), which the workflow polls, tells the rest.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
import uuid
from typing import Any, ClassVar

from pydantic import SecretStr, field_validator

from providers import cloudinit, naming
from providers import nebius_wire as wire
from providers.all_of import all_of
from providers.base import (
    Capabilities,
    CapacityError,
    CloudProvider,
    FailureScope,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    QuotaError,
    SelfEnd,
    launch_leaving,
    launch_request,
    rank_offers,
)
from providers.credentials import Credentials, field
from providers.listing import Listing
from providers.nebius_catalog import (
    DEFAULT_IMAGE_FAMILY,
    REGIONS,
    authorized_keys_part,
    instance_offers,
    preempted,
    state_of,
)

OWNER_LABEL, KEY_LABEL, ALLOCATION_LABEL = "gpuprov-installation", "gpuprov-key", "gpuprov-allocation"
NAME_MAX = 63
BOOT_DISK_GIB = 100
PAGE = 100
CREATE_WAIT_S = 10.0  # at most, for a create's operation to fail or its instance to be placed
DELETE_WAIT_S = 10.0  # at most, for a terminate's operation to finish; past it, `get` shows the rest
_REQUEST_NS = uuid.UUID("7b0e3c8a-5f1d-4f0b-9a57-2f6c1e9d4b21")  # our idempotency keys' UUIDv5 namespace


# A project iam.v2 reports as being set up, parked or purged is not launched into. An unset state
# (v1 had none) counts as active. Which states refuse a create is not published; these are the
# states named for a project that is not simply in use (nebius.iam.v2.ProjectStatus.ProjectState).
LAUNCHABLE_PROJECT_STATES = frozenset({"ACTIVE", "STATE_UNSPECIFIED"})


@dataclasses.dataclass
class TenantProjects:
    """The tenant's projects, as iam.v2 lists them (by name within each page)."""

    # region -> the first launchable project's id there: where new machines go
    launch: dict[str, str] = dataclasses.field(default_factory=dict)
    # (region, project id) of every project, whatever its state: where our machines are looked for,
    # so that one launched into a project since parked, or no longer first by name, is still seen.
    listed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    unused: list[str] = dataclasses.field(default_factory=list)  # "name (STATE)" of those not launched into

    def add(self, project_id: str, name: str, region: str, state: str) -> None:
        if not region:
            return
        self.listed.append((region, project_id))
        if state in LAUNCHABLE_PROJECT_STATES:
            self.launch.setdefault(region, project_id)
        else:
            self.unused.append(f"{name} ({state})")


class NebiusCredentials(Credentials):
    """The connect form's Nebius fields: a service account's authorized key."""

    service_account_id: str = field(
        "Service Account ID", min_length=1, max_length=200, help="serviceaccount-…"
    )
    public_key_id: str = field("Public Key ID", min_length=1, max_length=200, help="publickey-…")
    private_key: SecretStr = field(
        "Private key", "file", min_length=1, max_length=20_000, help="the key pair's private key (.pem file)"
    )

    @field_validator("private_key")
    @classmethod
    def _pem(cls, v: SecretStr) -> SecretStr:
        if "-----BEGIN" not in v.get_secret_value() or "PRIVATE KEY-----" not in v.get_secret_value():
            raise ValueError("must be a PEM private key (-----BEGIN PRIVATE KEY-----)")
        return v


class NebiusProvider(CloudProvider):
    id: ClassVar[str] = "nebius"
    credentials_model: ClassVar[type[NebiusCredentials]] = NebiusCredentials
    api_hosts: ClassVar[tuple[str, ...]] = ("api.nebius.cloud",)
    listing: ClassVar[Listing] = Listing(
        display_name="Nebius",
        tagline="EU-based NVIDIA GPU cloud",
        how_to_connect=(
            "In the Nebius console open Administration → IAM → Service accounts, create one in "
            "the editors group, then Create authorized key: copy the service account ID and the "
            "public key ID, and upload the private key (.pem) it downloads."
        ),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Nebius AI Cloud",
        k3s="cloud-init",
        # The clouds page says "direct"; without a security group of its own the adapter cannot open 6443
        # to the caller only, so the tunnel (module docstring).
        k8s_api=False,
        ports=True,  # the default security group allows all traffic
        spot=True,  # preemptible instances
        custom_image=True,  # an image family or an image id
        login_user="ubuntu",
        side_resources=[],  # the boot disk is managed by the VM and goes with it
        regions=REGIONS,
        region_required=False,
        create_in_flight_s=0.0,  # an idempotency key and a name unique per project
        self_end=SelfEnd(
            method="none",
            how=("Compute treats a Linux shutdown or halt as a failure: it reboots the VM and keeps "
                 "charging; only a stop or delete through the API ends it (credential set up beforehand)"),
            source="https://docs.nebius.com/compute/virtual-machines/stop-start",
        ),
    )

    def __init__(self, credentials: Any, **kwargs: Any) -> None:
        super().__init__(credentials, **kwargs)
        self._sdk_obj: Any = None
        self._lock = asyncio.Lock()
        self._projects: TenantProjects | None = None  # found on first use
        self._account = ""

    # ------------------------------------------------------------------ plumbing

    async def _sdk(self) -> Any:
        async with self._lock:
            if self._sdk_obj is None:
                creds: NebiusCredentials = self.credentials  # type: ignore[assignment]
                endpoint, ca_bundle = self.options.endpoint, self.options.ca_bundle
                if endpoint:  # a private endpoint's certificate is checked once, before any call
                    await wire.check_endpoint_certificate(self.id, endpoint, ca_bundle)
                self._sdk_obj = wire.build_sdk(
                    service_account_id=creds.service_account_id,
                    public_key_id=creds.public_key_id,
                    private_key_pem=creds.private_key.get_secret_value(),
                    endpoint=endpoint,
                    ca_bundle=ca_bundle,
                    provider=self.id,
                )
            return self._sdk_obj

    async def _client(self, module: str, name: str) -> Any:
        import importlib

        return getattr(importlib.import_module(f"nebius.api.nebius.{module}"), name)(await self._sdk())

    async def _call(
        self,
        module: str,
        client: str,
        method: str,
        request: Any,
        *,
        scope: FailureScope | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        c = await self._client(module, client)
        return await wire.call(
            self.id, getattr(c, method)(request, **wire.kwargs(idempotency_key=idempotency_key)), scope
        )

    async def _region_projects(self) -> dict[str, str]:
        """Region -> the tenant's project new machines go to there (the first active one by name)."""
        return (await self._tenant_projects()).launch

    async def _tenant_projects(self) -> TenantProjects:
        if self._projects is not None:
            return self._projects
        from nebius.api.nebius.iam import v1 as iam
        from nebius.api.nebius.iam import v2 as iam_v2

        profile = await self._call("iam.v1", "ProfileServiceClient", "get", iam.GetProfileRequest())
        account = profile.service_account_profile
        if profile.which_field_in_oneof("profile") != "service_account_profile":
            raise InvalidRequest(f"{self.id}: the credentials are not a service account's")
        self._account = account.info.metadata.id
        # Projects through iam.v2: v1's ProjectService is deprecated, supported until 2026-12-16
        # (its proto's service option, as the SDK ships it; fakeclouds/nebius_api.py).
        home = await self._call(
            "iam.v2",
            "ProjectServiceClient",
            "get",
            iam_v2.GetProjectRequest(id=account.info.metadata.parent_id),
        )
        tenant, token = home.metadata.parent_id, ""
        found = TenantProjects()
        while True:
            page = await self._call(
                "iam.v2",
                "ProjectServiceClient",
                "list",
                iam_v2.ListProjectsRequest(parent_id=tenant, page_size=PAGE, page_token=token),
            )
            for p in sorted(page.items, key=lambda p: p.metadata.name):
                found.add(p.metadata.id, p.metadata.name, p.spec.region, p.status.project_state.name)
            token = page.next_page_token
            if not token:
                break
        self._projects = found
        return found

    def _name(self, key: str) -> str:
        return naming.owned_name(self.installation_id, key, NAME_MAX, what="a Nebius instance name")

    def _ref(self, inst: Any, region: str, key: str | None = None) -> InstanceRef:
        created = inst.metadata.created_at
        return InstanceRef(
            provider=self.id,
            instance_id=inst.metadata.id,
            key=key or inst.metadata.labels.get(KEY_LABEL, ""),
            region=region,
            created_at=created if created and created.year > 1970 else None,
        )

    def _ours(self, inst: Any, key: str | None = None) -> bool:
        labels = inst.metadata.labels
        return labels.get(OWNER_LABEL) == self.installation_id and (
            key is None or labels.get(KEY_LABEL) == key
        )

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        projects = await self._tenant_projects()
        regions = ", ".join(sorted(projects.launch)) or "none"
        unused = f"; not used for new machines: {', '.join(projects.unused)}" if projects.unused else ""
        return f"Nebius service account {self._account} (projects in {regions}{unused})"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        from nebius.api.nebius.compute import v1 as compute

        projects = await self._region_projects()
        wanted = {r: p for r, p in projects.items() if not query.region or r == query.region}

        async def region_offers(region: str, project: str) -> list[Offer]:
            page = await self._call(
                "compute.v1",
                "PlatformServiceClient",
                "list",
                compute.ListPlatformsRequest(parent_id=project, page_size=PAGE),
            )
            shapes = instance_offers(self.id, region, list(page.items))
            priced = await all_of(*(self._price(project, o) for o in shapes))
            return [o for o in priced if o is not None]

        found = await all_of(*(region_offers(r, p) for r, p in sorted(wanted.items())))
        return rank_offers([o for offers in found for o in offers], query)

    async def _price(self, project: str, offer: Offer) -> Offer | None:
        """The offer priced by Nebius's calculator (hourly, USD); None when it will not price it."""
        from nebius.api.nebius.billing import v1alpha1 as billing
        from nebius.api.nebius.compute import v1 as compute

        platform, _, preset = offer.instance_type.partition(".")
        spec = compute.InstanceSpec(
            resources=compute.ResourcesSpec(platform=platform, preset=preset),
            preemptible=_preemptible() if offer.spot else None,
        )
        request = billing.EstimateRequest(
            resource_spec=billing.ResourceSpec(
                compute_instance_spec=compute.CreateInstanceRequest(
                    metadata=_metadata(project, "estimate"), spec=spec
                )
            )
        )
        try:
            answer = await self._call("billing.v1alpha1", "CalculatorServiceClient", "estimate", request)
            total = answer.hourly_cost.general.total
            return offer.model_copy(update={"price_per_hour": round(float(total.cost), 4)})
        except InvalidRequest:
            return None

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        projects = await self._region_projects()
        project = projects.get(offer.region)
        if project is None:
            raise InvalidRequest(f"{self.id}: no project of this tenant is in region {offer.region}")
        scope = FailureScope(provider=self.id, region=offer.region, instance_type=offer.instance_type)
        name = self._name(spec.key)
        existing = await self._by_name(project, name)
        if existing is not None:
            return self._adopt(existing, spec.key, offer)
        request = await self._create_request(project, name, offer, spec)
        token = str(
            uuid.uuid5(
                _REQUEST_NS,
                f"{self.installation_id}/{spec.key}/{offer.region}/{offer.instance_type}/{offer.spot}",
            )
        )
        try:
            with launch_request():
                await launch_leaving()
                op = await self._call(
                    "compute.v1",
                    "InstanceServiceClient",
                    "create",
                    request,
                    scope=scope,
                    idempotency_key=token,
                )
        except InvalidRequest as exc:
            if "ALREADY_EXISTS" not in exc.message:
                raise
            taken = await self._by_name(project, name)  # raced with another try of this create
            if taken is None:
                raise
            return self._adopt(taken, spec.key, offer)
        ref = InstanceRef(provider=self.id, instance_id=op.resource_id, key=spec.key, region=offer.region)
        try:
            await self._placed(op, ref, scope)
        except (CapacityError, QuotaError):
            # Not placed: an instance left in ERROR would hold the name (the next offer in this
            # project would find and adopt it), so it goes before the refusal is reported.
            await self.terminate(ref)
            raise
        return ref

    async def _placed(self, op: Any, ref: InstanceRef, scope: FailureScope) -> None:
        """Poll the create's operation until it finished (a failure raises its typed error), or the
        instance is past CREATING (placed: it boots), or CREATE_WAIT_S have passed."""
        deadline = time.monotonic() + CREATE_WAIT_S
        while True:
            if await wire.poll(self.id, op, scope):
                return
            status = await self.get(ref)
            if status is not None and status.detail != "CREATING":
                return
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(wire.OP_POLL_S, left))

    def _adopt(self, inst: Any, key: str, offer: Offer) -> InstanceRef:
        if not self._ours(inst, key):
            raise InvalidRequest(
                f"{self.id}: an instance named {inst.metadata.name} exists and is not ours under this key"
            )
        return self._ref(inst, offer.region, key)

    async def _by_name(self, project: str, name: str) -> Any | None:
        from nebius.api.nebius.common import v1 as common

        try:
            return await self._call(
                "compute.v1",
                "InstanceServiceClient",
                "get_by_name",
                common.GetByNameRequest(parent_id=project, name=name),
            )
        except InvalidRequest as exc:
            if "NOT_FOUND" in exc.message:
                return None
            raise

    async def _create_request(self, project: str, name: str, offer: Offer, spec: LaunchSpec) -> Any:
        from nebius.api.nebius.compute import v1 as compute
        from nebius.api.nebius.vpc import v1 as vpc

        subnets = await self._call(
            "vpc.v1", "SubnetServiceClient", "list", vpc.ListSubnetsRequest(parent_id=project, page_size=PAGE)
        )
        if not subnets.items:
            raise InvalidRequest(f"{self.id}: project {project} has no subnet for the network interface")
        image = await self._image(spec.image or DEFAULT_IMAGE_FAMILY)
        platform, _, preset = offer.instance_type.partition(".")
        user_data = cloudinit.combine(
            authorized_keys_part(spec.ssh_public_keys),
            cloudinit.K3S_AT_BOOT if spec.k3s else None,
            spec.user_data,
        )
        disk = compute.ManagedDisk(
            name=f"{name}-boot",
            spec=compute.DiskSpec(
                size_gibibytes=BOOT_DISK_GIB,
                type=compute.DiskSpec.DiskType.NETWORK_SSD,
                source_image_id=image,
            ),
        )
        labels = {
            OWNER_LABEL: self.installation_id,
            KEY_LABEL: spec.key,
            ALLOCATION_LABEL: spec.owner.allocation_id,
        }
        return compute.CreateInstanceRequest(
            metadata=_metadata(project, name, labels),
            spec=compute.InstanceSpec(
                resources=compute.ResourcesSpec(platform=platform, preset=preset),
                boot_disk=compute.AttachedDiskSpec(
                    attach_mode=compute.AttachedDiskSpec.AttachMode.READ_WRITE, managed_disk=disk
                ),
                network_interfaces=[
                    compute.NetworkInterfaceSpec(
                        name="eth0",
                        subnet_id=subnets.items[0].metadata.id,
                        ip_address=compute.IPAddress(),
                        public_ip_address=compute.PublicIPAddress(),
                    )
                ],
                cloud_init_user_data=user_data or "",
                preemptible=_preemptible() if offer.spot else None,
                recovery_policy=compute.InstanceRecoveryPolicy.FAIL if offer.spot else None,
            ),
        )

    async def _image(self, image: str) -> str:
        """An image id: `--image` names one (`computeimage-…`) or a public image family."""
        from nebius.api.nebius.compute import v1 as compute

        if image.startswith("computeimage-"):
            found = await self._call(
                "compute.v1", "ImageServiceClient", "get", compute.GetImageRequest(id=image)
            )
        else:
            found = await self._call(
                "compute.v1",
                "ImageServiceClient",
                "get_latest_by_family",
                compute.GetImageLatestByFamilyRequest(image_family=image),
            )
        return str(found.metadata.id)

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        from nebius.api.nebius.compute import v1 as compute

        try:
            inst = await self._call(
                "compute.v1", "InstanceServiceClient", "get", compute.GetInstanceRequest(id=ref.instance_id)
            )
        except InvalidRequest as exc:
            if "NOT_FOUND" in exc.message:
                return None
            raise
        return self._status(inst, ref)

    def _status(self, inst: Any, ref: InstanceRef) -> InstanceStatus:
        """One instance as Nebius gives it: by id (Get) or in a project's listing (List), the same message."""
        state, detail = state_of(inst)
        host = None
        nics = inst.status.network_interfaces
        if state == InstanceState.RUNNING and nics and nics[0].public_ip_address is not None:
            host = nics[0].public_ip_address.address.split("/")[0] or None
        res = inst.spec.resources
        return InstanceStatus(
            ref=ref,
            state=state,
            host=host,
            ssh_port=22,
            ssh_user=self.capabilities.login_user,
            instance_type=f"{res.platform}.{res.preset}",
            detail=f"{detail} (preempted)" if preempted(inst) else detail,
            preempted=preempted(inst),
        )

    async def terminate(self, ref: InstanceRef) -> None:
        from nebius.api.nebius.compute import v1 as compute

        digest = hashlib.sha256(f"delete/{ref.instance_id}".encode()).hexdigest()[:32]
        try:
            op = await self._call(
                "compute.v1",
                "InstanceServiceClient",
                "delete",
                compute.DeleteInstanceRequest(id=ref.instance_id),
                idempotency_key=str(uuid.UUID(digest)),
            )
        except InvalidRequest as exc:
            if "NOT_FOUND" not in exc.message:  # gone already: success
                raise
            return
        # Bounded: the caller polls `get` until the instance is gone (and retries a failed delete).
        await wire.settle(self.id, op, DELETE_WAIT_S)

    async def _listed(self) -> list[tuple[Any, InstanceRef]]:
        """Our instances in every project's listing (every page; no label filter, labels read here):
        a parked project's too, so that a machine launched there before is never lost from sight."""
        from nebius.api.nebius.compute import v1 as compute

        out: list[tuple[Any, InstanceRef]] = []
        for region, project in sorted((await self._tenant_projects()).listed):
            token = ""
            while True:
                page = await self._call(
                    "compute.v1",
                    "InstanceServiceClient",
                    "list",
                    compute.ListInstancesRequest(parent_id=project, page_size=PAGE, page_token=token),
                )
                out += [(i, self._ref(i, region)) for i in page.items if self._ours(i)]
                token = page.next_page_token
                if not token:
                    break
        return out

    async def list_owned(self) -> list[InstanceRef]:
        return [ref for _, ref in await self._listed()]

    async def list_machines(self) -> list[InstanceStatus]:
        # list_owned's listing: one List per project (region) and page of PAGE instances.
        return [self._status(inst, ref) for inst, ref in await self._listed()]

    async def aclose(self) -> None:
        sdk, self._sdk_obj = self._sdk_obj, None
        if sdk is not None:
            await sdk.close()  # stops the SDK's own event-loop thread and executor


def _metadata(project: str, name: str, labels: dict[str, str] | None = None) -> Any:
    from nebius.api.nebius.common import v1 as common

    return common.ResourceMetadata(parent_id=project, name=name, labels=labels or {})


def _preemptible() -> Any:
    from nebius.api.nebius.compute import v1 as compute

    return compute.PreemptibleSpec(on_preemption=compute.PreemptibleSpec.PreemptionPolicy.STOP)

"""A simulated Nebius AI Cloud, over gRPC, as the official `nebius` Python SDK (0.6.x) calls it.

Services and messages follow the public protos (github.com/nebius/api: nebius/compute/v1/
instance_service.proto, platform_service.proto, image_service.proto; nebius/vpc/v1/subnet_service.proto;
nebius/iam/v1/token_exchange_service.proto, profile_service.proto, project_service.proto;
nebius/iam/v2/project_service.proto;
nebius/billing/v1alpha1/calculator_service.proto; nebius/common/v1/operation_service.proto). The
message classes are the SDK package's own (nebius.api.nebius...), nothing is vendored or generated.

| service | methods |
|---|---|
| iam.v1.TokenExchangeService | Exchange (RS256 JWT of the service account -> IAM token) |
| iam.v1.ProfileService | Get (the service account) |
| iam.v2.ProjectService | Get, List (one project per region, in one tenant) |
| iam.v1.ProjectService | the same, deprecated: served until its removal date (below) |
| compute.v1.PlatformService | List (platforms of a project's region, with presets) |
| compute.v1.ImageService | Get, GetLatestByFamily (public images) |
| vpc.v1.SubnetService | List (the project's default subnet) |
| compute.v1.InstanceService | Get, GetByName, List (paged), Create, Delete |
| common.v1.OperationService | Get |
| billing.v1alpha1.CalculatorService | Estimate (hourly cost of a CreateInstanceRequest) |

iam.v1.ProjectService is deprecated in the protos the SDK ships (nebius 0.6.29,
nebius/iam/v1/project_service.proto's service option: "Project service v1 API is deprecated. Please
use the v2 API instead. All projects remain accessible through the v2 API.", supported until
2026-12-16). A simulation started on or before that date serves it; one started after does not, and
gRPC answers its methods UNIMPLEMENTED, as for any service a server lacks.

Fault ops: `create`, `get`, `list`, `terminate`, `offers` (platforms and the calculator), `auth`.

Preemption (`admin.preempt`, the `preempt` fault): a preemptible instance (`spec.preemptible`,
on_preemption STOP: "Compute stops the VM without deleting or restarting it", instance.proto) is
STOPPED until deleted, its compute no longer billing (fakeclouds/preemption.py). No notice is shown:
Nebius documents none in its API.
Conventions (auth, errors, operations, idempotency): fakeclouds/nebius_grpc.py.

Firewall: Nebius filters traffic with VPC security groups (vpc.v1 SecurityGroupService and
SecurityRuleService; a NIC's `security_groups`, the network's default group when none is named). Those
services are not simulated: every instance is on its network's default group, taken here to allow all
traffic (as the adapter relies on: [unconfirmed] what the real default group admits), so `ingress`
answers every TCP port from anywhere. A create that names security groups on a NIC is refused rather
than silently left unfiltered.
"""

from __future__ import annotations

import secrets
from datetime import UTC, date, datetime
from typing import Any

import grpc
from fastapi import APIRouter

from fakeclouds import cloudinit, k3s, preemption
from fakeclouds import nebius_catalog as cat
from fakeclouds.engine import Engine, Machine
from fakeclouds.errors import CloudError, Invalid, NoCapacity, NotFound
from fakeclouds.facade import Facade, IngressRule, NameRule
from fakeclouds.faults import CallPlan
from fakeclouds.grpc_call import metadata_value
from fakeclouds.grpc_host import service, unary
from fakeclouds.nebius_auth import Iam, credentials
from fakeclouds.nebius_grpc import IDEMPOTENCY_KEY, NebiusCaller, Operations, timestamp

NAME = "nebius"
LOGIN_USER = "ubuntu"
CLOUD_INIT_MAX = 32768  # InstanceSpec.cloud_init_user_data limit (instance.proto)
PAGE_MAX = 1000
V1_PROJECTS_LAST_DAY = date(2026, 12, 16)  # iam.v1.ProjectService's "supported until" (module docstring)
_STATES = {"pending": "STARTING", "running": "RUNNING", "terminating": "DELETING", "error": "ERROR"}
_CALLERS: dict[int, NebiusCaller] = {}  # id(engine) -> its caller: what tests read the calls from


def calls_seen(engine: Engine) -> set[str]:
    """ "Service/Method" of every call this engine's Nebius facade served (the remote-call pin)."""
    caller = _CALLERS.get(id(engine))
    return set(caller.seen) if caller else set()


def machine_id() -> str:
    return f"computeinstance-e00{secrets.token_hex(10)}"


def _page(items: list[Any], size: int, token: str) -> tuple[list[Any], str]:
    if token and not token.isdigit():
        raise Invalid("page_token is invalid")
    start, size = int(token or 0), min(size or 100, PAGE_MAX)
    end = start + size
    return items[start:end], (str(end) if end < len(items) else "")


def v1_projects_served(today: date | None = None) -> bool:
    """Does a simulation started `today` (default: the real date) serve iam.v1.ProjectService? Not
    after its last supported day (asked once, when the services are built)."""
    return (today or datetime.now(UTC).date()) <= V1_PROJECTS_LAST_DAY


def _projects_page(request: Any) -> tuple[list[cat.Project], str]:
    """A page of the tenant's projects, for either version's List (the same request fields)."""
    if request.parent_id != cat.TENANT:
        raise NotFound(f"tenant {request.parent_id!r} not found or not accessible")
    return _page(list(cat.PROJECTS), request.page_size, request.page_token)


def _project(project_id: str) -> cat.Project:
    found = cat.project(project_id)
    if found is None:
        raise NotFound(f"project {project_id!r} not found or not accessible")
    return found


def instance_message(m: Machine) -> Any:
    from nebius.api.nebius.common import v1 as common
    from nebius.api.nebius.compute import v1 as compute

    x = m.extra
    states: Any = compute.InstanceStatus.InstanceState  # a generated IntEnum (mypy sees a type alias)
    # A preemptible VM Nebius preempted: "on_preemption ... STOP: Compute stops the VM without
    # deleting or restarting it" (nebius/api compute/v1 instance.proto, PreemptibleSpec): STOPPED,
    # until deleted; its compute no longer bills (disks, which would, are not modelled).
    state = states["STOPPED" if preemption.reclaimed(m) else _STATES.get(m.status, "ERROR")]
    nics = []
    if m.status == "running" and m.address:
        nics = [
            compute.NetworkInterfaceStatus(
                index=0,
                name="eth0",
                ip_address=compute.IPAddressStatus(address="10.0.0.5/32"),
                public_ip_address=compute.PublicIPAddressStatus(address=f"{m.address}/32"),
            )
        ]
    spec = compute.InstanceSpec(
        resources=compute.ResourcesSpec(platform=x.get("platform", ""), preset=x.get("preset", "")),
        cloud_init_user_data=m.user_data or "",
        network_interfaces=[
            compute.NetworkInterfaceSpec(
                name="eth0",
                subnet_id=x.get("subnet_id", ""),
                ip_address=compute.IPAddress(),
                public_ip_address=compute.PublicIPAddress(),
            )
        ],
        preemptible=compute.PreemptibleSpec(on_preemption=compute.PreemptibleSpec.PreemptionPolicy.STOP)
        if m.spot
        else None,
    )
    return compute.Instance(
        metadata=common.ResourceMetadata(
            id=m.id,
            parent_id=x.get("project", ""),
            name=m.name or "",
            labels=dict(m.labels),
            created_at=timestamp(m.created_at),
            resource_version=1,
        ),
        spec=spec,
        status=compute.InstanceStatus(
            state=state, network_interfaces=nics, reconciling=m.status == "pending"
        ),
    )


def _create_args(request: Any) -> dict[str, Any]:
    """The engine's create arguments from a CreateInstanceRequest, refused as Nebius refuses them."""
    md, spec = request.metadata, request.spec
    project = _project(md.parent_id)
    platform = cat.platform(spec.resources.platform)
    if platform is None or project.region not in platform.regions:
        raise Invalid(f"platform {spec.resources.platform!r} is not available in {project.region}")
    preset = spec.resources.preset
    if preset not in {cat.preset_name(*p) for p in platform.presets}:
        raise Invalid(f"preset {preset!r} is not a preset of platform {platform.name}")
    disk = spec.boot_disk
    if disk.which_field_in_oneof("type") != "managed_disk":
        raise Invalid("spec.boot_disk: a managed_disk (or existing_disk) is required")
    source = disk.managed_disk.spec
    which = source.which_field_in_oneof("source")
    if which == "source_image_id" and source.source_image_id not in cat.IMAGE_FAMILIES.values():
        raise NotFound(f"image {source.source_image_id!r} not found")
    if which == "source_image_family" and source.source_image_family.image_family not in cat.IMAGE_FAMILIES:
        raise NotFound(f"image family {source.source_image_family.image_family!r} not found")
    if which not in ("source_image_id", "source_image_family"):
        raise Invalid("spec.boot_disk.managed_disk.spec: a source image is required")
    nics = list(spec.network_interfaces)
    if not 1 <= len(nics) <= 8:
        raise Invalid("spec.network_interfaces: between 1 and 8 are required")
    if nics[0].subnet_id != project.subnet_id:
        raise NotFound(f"subnet {nics[0].subnet_id!r} not found in {project.id}")
    user_data = spec.cloud_init_user_data or None
    if user_data and len(user_data) > CLOUD_INIT_MAX:
        raise Invalid(f"spec.cloud_init_user_data: at most {CLOUD_INIT_MAX} characters")
    spot = spec.HasField("preemptible")
    if spot and not platform.preemptible:
        raise Invalid(f"platform {platform.name} does not allow preemptible instances")
    try:
        keys = cloudinit.parse(user_data).authorized_keys
    except cloudinit.UserDataError as exc:
        raise Invalid(f"spec.cloud_init_user_data: {exc}") from None
    if any(len(nic.security_groups) for nic in nics):
        raise Invalid("simulation: security groups are not modelled (only the network's default group)")
    public = nics[0].HasField("public_ip_address")
    if not public:
        raise Invalid("simulation: an instance without a public IP cannot be reached (add public_ip_address)")
    return {
        "instance_type": cat.type_name(platform.name, preset),
        "region": project.region,
        "public_keys": keys,
        "name": md.name or None,
        "spot": spot,
        "labels": dict(md.labels),
        "user_data": user_data,
        "extra": {
            "platform": platform.name,
            "preset": preset,
            "project": project.id,
            "subnet_id": nics[0].subnet_id,
        },
    }


def ingress(_engine: Engine, _m: Machine) -> list[IngressRule]:
    """What reaches an instance: its NIC is on the network's default security group (the only one the
    simulation has), which lets everything in: every TCP port, from anywhere."""
    return [(1, 65535, "0.0.0.0/0")]


def _hourly(request: Any) -> float:
    spec = request.resource_spec.compute_instance_spec
    if request.resource_spec.which_field_in_oneof("resource_spec") != "compute_instance_spec":
        raise Invalid("resource_spec: only compute_instance_spec is estimated here")
    project = cat.project(spec.metadata.parent_id)
    region = project.region if project else cat.PROJECTS[0].region
    itype = next(
        (
            t
            for t in cat.INSTANCE_TYPES
            if t.name == cat.type_name(spec.spec.resources.platform, spec.spec.resources.preset)
        ),
        None,
    )
    if itype is None or region not in itype.prices:
        raise Invalid("resource_spec: unknown platform/preset in this region")
    price = itype.prices[region]
    if spec.spec.HasField("preemptible"):
        if not itype.spot_factor:
            raise Invalid("platform does not allow preemptible instances")
        price = round(price * itype.spot_factor, 4)
    return price


def build_services(engine: Engine, token: str) -> list[Any]:
    from nebius.api.nebius.billing import v1alpha1 as billing
    from nebius.api.nebius.common import v1 as common
    from nebius.api.nebius.compute import v1 as compute
    from nebius.api.nebius.iam import v1 as iam_api
    from nebius.api.nebius.iam import v2 as iam_v2
    from nebius.api.nebius.vpc import v1 as vpc

    iam = Iam(token)
    caller = _CALLERS[id(engine)] = NebiusCaller(engine, NAME, iam)
    ops = Operations(engine, NAME)

    def placement_failed(context: Any) -> Any:
        """A Create that Nebius admits and then cannot place (no capacity) answers an operation that
        ends in the refusal, with nothing made; other refusals are the call's own."""

        def refused(exc: CloudError) -> Any:
            if not isinstance(exc, NoCapacity):
                return None
            op = ops.record("create", machine_id(), caller.authenticate(context), None, refusal=exc)
            return ops.message(op, "create instance")

        return refused

    def handler(svc: str, method: str, op: str, effect: Any, *, auth: bool = True, check: Any = None) -> Any:
        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
            return await caller.run(
                context,
                f"{svc}/{method}",
                lambda plan: effect(request, context, plan),
                op=op,
                auth=auth,
                parse=(lambda: check(request)) if check else None,
                refused=placement_failed(context) if method == "Create" else None,
            )

        return handle

    def exchange(request: Any, context: Any, _: CallPlan) -> Any:
        access, lifetime = iam.exchange(
            request.subject_token,
            grant_type=request.grant_type,
            subject_token_type=request.subject_token_type,
        )
        return iam_api.CreateTokenResponse(
            access_token=access,
            issued_token_type=request.requested_token_type,
            token_type="Bearer",
            expires_in=lifetime,
        )

    def profile(request: Any, context: Any, _: CallPlan) -> Any:
        info = iam_api.ServiceAccount(
            metadata=common.ResourceMetadata(id=iam.account, parent_id=cat.PROJECTS[0].id, name="gpuprov")
        )
        return iam_api.GetProfileResponse(service_account_profile=iam_api.ServiceAccountProfile(info=info))

    def container(p: cat.Project) -> Any:
        return iam_api.Container(
            metadata=common.ResourceMetadata(id=p.id, parent_id=cat.TENANT, name=p.name),
            spec=iam_api.ContainerSpec(region=p.region),
            status=iam_api.ContainerStatus(region=p.region),
        )

    def get_project(request: Any, context: Any, _: CallPlan) -> Any:
        return container(_project(request.id))

    def list_projects(request: Any, context: Any, _: CallPlan) -> Any:
        items, nxt = _projects_page(request)
        return iam_api.ListProjectsResponse(items=[container(p) for p in items], next_page_token=nxt)

    project_states: Any = iam_v2.ProjectStatus.ProjectState  # a generated IntEnum, by name

    def project_v2(p: cat.Project) -> Any:
        return iam_v2.Project(
            metadata=common.ResourceMetadata(id=p.id, parent_id=cat.TENANT, name=p.name),
            spec=iam_v2.ProjectSpec(region=p.region),
            status=iam_v2.ProjectStatus(project_state=project_states[p.state]),
        )

    def get_project_v2(request: Any, context: Any, _: CallPlan) -> Any:
        return project_v2(_project(request.id))

    def list_projects_v2(request: Any, context: Any, _: CallPlan) -> Any:
        items, nxt = _projects_page(request)
        return iam_v2.ListProjectsResponse(items=[project_v2(p) for p in items], next_page_token=nxt)

    def platform_message(p: cat.Platform) -> Any:
        presets = [
            compute.Preset(
                name=cat.preset_name(*ps),
                resources=compute.PresetResources(vcpu_count=ps[1], memory_gibibytes=ps[2], gpu_count=ps[0]),
            )
            for ps in p.presets
        ]
        return compute.Platform(
            metadata=common.ResourceMetadata(id=f"computeplatform-{p.name}", name=p.name),
            spec=compute.PlatformSpec(
                presets=presets,
                human_readable_name=p.human,
                gpu_memory_gigabytes=round(p.gpu[2] / 1024) if p.gpu else 0,
            ),
            status=compute.PlatformStatus(allowed_for_preemptibles=p.preemptible),
        )

    def list_platforms(request: Any, context: Any, _: CallPlan) -> Any:
        region = _project(request.parent_id).region
        found = [platform_message(p) for p in cat.PLATFORMS if region in p.regions]
        items, nxt = _page(found, request.page_size, request.page_token)
        return compute.ListPlatformsResponse(items=items, next_page_token=nxt)

    def image(family: str) -> Any:
        return compute.Image(
            metadata=common.ResourceMetadata(
                id=cat.IMAGE_FAMILIES[family], parent_id=cat.PUBLIC_IMAGES, name=family
            ),
            spec=compute.ImageSpec(image_family=family, version="20250601"),
            status=compute.ImageStatus(state=compute.ImageStatus.State.READY),
        )

    def latest_image(request: Any, context: Any, _: CallPlan) -> Any:
        if request.image_family not in cat.IMAGE_FAMILIES:
            raise NotFound(f"image family {request.image_family!r} not found")
        return image(request.image_family)

    def get_image(request: Any, context: Any, _: CallPlan) -> Any:
        family = next((f for f, i in cat.IMAGE_FAMILIES.items() if i == request.id), None)
        if family is None:
            raise NotFound(f"image {request.id!r} not found")
        return image(family)

    def list_subnets(request: Any, context: Any, _: CallPlan) -> Any:
        p = _project(request.parent_id)
        subnet = vpc.Subnet(
            metadata=common.ResourceMetadata(
                id=p.subnet_id, parent_id=p.id, name=f"default-subnet-{p.region}"
            ),
            spec=vpc.SubnetSpec(network_id=f"vpcnetwork-{p.region}"),
        )
        return vpc.ListSubnetsResponse(items=[subnet], next_page_token="")

    def owned(m: Machine, project_id: str) -> bool:
        return m.extra.get("project") == project_id

    def get_instance(request: Any, context: Any, _: CallPlan) -> Any:
        return instance_message(preemption.held_one(engine, NAME, request.id) or engine.get(NAME, request.id))

    def get_by_name(request: Any, context: Any, _: CallPlan) -> Any:
        _project(request.parent_id)
        found = [m for m in preemption.visible(engine, NAME)
                 if owned(m, request.parent_id) and m.name == request.name]
        if not found:
            raise NotFound(f"instance {request.name!r} not found in {request.parent_id}")
        return instance_message(found[0])

    def list_instances(request: Any, context: Any, _: CallPlan) -> Any:
        _project(request.parent_id)
        mine = [instance_message(m) for m in preemption.visible(engine, NAME) if owned(m, request.parent_id)]
        items, nxt = _page(mine, request.page_size, request.page_token)
        return compute.ListInstancesResponse(items=items, next_page_token=nxt)

    def create(request: Any, context: Any, plan: CallPlan) -> Any:
        key = metadata_value(context, IDEMPOTENCY_KEY)
        earlier = ops.by_key(key)
        if earlier is not None:  # a retried mutation: the operation its key started
            return ops.message(earlier, "create instance")
        args = _create_args(request)
        (m,) = engine.create(
            NAME,
            **args,
            stuck=plan.stuck_booting,
            die_after_boot=plan.die_after_boot,
            preempt_after=plan.preempt_after,
        )
        return ops.message(ops.record("create", m.id, caller.authenticate(context), key), "create instance")

    def delete(request: Any, context: Any, _: CallPlan) -> Any:
        key = metadata_value(context, IDEMPOTENCY_KEY)
        earlier = ops.by_key(key)
        if earlier is not None:
            return ops.message(earlier, "delete instance")
        held = preemption.held_one(engine, NAME, request.id)  # preempted (STOPPED): deleting it is all
        if held is not None:
            preemption.release(engine, held)
        m = held or engine.terminate(NAME, request.id)
        return ops.message(ops.record("delete", m.id, caller.authenticate(context), key), "delete instance")

    def get_operation(request: Any, context: Any, _: CallPlan) -> Any:
        op = ops.get(request.id)
        return ops.message(op, f"{op['kind']} instance")

    def estimate(request: Any, context: Any, _: CallPlan) -> Any:
        cost = billing.CostBreakdown(cost=f"{_hourly(request):.4f}", cost_rounded=f"{_hourly(request):.2f}")
        hourly = billing.ResourceGroupCost(general=billing.GeneralTotalCost(total=cost))
        monthly = billing.ResourceGroupCost(
            general=billing.GeneralTotalCost(
                total=billing.CostBreakdown(
                    cost=f"{_hourly(request) * 720:.4f}", cost_rounded=f"{_hourly(request) * 720:.2f}"
                )
            )
        )
        return billing.EstimateResponse(hourly_cost=hourly, monthly_cost=monthly)

    def svc(name: str, methods: dict[str, tuple[Any, Any, Any, str]], auth: bool = True) -> Any:
        return service(
            name,
            {
                m: unary(handler(name, m, op, fn, auth=auth), req, res)
                for m, (fn, req, res, op) in methods.items()
            },
        )

    inst = "nebius.compute.v1.InstanceService"
    return [
        svc(
            "nebius.iam.v1.TokenExchangeService",
            {"Exchange": (exchange, iam_api.ExchangeTokenRequest, iam_api.CreateTokenResponse, "auth")},
            auth=False,
        ),
        svc(
            "nebius.iam.v1.ProfileService",
            {"Get": (profile, iam_api.GetProfileRequest, iam_api.GetProfileResponse, "auth")},
        ),
        svc(
            "nebius.iam.v2.ProjectService",
            {
                "Get": (get_project_v2, iam_v2.GetProjectRequest, iam_v2.Project, "auth"),
                "List": (list_projects_v2, iam_v2.ListProjectsRequest, iam_v2.ListProjectsResponse, "auth"),
            },
        ),
        *([svc(
            "nebius.iam.v1.ProjectService",
            {
                "Get": (get_project, iam_api.GetProjectRequest, iam_api.Container, "auth"),
                "List": (list_projects, iam_api.ListProjectsRequest, iam_api.ListProjectsResponse, "auth"),
            },
        )] if v1_projects_served() else []),
        svc(
            "nebius.compute.v1.PlatformService",
            {"List": (list_platforms, compute.ListPlatformsRequest, compute.ListPlatformsResponse, "offers")},
        ),
        svc(
            "nebius.compute.v1.ImageService",
            {
                "Get": (get_image, compute.GetImageRequest, compute.Image, "get"),
                "GetLatestByFamily": (
                    latest_image,
                    compute.GetImageLatestByFamilyRequest,
                    compute.Image,
                    "get",
                ),
            },
        ),
        svc(
            "nebius.vpc.v1.SubnetService",
            {"List": (list_subnets, vpc.ListSubnetsRequest, vpc.ListSubnetsResponse, "list")},
        ),
        svc(
            inst,
            {
                "Get": (get_instance, compute.GetInstanceRequest, compute.Instance, "get"),
                "GetByName": (get_by_name, common.GetByNameRequest, compute.Instance, "get"),
                "List": (list_instances, compute.ListInstancesRequest, compute.ListInstancesResponse, "list"),
                "Create": (create, compute.CreateInstanceRequest, common.Operation, "create"),
                "Delete": (delete, compute.DeleteInstanceRequest, common.Operation, "terminate"),
            },
        ),
        svc(
            "nebius.common.v1.OperationService",
            {"Get": (get_operation, common.GetOperationRequest, common.Operation, "get")},
        ),
        svc(
            "nebius.billing.v1alpha1.CalculatorService",
            {"Estimate": (estimate, billing.EstimateRequest, billing.EstimateResponse, "offers")},
        ),
    ]


FACADE = Facade(
    name=NAME,
    prefix="/nebius",
    display_name="Nebius AI Cloud (simulated)",
    build_router=lambda engine, token: APIRouter(),  # gRPC only
    credentials=credentials,
    login_user=LOGIN_USER,
    regions=cat.REGIONS,
    instance_types=cat.INSTANCE_TYPES,
    # Names are unique within a project (= a region here); the proto allows up to 1024 bytes.
    names=NameRule(required=False, unique=True, per_region=True, max_length=1024),
    machine_id=machine_id,
    preinstalled={"k3s": k3s.SCRIPT},
    ssh_port=22,
    grpc=build_services,
    ingress=ingress,
    tls=True,  # served on the gRPC listener's TLS port: the SDK talks TLS, as to api.nebius.cloud
    guest_shutdown="restart",  # a Linux shutdown is a failure to Compute: it restarts it, still charging
)

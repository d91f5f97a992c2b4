"""AWS EC2 on boto3 (PROVIDER-APIS.md "AWS EC2"; research/provider-facts.md B.9).

- Credentials: an access key id and secret access key (the connect form's two fields); `verify`
  is STS GetCallerIdentity. A connection's `endpoint` (and `ca_bundle`) point EC2 and STS at one
  other URL, e.g. the simulation; real AWS needs neither.
- Offers: DescribeInstanceTypes (GPUs, vCPUs, memory) and DescribeInstanceTypeOfferings (which zone
  sells which type) per region, on-demand prices from the dated table in `aws_prices.py` (the regions
  it covers are the regions offered), spot prices from DescribeSpotPriceHistory. One offer per zone,
  so a capacity failure in one zone fails over to the next.
- Idempotent create: the key is the RunInstances `ClientToken` (EC2 returns the original launch for
  a repeat) AND a tag lookup before the launch. Ownership and key are tags on everything we make.
- Side resource: one security group per machine, tagged like the machine: SSH and the requested
  ports from anywhere, the Kubernetes API port (6443) only from `LaunchSpec.k8s_api_from` (not at
  all when that is empty). A retried create adds only the (port, source) rules the group lacks.
  terminate removes it once the instance is terminated; until then `get` reports `terminating`.
- Spot: an interruption reads `preempted` (StateReason `Server.SpotInstanceTermination`) and, during
  EC2's two-minute notice, `notice` (the Spot request's status): providers/aws_spot.py.
- botocore retries nothing (`total_max_attempts=1`): Temporal owns retries, and
  InsufficientInstanceCapacity (HTTP 500) is not retried inside one activity.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import re
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import yaml
from pydantic import SecretStr

from providers import aws_spot, cloudinit
from providers.all_of import all_of
from providers.aws_prices import ON_DEMAND, on_demand_price
from providers.base import (
    K8S_API_PORT,
    BootLease,
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
    rank_offers,
)
from providers.cloudtime import created_at
from providers.credentials import Credentials, field
from providers.gpus import normalize_gpu
from providers.listing import Listing
from providers.rest import ErrorKind
from providers.sdk import SdkCloudProvider, SdkError

REGIONS = sorted(ON_DEMAND)
TAG_INSTALLATION = "gpuprov-installation"
TAG_KEY = "gpuprov-key"
TAG_ALLOCATION = "gpuprov-allocation"
USER_DATA_MAX = 16 * 1024
# The default image: AWS's Deep Learning Base AMI carries the NVIDIA driver; login user `ubuntu`.
DEFAULT_IMAGE_OWNER = "amazon"
DEFAULT_IMAGE_NAME = "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04) *"
TERMINATE_WAIT_S = 5.0  # terminate waits this long for the instance to end before it removes the group
_ALIVE = ["pending", "running", "stopping", "stopped", "shutting-down"]
_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8}(?:[0-9a-f]{9})?$")
_AMI_ID = re.compile(r"^ami-[0-9a-f]{8}(?:[0-9a-f]{9})?$")
_GONE = ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed")
ANYWHERE = "0.0.0.0/0"

_CODES: dict[str, ErrorKind] = {
    "InsufficientInstanceCapacity": "capacity",
    "InsufficientHostCapacity": "capacity",
    "InsufficientReservedInstanceCapacity": "capacity",
    "InsufficientCapacity": "capacity",
    "Unsupported": "capacity",  # the type is not offered in that zone: try the next one
    "SpotMaxPriceTooLow": "capacity",
    "VcpuLimitExceeded": "quota",
    "InstanceLimitExceeded": "quota",
    "MaxSpotInstanceCountExceeded": "quota",
    "SecurityGroupLimitExceeded": "quota",
    "RulesPerSecurityGroupLimitExceeded": "quota",
    "RequestLimitExceeded": "rate_limit",
    "Throttling": "rate_limit",
    "ThrottlingException": "rate_limit",
    "AuthFailure": "auth",
    "UnauthorizedOperation": "auth",
    "InvalidClientTokenId": "auth",
    "SignatureDoesNotMatch": "auth",
    "IncompleteSignature": "auth",
    "MissingAuthenticationToken": "auth",
    "AccessDenied": "auth",
    "ExpiredToken": "auth",
    "RequestExpired": "auth",  # the clock is off by more than 15 minutes: retrying cannot help
    "OptInRequired": "auth",
    "PendingVerification": "auth",
    "Blocked": "auth",
    "InternalError": "transient",
    "InternalFailure": "transient",
    "ServiceUnavailable": "transient",
    "Unavailable": "transient",
}

_STATES = {
    "pending": InstanceState.PENDING,
    "running": InstanceState.RUNNING,
    "stopping": InstanceState.STOPPING,
    "stopped": InstanceState.STOPPED,
    "shutting-down": InstanceState.TERMINATING,
    "terminated": InstanceState.TERMINATED,
}


class AwsCredentials(Credentials):
    access_key_id: str = field("Access Key ID", min_length=16, max_length=128, pattern=r"^[A-Z0-9]+$")
    secret_access_key: SecretStr = field("Secret Access Key", "secret", min_length=1, max_length=128)


@functools.cache
def _service_models() -> Any:
    """One botocore data loader for the process: it keeps the service models it has parsed. A
    boto3 session of its own (each adapter has one: its credentials) would parse EC2's model, some
    MB of JSON, again: about 0.25 s of CPU per adapter, against 0.025 s with this loader."""
    import botocore.loaders

    return botocore.loaders.create_loader()


def user_data(public_keys: list[str], extra: str | None, *, k3s: bool = False,
              lease: BootLease | None = None) -> str:
    """cloud-init user data: every key authorized for the image's login user, k3s at boot when
    asked, then the caller's own user data, then the lease's timer (a MIME multipart when there is
    more than the keys), as cloud-init on Ubuntu AMIs reads it."""
    # Dumped, never formatted: each key stays one YAML string whatever it holds.
    keys = "#cloud-config\n" + yaml.safe_dump({"ssh_authorized_keys": [k.strip() for k in public_keys]},
                                              default_flow_style=False, width=1 << 20)
    return cloudinit.combine(keys, *cloudinit.boot_parts(extra, k3s=k3s, lease=lease)) or keys


def _opened(rules: list[dict[str, Any]]) -> set[tuple[int, str]]:
    """(port, source CIDR) of a security group's single-port TCP rules, as DescribeSecurityGroups
    lists its `IpPermissions`."""
    return {(int(r["FromPort"]), str(x.get("CidrIp") or x.get("CidrIpv6")))
            for r in rules if r.get("IpProtocol") == "tcp" and r.get("FromPort") == r.get("ToPort")
            for x in [*(r.get("IpRanges") or []), *(r.get("Ipv6Ranges") or [])]}


def _permissions(rules: list[tuple[int, str]]) -> list[dict[str, Any]]:
    """AuthorizeSecurityGroupIngress's `IpPermissions` for (port, source CIDR) pairs: one per port."""
    out: dict[int, dict[str, Any]] = {}
    for port, cidr in rules:
        perm = out.setdefault(port, {"IpProtocol": "tcp", "FromPort": port, "ToPort": port})
        what = "gpuprov k8s api" if port == K8S_API_PORT and cidr != ANYWHERE else "gpuprov"
        if ":" in cidr:
            perm.setdefault("Ipv6Ranges", []).append({"CidrIpv6": cidr, "Description": what})
        else:
            perm.setdefault("IpRanges", []).append({"CidrIp": cidr, "Description": what})
    return list(out.values())


def _tags(items: list[dict[str, str]] | None) -> dict[str, str]:
    return {t["Key"]: t.get("Value", "") for t in items or []}


class _Tolerated(ProviderError):
    """An SDK error whose code the caller expects (e.g. NotFound for a gone instance); always caught
    by that caller. A ProviderError, so the SDK base passes it through unmapped."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class AwsProvider(SdkCloudProvider):
    id: ClassVar[str] = "aws"
    credentials_model: ClassVar[type[AwsCredentials]] = AwsCredentials
    error_codes: ClassVar[Mapping[str, ErrorKind]] = _CODES
    # EC2 and STS hosts of the regions offered (regional endpoints; STS also has a global one).
    api_hosts: ClassVar[tuple[str, ...]] = ("sts.amazonaws.com", *(f"ec2.{r}.amazonaws.com" for r in REGIONS),
                                            *(f"sts.{r}.amazonaws.com" for r in REGIONS))
    request_timeout_s: ClassVar[float] = 30.0
    listing: ClassVar[Listing] = Listing(
        tagline="Broadest GPU instance selection",
        connect_name="AWS",
        how_to_connect=("In the AWS console open IAM → Users → (a user allowed to run, describe and terminate"
                        " EC2 instances and manage security groups) → Security credentials → Create access "
                        'key ("Application running outside AWS"). Paste the Access Key ID and Secret Access '
                        "Key. GPU instance types need an EC2 vCPU quota above 0 in each region (Service "
                        "Quotas → EC2)."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="AWS EC2",
        k3s="cloud-init",
        k8s_api=True,
        ports=True,
        spot=True,
        custom_image=True,
        image_pattern=_AMI_ID.pattern,
        image_form="aws: --image must be an AMI id (ami-...) of the offer's region",
        login_user="ubuntu",
        side_resources=["security-group"],
        regions=REGIONS,
        region_required=True,
        create_in_flight_s=0.0,  # ClientToken: EC2 itself refuses a second launch under the key
        boot_timeout_s=900.0,  # GPU AMIs boot in a few minutes; 15 is a broken boot
        self_end=SelfEnd(
            method="shutdown",
            how=("shutdown -h now terminates the instance (its bill ends) because gpuprov launches it "
                 "with InstanceInitiatedShutdownBehavior=terminate; without that a guest shutdown only "
                 "stops it"),
            source=("https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/"
                    "Using_ChangingInstanceInitiatedShutdownBehavior.html"),
            command="sudo shutdown -h now",
            boot_timer=True,  # Ubuntu AMIs run cloud-init
        ),
    )

    _session: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[tuple[str, str], Any] = {}
        self._images: dict[str, str] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ plumbing

    def _client(self, service: str, region: str) -> Any:
        """One client per (service, region), made on first use (in the SDK thread pool: it is slow)."""
        with self._lock:
            client = self._clients.get((service, region))
            if client is None:
                import boto3
                import botocore.session
                from botocore.config import Config

                if self._session is None:
                    creds = self.credentials.reveal()
                    core = botocore.session.Session()
                    core.register_component("data_loader", _service_models())
                    self._session = boto3.session.Session(aws_access_key_id=creds["access_key_id"],
                                                          aws_secret_access_key=creds["secret_access_key"],
                                                          botocore_session=core)
                config = Config(retries={"total_max_attempts": 1}, connect_timeout=10,
                                read_timeout=self.request_timeout_s, max_pool_connections=32)
                client = self._session.client(service, region_name=region, endpoint_url=self.options.endpoint,
                                              verify=self.ca_bundle_file(), config=config)
                self._clients[(service, region)] = client
            return client

    def sdk_error(self, exc: Exception) -> SdkError | None:
        from botocore.exceptions import ClientError, NoCredentialsError, ParamValidationError

        if isinstance(exc, ClientError):
            err = exc.response.get("Error") or {}
            meta = exc.response.get("ResponseMetadata") or {}
            return SdkError(str(err.get("Code") or ""), str(err.get("Message") or ""),
                            int(meta.get("HTTPStatusCode") or 400),
                            (meta.get("HTTPHeaders") or {}).get("retry-after"))
        if isinstance(exc, ParamValidationError):
            return SdkError("ParamValidation", str(exc)[:300], 400)
        if isinstance(exc, NoCredentialsError):
            return SdkError("MissingAuthenticationToken", "no credentials", 401)
        return None

    def _invoke(self, service: str, region: str, method: str, tolerate: tuple[str, ...],
                kwargs: dict[str, Any]) -> Any:
        """One SDK call (all pages of it when `kwargs` has `_pages`: the list under that key)."""
        from botocore.exceptions import ClientError

        pages_of = kwargs.pop("_pages", None)
        client = self._client(service, region)
        try:
            if pages_of is None:
                return getattr(client, method)(**kwargs)
            items: list[Any] = []
            while True:
                page = getattr(client, method)(**kwargs)
                items += page.get(pages_of) or []
                token = page.get("NextToken")
                if not token:
                    return items
                kwargs = {**kwargs, "NextToken": token}
        except ClientError as exc:
            code = str((exc.response.get("Error") or {}).get("Code") or "")
            if code in tolerate:
                raise _Tolerated(code) from None
            raise

    async def _ec2(self, region: str, method: str, *, scope: FailureScope | None = None,
                   tolerate: tuple[str, ...] = (), **kwargs: Any) -> Any:
        return await self._sdk(self._invoke, "ec2", region, method, tolerate, kwargs, scope=scope)

    async def _each_region(self, fn: Any) -> list[Any]:
        return await all_of(*(fn(r) for r in REGIONS))

    def _tags_for(self, spec: LaunchSpec, name: str) -> list[dict[str, str]]:
        return [{"Key": "Name", "Value": name}, {"Key": TAG_INSTALLATION, "Value": self.installation_id},
                {"Key": TAG_KEY, "Value": spec.key},
                {"Key": TAG_ALLOCATION, "Value": spec.owner.allocation_id}]

    def _ours(self, key: str | None = None) -> list[dict[str, Any]]:
        filters = [{"Name": f"tag:{TAG_INSTALLATION}", "Values": [self.installation_id]}]
        if key is not None:
            filters.append({"Name": f"tag:{TAG_KEY}", "Values": [key]})
        return filters

    def group_name(self, key: str) -> str:
        return f"gpuprov-{self.installation_id}-{key}"

    # ------------------------------------------------------------------ lookups

    async def _instances(self, region: str, key: str | None = None,
                         states: list[str] | None = None) -> list[dict[str, Any]]:
        filters = [*self._ours(key), {"Name": "instance-state-name", "Values": states or _ALIVE}]
        reservations = await self._ec2(region, "describe_instances", Filters=filters, _pages="Reservations")
        return [i for r in reservations for i in r.get("Instances") or []]

    async def _groups(self, region: str, key: str | None = None) -> list[dict[str, Any]]:
        return list(await self._ec2(region, "describe_security_groups", Filters=self._ours(key),
                                    _pages="SecurityGroups"))

    async def _describe(self, ref: InstanceRef) -> dict[str, Any] | None:
        if not _INSTANCE_ID.match(ref.instance_id):
            return None  # EC2 would answer InvalidInstanceID.Malformed: no such instance
        try:
            resp = await self._ec2(self._region(ref), "describe_instances", InstanceIds=[ref.instance_id],
                                   tolerate=_GONE)
        except _Tolerated:
            return None
        found = [i for r in resp.get("Reservations") or [] for i in r.get("Instances") or []]
        return found[0] if found else None

    def _region(self, ref: InstanceRef) -> str:
        if not ref.region:
            raise InvalidRequest(f"{self.id}: instance {ref.instance_id} has no region")
        return ref.region

    def _ref(self, inst: dict[str, Any], region: str) -> InstanceRef:
        # LaunchTime moves when a stopped instance is started again; gpuprov never stops one.
        return InstanceRef(provider=self.id, instance_id=str(inst["InstanceId"]),
                           key=_tags(inst.get("Tags")).get(TAG_KEY, ""), region=region,
                           created_at=created_at(inst.get("LaunchTime")))

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        ident = await self._sdk(self._invoke, "sts", REGIONS[0], "get_caller_identity", (), {})
        return f"AWS account {ident.get('Account')} ({ident.get('Arn')})"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        if query.region and query.region not in ON_DEMAND:
            return []
        regions = [query.region] if query.region else REGIONS
        found = await all_of(*(self._region_offers(r, query) for r in regions))
        return rank_offers([o for offers in found for o in offers], query)

    async def _region_offers(self, region: str, query: OfferQuery) -> list[Offer]:
        names = sorted(ON_DEMAND[region])
        want_spot = query.spot is not False
        now = dt.datetime.now(dt.UTC)
        types, offerings, history = await all_of(
            self._ec2(region, "describe_instance_types", InstanceTypes=names, _pages="InstanceTypes"),
            self._ec2(region, "describe_instance_type_offerings", LocationType="availability-zone",
                      Filters=[{"Name": "instance-type", "Values": names}], _pages="InstanceTypeOfferings"),
            self._ec2(region, "describe_spot_price_history", InstanceTypes=names,
                      ProductDescriptions=["Linux/UNIX"], StartTime=now, _pages="SpotPriceHistory")
            if want_spot else asyncio.sleep(0, result=[]),
        )
        spot: dict[tuple[str, str], tuple[Any, float]] = {}
        for row in history:  # the newest price per (type, zone)
            where = (str(row["InstanceType"]), str(row["AvailabilityZone"]))
            if where not in spot or row["Timestamp"] > spot[where][0]:
                spot[where] = (row["Timestamp"], float(row["SpotPrice"]))
        info = {str(t["InstanceType"]): t for t in types}
        out: list[Offer] = []
        for row in sorted(offerings, key=lambda r: (str(r["InstanceType"]), str(r["Location"]))):
            name, zone = str(row["InstanceType"]), str(row["Location"])
            spec, price = info.get(name), on_demand_price(region, name)
            if spec is None or price is None or not spec.get("GpuInfo"):
                continue
            base = self._offer(spec, region, zone, price)
            if query.spot is not True:
                out.append(base)
            if want_spot and "spot" in (spec.get("SupportedUsageClasses") or []) and (name, zone) in spot:
                out.append(base.model_copy(update={"spot": True, "price_per_hour": spot[(name, zone)][1]}))
        return out

    def _offer(self, spec: dict[str, Any], region: str, zone: str, price: float) -> Offer:
        gpus = spec["GpuInfo"].get("Gpus") or []
        first = gpus[0] if gpus else {}
        name, _ = normalize_gpu(str(first.get("Name") or ""), str(spec["InstanceType"]))
        memory = (first.get("MemoryInfo") or {}).get("SizeInMiB")
        gpu = GpuSpec(name=name, count=sum(int(g.get("Count") or 0) for g in gpus) or 1,
                      memory_gib=round(memory / 1024, 1) if memory else None)
        return Offer(provider=self.id, instance_type=str(spec["InstanceType"]), gpu=gpu,
                     vcpus=int(spec["VCpuInfo"]["DefaultVCpus"]),
                     memory_gib=round(int(spec["MemoryInfo"]["SizeInMiB"]) / 1024, 1),
                     region=region, zone=zone, price_per_hour=price, spot=False, available=True)

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        data = user_data(spec.ssh_public_keys, spec.user_data, k3s=spec.k3s, lease=spec.lease)
        if len(data.encode()) > USER_DATA_MAX:
            raise InvalidRequest(f"{self.id}: user data and SSH keys exceed EC2's 16 KB of user data")
        region = offer.region
        group = await self._ensure_group(region, spec)
        found = await self._instances(region, spec.key, states=["pending", "running", "stopping", "stopped"])
        if found:
            return self._ref(found[0], region)
        params: dict[str, Any] = {
            "ImageId": spec.image or await self._default_image(region),
            "InstanceType": offer.instance_type,
            "MinCount": 1, "MaxCount": 1,
            "ClientToken": spec.key,  # a repeat returns the original launch instead of a second one
            "SecurityGroupIds": [group],
            "UserData": data,
            "TagSpecifications": [{"ResourceType": kind, "Tags": self._tags_for(spec, f"gpuprov-{spec.key}")}
                                  for kind in ("instance", "volume")],
            "MetadataOptions": {"HttpTokens": "required"},
            # A lease that runs out ends the machine from inside (self_end): a guest shutdown then
            # terminates it, ending its bill, instead of leaving a stopped instance and its volume.
            "InstanceInitiatedShutdownBehavior": "terminate",
        }
        if offer.zone:
            params["Placement"] = {"AvailabilityZone": offer.zone}
        if offer.spot:
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
                "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
        scope = FailureScope(provider=self.id, region=region, zone=offer.zone,
                             instance_type=offer.instance_type)
        try:
            resp = await self._ec2(region, "run_instances", scope=scope, **params)
        except (CapacityError, QuotaError, InvalidRequest) as e:
            # Definitely not launched: drop the group now rather than leave it to the sweep. (A
            # Transient or RateLimited launch may have happened; its retry reuses the group.)
            if not await self._instances(region, spec.key):
                await self._delete_groups(region, spec.key, strict=False)
            if isinstance(e, QuotaError):  # vCPU quotas are per region (and family), not per zone
                raise QuotaError(e.message, FailureScope(provider=self.id, region=region)) from None
            raise
        launched = resp["Instances"][0]
        return InstanceRef(provider=self.id, instance_id=str(launched["InstanceId"]), key=spec.key,
                           region=region, created_at=created_at(launched.get("LaunchTime")))

    async def _ensure_group(self, region: str, spec: LaunchSpec) -> str:
        """The machine's security group: found by name, else made; SSH and the requested ports open
        from anywhere, the Kubernetes API port from `spec.k8s_api_from` only. Rules it has already
        (a retried create) are not asked for again."""
        name = self.group_name(spec.key)
        by_name = [{"Name": "group-name", "Values": [name]}]
        groups = await self._ec2(region, "describe_security_groups", Filters=by_name, _pages="SecurityGroups")
        if groups:
            group_id, rules = str(groups[0]["GroupId"]), groups[0].get("IpPermissions") or []
        else:
            try:
                made = await self._ec2(
                    region, "create_security_group", GroupName=name, tolerate=("InvalidGroup.Duplicate",),
                    Description=f"gpuprov {spec.key}: SSH and requested ports",
                    TagSpecifications=[{"ResourceType": "security-group",
                                        "Tags": self._tags_for(spec, name)}])
                group_id, rules = str(made["GroupId"]), []
            except _Tolerated:  # a concurrent create of this key made it first
                groups = await self._ec2(region, "describe_security_groups", Filters=by_name,
                                         _pages="SecurityGroups")
                group_id, rules = str(groups[0]["GroupId"]), groups[0].get("IpPermissions") or []
        wanted = [(p, ANYWHERE) for p in dict.fromkeys([22, *spec.ports])]
        wanted = list(dict.fromkeys([*wanted, *((K8S_API_PORT, cidr) for cidr in spec.k8s_api_from)]))
        for _ in range(3):  # a concurrent create of this key may add some of them between our calls
            missing = [w for w in wanted if w not in _opened(rules)]
            if not missing:
                break
            try:
                await self._ec2(region, "authorize_security_group_ingress", GroupId=group_id,
                                tolerate=("InvalidPermission.Duplicate",),
                                IpPermissions=_permissions(missing))
                break
            except _Tolerated:  # EC2 adds none of a request with one duplicate: add what is still missing
                groups = await self._ec2(region, "describe_security_groups", Filters=by_name,
                                         _pages="SecurityGroups")
                rules = (groups[0].get("IpPermissions") or []) if groups else []
        return group_id

    async def _default_image(self, region: str) -> str:
        if region not in self._images:
            images = await self._ec2(region, "describe_images", Owners=[DEFAULT_IMAGE_OWNER], Filters=[
                {"Name": "name", "Values": [DEFAULT_IMAGE_NAME]}, {"Name": "state", "Values": ["available"]},
                {"Name": "architecture", "Values": ["x86_64"]}])
            found = sorted(images.get("Images") or [], key=lambda i: str(i.get("CreationDate") or ""))
            if not found:
                raise InvalidRequest(f"{self.id}: no Deep Learning Base AMI in {region}; "
                                     "pass an AMI id as --image")
            self._images[region] = str(found[-1]["ImageId"])
        return self._images[region]

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        inst = await self._describe(ref)
        if inst is None:
            return None
        codes = await aws_spot.notice_codes(self._ec2, self._region(ref), [inst])  # spot: its notice
        status = aws_spot.with_spot(self._status(inst, ref), inst, codes)
        if status.state == InstanceState.TERMINATED and await self._groups(self._region(ref), ref.key):
            # gone only once its security group is too: terminate removes it on its next call
            status = status.model_copy(update={
                "state": InstanceState.TERMINATING,
                "detail": "terminated; its security group is not removed yet"})
        return status

    def _status(self, inst: dict[str, Any], ref: InstanceRef) -> InstanceStatus:
        """One instance as DescribeInstances reports it (by id, or in a filtered listing)."""
        name = str((inst.get("State") or {}).get("Name") or "")
        reason = inst.get("StateReason") or {}
        state = _STATES.get(name, InstanceState.ERROR)
        detail = name
        if name == "stopped" and str(reason.get("Code") or "").startswith("Server."):
            state, detail = InstanceState.ERROR, f"stopped: {reason.get('Message') or reason.get('Code')}"
        return InstanceStatus(
            ref=ref, state=state, host=inst.get("PublicIpAddress") or None, ssh_port=22,
            ssh_user=self.capabilities.login_user, instance_type=inst.get("InstanceType"), detail=detail)

    async def terminate(self, ref: InstanceRef) -> None:
        region = self._region(ref)
        inst = await self._describe(ref)
        if inst is not None and (inst.get("State") or {}).get("Name") not in ("shutting-down", "terminated"):
            try:
                await self._ec2(region, "terminate_instances", InstanceIds=[ref.instance_id], tolerate=_GONE)
            except _Tolerated:
                inst = None
        deadline = time.monotonic() + TERMINATE_WAIT_S
        pause = 0.1
        while inst is not None and (inst.get("State") or {}).get("Name") != "terminated":
            if time.monotonic() >= deadline:
                return  # still shutting down: the next terminate removes the group
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)
            inst = await self._describe(ref)
        if not await self._instances(region, ref.key):
            await self._delete_groups(region, ref.key, strict=False)

    async def _delete_groups(self, region: str, key: str, *, strict: bool) -> None:
        for group in await self._groups(region, key):
            try:
                await self._ec2(region, "delete_security_group", GroupId=group["GroupId"],
                                tolerate=("InvalidGroup.NotFound", "DependencyViolation"))
            except _Tolerated as exc:
                if strict and exc.code == "DependencyViolation":
                    raise Transient(f"{self.id}: security group {group['GroupId']} is still in use "
                                    "(its instance is still shutting down)") from None

    async def list_owned(self) -> list[InstanceRef]:
        async def region_owned(region: str) -> list[InstanceRef]:
            instances, groups = await all_of(self._instances(region), self._groups(region))
            machines = [self._ref(i, region) for i in instances]
            keys = {m.key for m in machines}
            leftovers = [InstanceRef(provider=self.id, instance_id=str(g["GroupId"]), kind="security-group",
                                     key=_tags(g.get("Tags")).get(TAG_KEY, ""), region=region)
                         for g in groups if _tags(g.get("Tags")).get(TAG_KEY) not in keys]
            return machines + leftovers
        return [ref for refs in await self._each_region(region_owned) for ref in refs]

    async def list_machines(self) -> list[InstanceStatus]:
        # list_owned's machine half: one DescribeInstances per region (every page, NextToken), our
        # installation's tag and the live states as its filters. A terminated instance is not listed
        # (gone; `get` tells whether its security group still holds it as terminating).
        async def region_listed(region: str) -> list[InstanceStatus]:
            found = await self._instances(region)
            codes = await aws_spot.notice_codes(self._ec2, region, found)  # a call only if spot runs
            return [aws_spot.with_spot(self._status(i, self._ref(i, region)), i, codes) for i in found]
        return [s for found in await self._each_region(region_listed) for s in found]

    async def find_all(self, key: str) -> list[InstanceRef]:
        async def region_found(region: str) -> list[InstanceRef]:
            return [self._ref(i, region) for i in await self._instances(region, key)]
        return [ref for refs in await self._each_region(region_found) for ref in refs]

    async def find(self, key: str) -> InstanceRef | None:
        found = await self.find_all(key)
        return found[0] if found else None

    async def release(self, key: str) -> None:
        async def region_release(region: str) -> None:
            await self._delete_groups(region, key, strict=True)
        await self._each_region(region_release)

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
        await super().aclose()

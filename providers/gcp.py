"""Google Compute Engine, on the official SDK (google-cloud-compute, its REST transport): the
contract here; the SDK's clients, calls, error codes and operation polling in providers/gcp_client.py
(`ComputeClient`, this adapter's base); regions, prices and GPU shapes in providers/gcp_catalog.py.

Credentials: a project id and a service-account key (JSON); the project id is filled from the key
when left empty. The SDK signs its own JWT with the key (self-signed JWT access) and never calls
the key's token_uri. A connection's `endpoint` becomes `client_options.api_endpoint` of every client.

Identity and idempotency: the instance name is `gpuprov-<installation>-<key>` (shortened with a
hash when longer than 63 characters), unique per zone, and the insert carries a `requestId` derived
from the key and zone, so a retried insert answers the first one's operation; a name already taken
in the zone (409 alreadyExists) is adopted when its labels say it is ours under this key. Labels
`gpuprov-installation` / `gpuprov-key` / `gpuprov-allocation` mark ownership.

Operations: insert/delete answer an Operation. The SDK's own waiting (`ExtendedOperation.result()`)
polls through a separate operations client built without our client_options (it would call the
real endpoint), and raises only when `httpErrorStatusCode` is set, so the adapter polls with its own
Zone/GlobalOperationsClient and reads `error.errors[0].code` itself. Errors map by that code, or by
`errors[0].reason` of an HTTP error (a 403 may be `rateLimitExceeded`), never by exception class.

Spot VMs: a preemption reads `notice` through its 30 s soft off and `preempted` after, from the
`compute.instances.preempted` operations (providers/gcp_preemption.py, also each instance's status).

Side resources: one firewall rule per machine, named like it, targeting the machine's network tag,
allowing tcp/22 and the requested ports from anywhere; and, only when `LaunchSpec.k8s_api_from` is
set, a second one, `<name>-k8s-api` (`k8s_rule_name`), allowing tcp/6443 from those networks only
(a rule's sourceRanges apply to all its ports, so the Kubernetes API cannot share the first rule).
Firewall rules carry no labels in Compute Engine v1, so ownership is in the name prefix and the
description (`gpuprov installation=... key=...`). terminate deletes both once the instance is gone;
release(key) deletes those left without an instance; list_owned reports a rule as a leftover only
when no live instance of ours carries its machine's name.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from typing import Any, ClassVar

from pydantic import SecretStr, field_validator, model_validator

from providers import cloudinit, gcp_preemption
from providers import gcp_catalog as catalog
from providers.all_of import all_of
from providers.base import (
    K8S_API_PORT,
    Capabilities,
    CapacityError,
    FailureScope,
    GpuSpec,
    InstanceRef,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    QuotaError,
    SelfEnd,
    Transient,
    rank_offers,
)
from providers.cloudtime import created_at
from providers.credentials import Credentials, field
from providers.gcp_client import ComputeClient, compute_v1
from providers.gcp_names import instance_name, k8s_rule_name, label_value
from providers.listing import Listing

_PROJECT = re.compile(r"[a-z][a-z0-9-]{4,28}[a-z0-9]")
OWNER_LABEL, KEY_LABEL, ALLOCATION_LABEL = "gpuprov-installation", "gpuprov-key", "gpuprov-allocation"
_DESCRIPTION = re.compile(r"^gpuprov installation=(\S+) key=(\S+)")
# Canonical's Ubuntu 22.04 with the NVIDIA driver, so nvidia-smi works at first boot. The family
# name follows Canonical's published pattern [unconfirmed: check `gcloud compute images list
# --project ubuntu-os-accelerator-images` before relying on it].
DEFAULT_IMAGE = (
    "projects/ubuntu-os-accelerator-images/global/images/family/ubuntu-accelerator-2204-amd64-with-nvidia-550"
)
_IMAGE = re.compile(
    r"(?:https://www\.googleapis\.com/compute/v1/)?projects/[a-z][-a-z0-9]{4,28}[a-z0-9]"
    r"/global/images/(?:family/)?[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
)
BOOT_DISK_GB = 50
INSERT_WAIT_S = 90.0  # an insert's operation; past it the create is in doubt and retried (same requestId)
TERMINATE_WAIT_S = 8.0  # a delete's operation inside terminate (called without heartbeats)
FIREWALL_WAIT_S = 20.0
_REQUEST_NS = uuid.UUID("3c1f7e52-5a4e-4c55-9d49-6a0c2b7f0e11")  # our requestIds' UUIDv5 namespace





def _secret(value: object) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else str(value or "")


def _key_json(text: str) -> dict[str, Any] | None:
    try:
        info = json.loads(text)
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


class GcpCredentials(Credentials):
    """The connect form's GCP fields: project id (optional) and the service-account key file."""

    project_id: str = field(
        "GCP Project ID",
        default="",
        max_length=30,
        validate_default=True,
        help="Filled from the key when left empty",
    )
    service_account_key: SecretStr = field(
        "Service Account Key",
        "file",
        min_length=2,
        max_length=20_000,
        help="The service account's JSON key file",
    )

    @model_validator(mode="before")
    @classmethod
    def _project_from_key(cls, data: Any) -> Any:
        if isinstance(data, dict) and not str(data.get("project_id") or "").strip():
            info = _key_json(_secret(data.get("service_account_key")))
            if info and isinstance(info.get("project_id"), str):
                data = {**data, "project_id": info["project_id"]}
        return data

    @field_validator("project_id")
    @classmethod
    def _project_shape(cls, v: str) -> str:
        if not v:
            raise ValueError("required (the key names no project)")
        if not _PROJECT.fullmatch(v):
            raise ValueError("must be 6-30 characters of [a-z0-9-], starting with a letter")
        return v

    @field_validator("service_account_key")
    @classmethod
    def _key_shape(cls, v: SecretStr) -> SecretStr:
        info = _key_json(v.get_secret_value())
        if info is None:
            raise ValueError("must be the JSON key file of a service account")
        if info.get("type") != "service_account":
            raise ValueError("must be a service-account key (its type is not service_account)")
        missing = [k for k in ("client_email", "private_key", "private_key_id") if not info.get(k)]
        if missing:
            raise ValueError(f"the key lacks {', '.join(missing)}")
        return v

    def key_info(self) -> dict[str, Any]:
        info = _key_json(self.service_account_key.get_secret_value())
        assert info is not None  # validated
        return info


class GcpProvider(ComputeClient):
    id: ClassVar[str] = "gcp"
    credentials_model: ClassVar[type[GcpCredentials]] = GcpCredentials
    api_hosts: ClassVar[tuple[str, ...]] = ("compute.googleapis.com",)
    listing: ClassVar[Listing] = Listing(
        tagline="TPUs & fast networking",
        connect_name="GCP",
        how_to_connect=("In the Google Cloud console open IAM & Admin → Service Accounts → Create service "
                        "account, grant it Compute Admin (roles/compute.admin), then Keys → Add key → Create "
                        "new key → JSON. Upload that file; the project ID is read from it when you leave the "
                        "field empty. The Compute Engine API must be enabled and GPU quota granted in the "
                        "regions you use."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="Google Compute Engine",
        k3s="cloud-init",
        k8s_api=True,
        ports=True,
        spot=True,
        custom_image=True,
        image_pattern=_IMAGE.pattern,
        image_form=("gcp: --image wants an image path, projects/PROJECT/global/images/NAME "
                    "or projects/PROJECT/global/images/family/FAMILY (or its full URL)"),
        login_user="ubuntu",
        side_resources=["firewall-rule"],
        regions=catalog.REGIONS,
        region_required=True,
        create_in_flight_s=0.0,  # requestId + a name unique per zone: a second insert cannot make another
        self_end=SelfEnd(
            method="shutdown",
            how=("shutdown -h now stops the VM (status TERMINATED): its GPU, vCPU and memory billing "
                 "stop, its boot disk keeps billing until the instance is deleted "
                 "(instanceTerminationAction=DELETE covers only preemption and scheduled termination, "
                 "not a guest shutdown)"),
            source="https://cloud.google.com/compute/docs/instances/stop-start-instance",
            command="sudo shutdown -h now",
            boot_timer=True,  # Ubuntu images run cloud-init on the `user-data` metadata
        ),
    )

    def __init__(self, credentials: Any, **kwargs: Any) -> None:
        super().__init__(credentials, **kwargs)
        creds: GcpCredentials = self.credentials  # type: ignore[assignment]
        self.project = creds.project_id
        self._info = creds.key_info()
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._where: dict[str, tuple[str, str]] = {}  # instance id -> (zone, name), learned as we go
        self._spot: set[str] = set()  # instance ids seen as Spot VMs (gcp_preemption.py)
        self._deleted: set[str] = set()  # instance ids this adapter deleted: not preempted

    # ------------------------------------------------------------------ plumbing

    def _name(self, key: str) -> str:
        return instance_name(self.installation_id, key)

    def _request_id(self, key: str, zone: str, after: str = "") -> str:
        return str(uuid.uuid5(_REQUEST_NS, f"{self.project}/{self.installation_id}/{key}/{zone}/{after}"))

    # ------------------------------------------------------------------ refs

    def _ref(self, zone: str, inst: Any) -> InstanceRef:
        self._where[str(inst.id)] = (zone, inst.name)
        return InstanceRef(
            provider=self.id,
            instance_id=str(inst.id),
            key=inst.labels.get(KEY_LABEL, ""),
            region=catalog_region(zone),
            created_at=created_at(getattr(inst, "creation_timestamp", None)),  # RFC 3339, with its offset
        )

    async def _locate(self, ref: InstanceRef) -> tuple[str, Any] | None:
        """(zone, instance) of `ref`, or None when it is gone."""
        where = self._where.get(ref.instance_id)
        if where is not None:
            inst = await self._sdk(self._get_instance, *where)
            if inst is None or str(inst.id) != ref.instance_id:
                return None  # gone (a new machine under the name is another one)
            return where[0], inst
        if not ref.instance_id.isdigit():
            return None
        found = await self._sdk(self._instances, f"id = {ref.instance_id}")
        if not found:
            return None
        self._ref(*found[0])
        return found[0]

    def _owned_filter(self, key: str | None = None) -> str:
        flt = f'(labels.{OWNER_LABEL} = "{label_value(self.installation_id)}")'
        return flt + (f' (labels.{KEY_LABEL} = "{label_value(key)}")' if key else "")

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        project = await self._sdk(self._call, "ProjectsClient", "get", project=self.project)
        return f"Compute Engine project {project.name} as {self._info.get('client_email')}"

    async def offers(self, query: OfferQuery) -> list[Offer]:
        compute = compute_v1()
        families = "|".join(sorted({m.split("-")[0] for r in catalog.HOSTS.values() for m in r}))
        types_req = compute.AggregatedListMachineTypesRequest(
            project=self.project, filter=f'name eq "({families})-.*"'
        )
        accel_req = compute.AggregatedListAcceleratorTypesRequest(project=self.project)
        machine_pager, accel_pager = await all_of(
            self._sdk(lambda: list(self._call("MachineTypesClient", "aggregated_list", request=types_req))),
            self._sdk(
                lambda: list(self._call("AcceleratorTypesClient", "aggregated_list", request=accel_req))
            ),
        )
        accelerators: dict[str, dict[str, int]] = {}  # zone -> accelerator type -> max cards
        for scope, listed in accel_pager:
            zone = scope.rpartition("/")[2]
            accelerators[zone] = {a.name: int(a.maximum_cards_per_instance) for a in listed.accelerator_types}
        out: list[Offer] = []
        for scope, listed in sorted(machine_pager, key=lambda item: item[0]):  # proto maps have no order
            zone = scope.rpartition("/")[2]
            region = catalog_region(zone)
            if (query.region and region != query.region) or region not in catalog.HOSTS:
                continue
            out += self._zone_offers(region, zone, list(listed.machine_types), accelerators.get(zone, {}))
        return rank_offers(out, query)

    def _zone_offers(
        self, region: str, zone: str, machines: list[Any], accelerators: dict[str, int]
    ) -> list[Offer]:
        by_name = {m.name: m for m in machines}
        shapes: list[tuple[str, Any, str, int]] = []  # (instance type, machine, accelerator, count)
        for m in machines:
            for acc in m.accelerators:  # A2/G2: GPUs come with the machine type
                shapes.append((m.name, m, acc.guest_accelerator_type, int(acc.guest_accelerator_count)))
        for accelerator, max_cards in accelerators.items():
            if accelerator not in catalog.N1_ATTACHABLE:
                continue
            for count, host in catalog.N1_HOSTS.items():
                if count <= max_cards and host in by_name:
                    shapes.append(
                        (catalog.combo_type(host, accelerator, count), by_name[host], accelerator, count)
                    )
        offers = []
        for instance_type, machine, accelerator, count in shapes:
            model = catalog.GPU_MODELS.get(accelerator)
            if model is None:
                continue
            gpu = GpuSpec(name=model[0], count=count, memory_gib=model[1])
            for spot in (False, True):
                price = catalog.price(region, machine.name, [(accelerator, count)], spot=spot)
                if price is None:
                    continue
                offers.append(
                    Offer(
                        provider=self.id,
                        instance_type=instance_type,
                        gpu=gpu,
                        vcpus=int(machine.guest_cpus),
                        memory_gib=round(machine.memory_mb / 1024, 2),
                        region=region,
                        zone=zone,
                        price_per_hour=price,
                        spot=spot,
                    )
                )
        return offers

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        if not offer.zone:
            raise InvalidRequest(f"{self.id}: an offer must name its zone")
        zone, name = offer.zone, self._name(spec.key)
        try:
            machine, accelerator, count = catalog.split_type(offer.instance_type)
        except ValueError as exc:
            raise InvalidRequest(f"{self.id}: {exc}") from None
        image = spec.image or DEFAULT_IMAGE  # its form checked with the request (Capabilities.image_pattern)
        scope = FailureScope(
            provider=self.id, region=offer.region, zone=zone, instance_type=offer.instance_type
        )
        await self._ensure_firewall(name, spec)
        body = self._instance(spec, name, zone, machine, accelerator, count, image, offer.spot)
        try:
            return await self._launch(spec.key, zone, name, body, offer.instance_type, scope)
        except (CapacityError, QuotaError, InvalidRequest):
            # Definitely not launched: the firewall rule goes now (the workflow moves on to the next
            # offer under a new key). Transient failures keep it: the insert may have landed.
            if not await self.find_all(spec.key):
                await self._delete_firewall(spec.key)
            raise

    async def _launch(
        self, key: str, zone: str, name: str, body: Any, instance_type: str, scope: FailureScope
    ) -> InstanceRef:
        after = ""
        while True:
            op = await self._sdk(self._insert, zone, body, self._request_id(key, zone, after), scope=scope)
            if op is None:  # the name is taken in this zone: ours from an earlier try, or refused
                return await self._adopt(zone, name, key, instance_type)
            done = await self._wait(op, zone=zone, within=INSERT_WAIT_S)
            if done is None:
                raise Transient(
                    f"{self.id}: insert of {name} still running after {INSERT_WAIT_S:g} s", in_doubt=True
                )
            error = self._op_error(done, scope)
            if error is None:  # made now, or by an earlier try whose requestId this was
                return await self._adopt(zone, name, key, instance_type)
            if not isinstance(error, Transient) or after:
                raise error
            # The requestId now answers this failed operation for good: one more try under a new one
            # (derived from the failed operation, so a retried create derives the same).
            after = done.name

    def _instance(
        self,
        spec: LaunchSpec,
        name: str,
        zone: str,
        machine: str,
        accelerator: str | None,
        count: int,
        image: str,
        spot: bool,
    ) -> Any:
        compute = compute_v1()
        metadata = [
            compute.Items(
                key="ssh-keys",
                value="\n".join(f"{self.capabilities.login_user}:{k.strip()}" for k in spec.ssh_public_keys),
            )
        ]
        # Keys in metadata are ignored where OS Login is on; the instance turns it off for itself
        # (an organisation policy that enforces OS Login still wins: then SSH with these keys fails).
        metadata.append(compute.Items(key="enable-oslogin", value="FALSE"))
        boot = cloudinit.boot_user_data(spec.user_data, k3s=spec.k3s, lease=spec.lease)
        if boot:
            metadata.append(compute.Items(key="user-data", value=boot))  # cloud-init reads it
        scheduling = compute.Scheduling(
            on_host_maintenance="TERMINATE",
            automatic_restart=not spot,
            provisioning_model="SPOT" if spot else "STANDARD",
        )
        if spot:
            scheduling.instance_termination_action = (
                "DELETE"  # a preempted VM goes, it does not linger stopped
            )
        return compute.Instance(
            name=name,
            machine_type=f"zones/{zone}/machineTypes/{machine}",
            guest_accelerators=[
                compute.AcceleratorConfig(
                    accelerator_type=f"zones/{zone}/acceleratorTypes/{accelerator}", accelerator_count=count
                )
            ]
            if accelerator
            else [],
            disks=[
                compute.AttachedDisk(
                    boot=True,
                    auto_delete=True,
                    initialize_params=compute.AttachedDiskInitializeParams(
                        source_image=image, disk_size_gb=BOOT_DISK_GB
                    ),
                )
            ],
            network_interfaces=[
                compute.NetworkInterface(
                    network="global/networks/default",
                    access_configs=[compute.AccessConfig(name="External NAT", type_="ONE_TO_ONE_NAT")],
                )
            ],
            scheduling=scheduling,
            metadata=compute.Metadata(items=metadata),
            tags=compute.Tags(items=[name]),
            labels={
                OWNER_LABEL: label_value(self.installation_id),
                KEY_LABEL: label_value(spec.key),
                ALLOCATION_LABEL: label_value(spec.owner.allocation_id),
            },
            description=f"gpuprov installation={self.installation_id} key={spec.key}",
        )

    async def _adopt(self, zone: str, name: str, key: str, instance_type: str) -> InstanceRef:
        """The instance under `name` in `zone`, if it is ours under `key` and of `instance_type`; a
        name taken otherwise is refused (Compute Engine's answer to a reused name is only 409)."""
        inst = await self._sdk(self._get_instance, zone, name)
        if inst is None:
            raise Transient(f"{self.id}: {name} in {zone} could not be read back", in_doubt=True)
        labels = inst.labels
        if (labels.get(OWNER_LABEL), labels.get(KEY_LABEL)) != (
            label_value(self.installation_id),
            label_value(key),
        ):
            raise InvalidRequest(
                f"{self.id}: an instance named {name} exists in {zone} and is not ours under this key"
            )
        shape = _shape(inst)
        if shape != instance_type and inst.machine_type.rpartition("/")[2] != instance_type:
            raise InvalidRequest(f"{self.id}: {name} exists in {zone} as {shape}, not {instance_type}")
        return self._ref(zone, inst)

    async def _ensure_firewall(self, name: str, spec: LaunchSpec) -> None:
        """The machine's rule (SSH and the requested ports from anywhere) and, when `k8s_api_from` is
        set, its Kubernetes API rule (6443 from those sources only: a rule's sourceRanges cover all
        its ports, so the API port needs a rule of its own). Each is made once: a retry finds it."""
        compute = compute_v1()
        rules = [(name, sorted({22, *spec.ports}), ["0.0.0.0/0"])]
        if spec.k8s_api_from:
            rules.append((k8s_rule_name(name), [K8S_API_PORT], list(dict.fromkeys(spec.k8s_api_from))))
        for rule_name, ports, sources in rules:
            firewall = compute.Firewall(
                name=rule_name,
                network="global/networks/default",
                direction="INGRESS",
                priority=1000,
                source_ranges=sources,
                target_tags=[name],
                allowed=[compute.Allowed(I_p_protocol="tcp", ports=[str(p) for p in ports])],
                description=f"gpuprov installation={self.installation_id} key={spec.key} "
                f"allocation={spec.owner.allocation_id}",
            )
            op = await self._sdk(self._insert_firewall, firewall)
            if op is None:
                continue  # made by an earlier try of this create
            done = await self._wait(op, zone=None, within=FIREWALL_WAIT_S)
            if done is None:
                raise Transient(f"{self.id}: firewall rule {rule_name} still being created", in_doubt=True)
            error = self._op_error(done, FailureScope(provider=self.id))
            if error is not None:
                raise error

    async def _delete_firewall(self, key: str) -> None:
        """The key's firewall rules: the machine's and its Kubernetes API rule (if it has one)."""
        name = self._name(key)
        for rule_name in (name, k8s_rule_name(name)):
            op = await self._sdk(self._delete, "FirewallsClient", firewall=rule_name)
            if op is not None:
                await self._wait(op, zone=None, within=TERMINATE_WAIT_S)

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        found = await self._locate(ref)
        if found is None:  # gone; a Spot VM may have been deleted by its preemption
            return await gcp_preemption.gone(self, ref)
        return (await gcp_preemption.observed(self, [(self._status(found[1], ref), found[1])]))[0]

    def _status(self, inst: Any, ref: InstanceRef) -> InstanceStatus:
        return gcp_preemption.instance_status(inst, ref, self.capabilities.login_user)

    async def terminate(self, ref: InstanceRef) -> None:
        found = await self._locate(ref)
        if found is not None:
            zone, inst = found
            self._deleted.add(ref.instance_id)
            op = await self._sdk(self._delete, "InstancesClient", zone=zone, instance=inst.name)
            if op is not None and await self._wait(op, zone=zone, within=TERMINATE_WAIT_S) is None:
                return  # still going: the firewall goes on a later call, or with release(key)
        # The machine is gone: its firewall rule goes too, unless a twin (another zone) still uses it.
        if not [r for r in await self.find_all(ref.key) if r.instance_id != ref.instance_id]:
            await self._delete_firewall(ref.key)

    async def list_owned(self) -> list[InstanceRef]:
        found = await self._sdk(self._instances, self._owned_filter())
        machines = [self._ref(zone, inst) for zone, inst in found]
        names = {inst.name for _, inst in found}
        names |= {k8s_rule_name(n) for n in names}  # a live machine's rules are not leftovers
        leftovers = []
        for fw in await self._sdk(self._firewalls):
            m = _DESCRIPTION.match(fw.description or "")
            if m is None or m.group(1) != self.installation_id or fw.name in names:
                continue
            leftovers.append(
                InstanceRef(provider=self.id, instance_id=fw.name, key=m.group(2), kind="firewall-rule")
            )
        return machines + leftovers

    async def list_machines(self) -> list[InstanceStatus]:
        # list_owned's machine half: one instances.aggregatedList over every zone (each page of it),
        # filtered by our installation's label; the firewall listing is not needed here.
        # A Spot VM's preemption (gcp_preemption.py) costs one operations listing, only when one stops.
        found = await self._sdk(self._instances, self._owned_filter())
        return await gcp_preemption.observed(self, [(self._status(inst, self._ref(zone, inst)), inst)
                                                    for zone, inst in found])

    async def find_all(self, key: str) -> list[InstanceRef]:
        found = await self._sdk(self._instances, self._owned_filter(key))
        return [self._ref(zone, inst) for zone, inst in found]

    async def find(self, key: str) -> InstanceRef | None:
        found = await self.find_all(key)
        return found[0] if found else None

    async def release(self, key: str) -> None:
        if not await self.find_all(key):
            await self._delete_firewall(key)

    async def aclose(self) -> None:
        # The cached clients trust the CA file the base removes: later calls build new ones.
        with self._lock:
            self._clients = {}
        await super().aclose()


def _shape(inst: Any) -> str:
    """An instance's offer type: its machine type with attached GPUs (`n1-standard-4+nvidia-tesla-t4:1`)."""
    machine = inst.machine_type.rpartition("/")[2]
    gpus = [
        (a.accelerator_type.rpartition("/")[2], int(a.accelerator_count)) for a in inst.guest_accelerators
    ]
    return catalog.combo_type(machine, *gpus[0]) if len(gpus) == 1 else machine


def catalog_region(zone: str) -> str:
    """A zone's region: `us-central1-a` -> `us-central1`."""
    return zone.rsplit("-", 1)[0]

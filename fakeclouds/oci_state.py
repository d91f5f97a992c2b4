"""The simulated OCI tenancy's catalogue (GPU shapes at Oracle's list prices, Ubuntu images, two
subscribed regions with one availability domain each), its error table, and its state beyond machines
(subnets and their VCN's default security list, network security groups, VNICs, retry tokens, work
requests), and what an instance's firewall lets in (`ingress`): fakeclouds/oci_api.py serves it.
JSON field names are the SDK models' `attribute_map` (github.com/oracle/oci-python-sdk src/oci/core/models).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
import time
import uuid
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from fakeclouds.catalog import Gpu, InstanceType, Region
from fakeclouds.common import iso
from fakeclouds.engine import Engine, Machine
from fakeclouds.errors import (
    CloudError,
    Invalid,
    LostResponse,
    NameConflict,
    NoCapacity,
    NotFound,
    QuotaExceeded,
    RateLimit,
    ServerFault,
    Unauthorized,
)
from fakeclouds.facade import IngressRule
from fakeclouds.faults import CallPlan
from fakeclouds.oci_auth import HOME_REGION
from fakeclouds.vendor_errors import CodeTable, retry_after_header, status_of

NAME = "oci"
V = "/20160918"
REGIONS = (Region(HOME_REGION, "US East (Ashburn)"), Region("eu-frankfurt-1", "Germany Central (Frankfurt)"))
REGION_KEYS = {HOME_REGION: "IAD", "eu-frankfurt-1": "FRA"}
UBUNTU = "Canonical Ubuntu"
IMAGES = {  # (operating system, version) per image; OCIDs are per region in real OCI
    "ocid1.image.oc1..aaaaaaaaubuntu2204gpu": (UBUNTU, "22.04"),
    "ocid1.image.oc1..aaaaaaaaubuntu2404gpu": (UBUNTU, "24.04"),
}


def _gpu(name: str, smi: str, mib: int, n: int) -> Gpu:
    return Gpu(name, smi, mib, n)


# Shapes (oci.core.models.Shape) and Oracle's list prices per GPU-hour (oracle.com/cloud/price-list,
# "Compute - GPU"); preemptible capacity is billed at half (docs: preemptible instances).
INSTANCE_TYPES = (
    InstanceType(
        "VM.GPU.A10.1",
        "1x NVIDIA A10 Tensor Core",
        "NVIDIA® A10",
        15,
        240,
        0,
        _gpu("A10", "NVIDIA A10", 23028, 1),
        {HOME_REGION: 2.0, "eu-frankfurt-1": 2.0},
        spot_factor=0.5,
        default_stock={HOME_REGION: 4, "eu-frankfurt-1": 2},
    ),
    InstanceType(
        "VM.GPU.A10.2",
        "2x NVIDIA A10 Tensor Core",
        "NVIDIA® A10",
        30,
        480,
        0,
        _gpu("A10", "NVIDIA A10", 23028, 2),
        {HOME_REGION: 4.0},
        spot_factor=0.5,
        default_stock={HOME_REGION: 2},
    ),
    InstanceType(
        "BM.GPU.A100-v2.8",
        "8x NVIDIA A100 80GB Tensor Core",
        "NVIDIA® A100",
        128,
        2048,
        0,
        _gpu("A100", "NVIDIA A100-SXM4-80GB", 81920, 8),
        {HOME_REGION: 32.0},
        spot_factor=0.5,
        default_stock={HOME_REGION: 1},
    ),
    InstanceType(
        "BM.GPU.H100.8",
        "8x NVIDIA H100 80GB Tensor Core",
        "NVIDIA® H100",
        112,
        2048,
        0,
        _gpu("H100", "NVIDIA H100 80GB HBM3", 81559, 8),
        {HOME_REGION: 80.0, "eu-frankfurt-1": 80.0},
        spot_factor=0.5,
        default_stock={HOME_REGION: 1, "eu-frankfurt-1": 1},
    ),
)
SHAPES = {t.name: t for t in INSTANCE_TYPES}
_STATES = {"pending": "PROVISIONING", "running": "RUNNING", "terminating": "TERMINATING", "error": "STOPPED"}

# OCI's error codes and statuses (docs.oracle.com/en-us/iaas/Content/API/References/apierrors.htm).
ERRORS: CodeTable[tuple[int, str]] = CodeTable(
    [
        (Invalid, (400, "InvalidParameter")),
        (NameConflict, (409, "Conflict")),
        (QuotaExceeded, (400, "LimitExceeded")),
        (Unauthorized, (401, "NotAuthenticated")),
        (NotFound, (404, "NotAuthorizedOrNotFound")),
        (NoCapacity, (500, "InternalError")),
        (RateLimit, (429, "TooManyRequests")),
        (ServerFault, (500, "InternalServerError")),
        (LostResponse, (504, "GatewayTimeout")),
    ],
    default=(500, "InternalServerError"),
)


class Conflict(NameConflict):
    """409 Conflict (a retry token reused with another request; an NSG still in use)."""


def render(exc: CloudError, request: Request) -> Response:
    status, code = ERRORS(exc)
    status = status_of(exc, status)
    if isinstance(exc, ServerFault) and status == 503:
        code = "ServiceUnavailable"
    message = "Out of host capacity." if isinstance(exc, NoCapacity) else exc.message
    headers = {"opc-request-id": uuid.uuid4().hex.upper()}
    if isinstance(exc, RateLimit):  # a simulation aid: real OCI 429s carry no Retry-After
        headers["retry-after"] = retry_after_header(exc.retry_after)
    return JSONResponse({"code": code, "message": message}, status_code=status, headers=headers)


def ocid(kind: str, region: str | None = None) -> str:
    return f"ocid1.{kind}.oc1.{region or ''}.amaaaaaa{secrets.token_hex(16)}"


def machine_id() -> str:
    return ocid("instance", "sim")  # the region segment is rewritten at launch (Account.launch)


def ad_name(region: str) -> str:
    return f"Uocm:{region.upper()}-AD-1"


def region_of_ad(ad: str) -> str:
    for r in REGIONS:
        if ad == ad_name(r.name):
            return r.name
    raise Invalid(f"availabilityDomain {ad!r} is not valid")


class Account:
    """The tenancy's state beyond machines: subnets, NSGs, VNICs, retry tokens, work requests."""

    def __init__(self, engine: Engine, tenancy: str) -> None:
        self.engine, self.tenancy = engine, tenancy

    @property
    def state(self) -> dict[str, Any]:
        state = self.engine.facade_state[NAME]
        for part in ("nsgs", "tokens", "work_requests", "subnets", "security_lists"):
            state.setdefault(part, {})
        if not state["subnets"]:
            for r in REGIONS:
                vcn = f"ocid1.vcn.oc1.{r.name}.amaaaaaadefault{REGION_KEYS[r.name].lower()}"
                sid = f"ocid1.subnet.oc1.{r.name}.amaaaaaadefault{REGION_KEYS[r.name].lower()}"
                state["subnets"][sid] = {
                    "id": sid,
                    "vcnId": vcn,
                    "compartmentId": self.tenancy,
                    "cidrBlock": "10.0.0.0/24",
                    "displayName": "default public subnet",
                    "lifecycleState": "AVAILABLE",
                    "prohibitPublicIpOnVnic": False,
                    "availabilityDomain": None,
                    "timeCreated": iso(0),
                }
        default_security_lists(state)
        return state

    def compartment(self, compartment_id: str | None) -> None:
        if compartment_id != self.tenancy:
            raise NotFound("Authorization failed or requested resource not found.")

    def machine(self, instance_id: str) -> Machine:
        m = self.engine.machines.get(instance_id)
        if m is None or m.facade != NAME or m.status == "terminated":
            raise NotFound("Authorization failed or requested resource not found.")
        return m

    def instance_json(self, m: Machine) -> dict[str, Any]:
        e = m.extra
        return {
            "id": m.id,
            "displayName": m.extra.get("display_name"),
            "compartmentId": self.tenancy,
            "region": m.region,
            "availabilityDomain": ad_name(m.region),
            "faultDomain": "FAULT-DOMAIN-1",
            "shape": m.instance_type,
            "lifecycleState": _STATES.get(m.status, "STOPPED"),
            "timeCreated": iso(m.created_at),
            "imageId": e["image"],
            "sourceDetails": {"sourceType": "image", "imageId": e["image"]},
            "freeformTags": e.get("tags", {}),
            "definedTags": {},
            "metadata": e.get("metadata", {}),
            "preemptibleInstanceConfig": (
                {"preemptionAction": {"type": "TERMINATE", "preserveBootVolume": False}} if m.spot else None
            ),
        }

    def vnic_json(self, m: Machine) -> dict[str, Any]:
        up = m.status != "pending" and m.address
        return {
            "id": m.extra["vnic"],
            "compartmentId": self.tenancy,
            "availabilityDomain": ad_name(m.region),
            "subnetId": m.extra["subnet"],
            "isPrimary": True,
            "lifecycleState": "AVAILABLE",
            "privateIp": "10.0.0." + str(2 + int(m.extra["vnic"][-2:], 16) % 250),
            "publicIp": m.address if up else None,
            "nsgIds": m.extra.get("nsgs", []),
            "timeCreated": iso(m.created_at),
        }

    def launch(self, body: dict[str, Any], token: str | None, plan: CallPlan) -> tuple[Machine, str]:
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if token:
            seen = self.state["tokens"].get(token)
            if seen is not None:
                if seen["digest"] != digest:
                    raise Conflict("The retry token was already used with a different request.")
                return self.engine.machines[seen["instance"]], seen["work_request"]
        self.compartment(body.get("compartmentId"))
        shape = SHAPES.get(str(body.get("shape")))
        if shape is None:
            raise Invalid(f"Shape {body.get('shape')} is not valid")
        region = region_of_ad(str(body.get("availabilityDomain")))
        source = body.get("sourceDetails") or {}
        if source.get("sourceType") != "image" or source.get("imageId") not in IMAGES:
            raise NotFound("Authorization failed or requested resource not found.")  # the image
        vnic = body.get("createVnicDetails") or {}
        subnet = self.state["subnets"].get(vnic.get("subnetId"))
        if subnet is None or f".{region}." not in subnet["id"]:
            raise NotFound("Authorization failed or requested resource not found.")  # the subnet
        nsgs = list(vnic.get("nsgIds") or [])
        if any(n not in self.state["nsgs"] for n in nsgs):
            raise NotFound("Authorization failed or requested resource not found.")  # an NSG
        metadata = body.get("metadata") or {}
        keys = [k for k in str(metadata.get("ssh_authorized_keys") or "").splitlines() if k.strip()]
        try:
            data = (
                base64.b64decode(metadata["user_data"], validate=True).decode()
                if metadata.get("user_data")
                else None
            )
        except (binascii.Error, UnicodeDecodeError):
            raise Invalid("metadata user_data must be base64") from None
        [m] = self.engine.create(
            NAME,
            name=token,  # the engine's unique name is the retry token (see FACADE.names)
            instance_type=shape.name,
            region=region,
            public_keys=keys,
            user_data=data,
            spot=body.get("preemptibleInstanceConfig") is not None,
            stuck=plan.stuck_booting,
            die_after_boot=plan.die_after_boot,
            preempt_after=plan.preempt_after,
            extra={
                "image": source["imageId"],
                "display_name": body.get("displayName"),
                "tags": body.get("freeformTags") or {},
                "subnet": subnet["id"],
                "nsgs": nsgs,
                "vnic": ocid("vnic", region),
                "metadata": metadata,
            },
        )
        wr = ocid("coreservicesworkrequest", region)
        self.state["work_requests"][wr] = {"instance": m.id, "created": m.created_at}
        if token:
            self.state["tokens"][token] = {"instance": m.id, "digest": digest, "work_request": wr}
        self.engine.save()
        return m, wr

    def add_nsg(self, body: dict[str, Any]) -> dict[str, Any]:
        self.compartment(body.get("compartmentId"))
        vcn = body.get("vcnId")
        if not any(s["vcnId"] == vcn for s in self.state["subnets"].values()):
            raise NotFound("Authorization failed or requested resource not found.")
        region = str(vcn).split(".")[3]
        nsg: dict[str, Any] = {
            "id": ocid("networksecuritygroup", region),
            "compartmentId": self.tenancy,
            "vcnId": vcn,
            "displayName": body.get("displayName") or "nsg",
            "freeformTags": body.get("freeformTags") or {},
            "definedTags": {},
            "lifecycleState": "AVAILABLE",
            "timeCreated": iso(time.time()),
            "rules": [],
        }
        self.state["nsgs"][nsg["id"]] = nsg
        self.engine.save()
        return nsg

    def nsg(self, nsg_id: str) -> dict[str, Any]:
        found = self.state["nsgs"].get(nsg_id)
        if found is None:
            raise NotFound("Authorization failed or requested resource not found.")
        return found

    def delete_nsg(self, nsg_id: str) -> None:
        self.nsg(nsg_id)
        if any(nsg_id in m.extra.get("nsgs", []) for m in self.engine.live(NAME)):
            raise Conflict("The Network Security Group has VNICs attached and cannot be deleted.")
        del self.state["nsgs"][nsg_id]
        self.engine.save()


VCN_CIDR = "10.0.0.0/16"


def default_security_lists(state: dict[str, Any]) -> None:
    """Each VCN's default security list (docs: "Default Security List"): stateful ingress TCP 22 and
    ICMP 3/4 from anywhere, ICMP 3 from the VCN; all egress. Every subnet uses its VCN's (a state from
    before security lists were modelled gets them here)."""
    lists = state.setdefault("security_lists", {})
    for subnet in state.get("subnets", {}).values():
        vcn = subnet["vcnId"]
        sl_id = vcn.replace("ocid1.vcn.", "ocid1.securitylist.", 1)
        if sl_id not in lists:
            lists[sl_id] = {
                "id": sl_id,
                "compartmentId": subnet["compartmentId"],
                "vcnId": vcn,
                "displayName": f"Default Security List for {vcn}",
                "lifecycleState": "AVAILABLE",
                "timeCreated": iso(0),
                "ingressSecurityRules": [
                    {"source": "0.0.0.0/0", "sourceType": "CIDR_BLOCK", "protocol": "6", "isStateless": False,
                     "tcpOptions": {"destinationPortRange": {"min": 22, "max": 22}}},
                    {"source": "0.0.0.0/0", "sourceType": "CIDR_BLOCK", "protocol": "1", "isStateless": False,
                     "icmpOptions": {"type": 3, "code": 4}},
                    {"source": VCN_CIDR, "sourceType": "CIDR_BLOCK", "protocol": "1", "isStateless": False,
                     "icmpOptions": {"type": 3}},
                ],
                "egressSecurityRules": [
                    {"destination": "0.0.0.0/0", "destinationType": "CIDR_BLOCK", "protocol": "all",
                     "isStateless": False},
                ],
            }
        subnet.setdefault("securityListIds", [sl_id])


def _tcp_rule(rule: dict[str, Any]) -> IngressRule | None:
    """An ingress rule (a security list's or an NSG's, as the API spells them) as what it lets in:
    TCP or all protocols from a CIDR; a rule narrowed to source ports admits no arbitrary peer."""
    if str(rule.get("protocol")) not in ("6", "all") or rule.get("sourceType") not in (None, "CIDR_BLOCK"):
        return None
    tcp = rule.get("tcpOptions") or {}
    if tcp.get("sourcePortRange"):
        return None
    span = tcp.get("destinationPortRange") or {"min": 1, "max": 65535}
    return int(span["min"]), int(span["max"]), str(rule.get("source"))


def ingress(engine: Engine, machine: Machine) -> list[IngressRule]:
    """What OCI lets in to an instance's VNIC: the union of its subnet's security lists' ingress rules
    and those of the network security groups on the VNIC (a packet any of them allows gets in)."""
    state = engine.facade_state.get(NAME, {})
    default_security_lists(state)
    subnet = state.get("subnets", {}).get(machine.extra.get("subnet"))
    rules = [
        r
        for sl in (subnet or {}).get("securityListIds", [])
        for r in state["security_lists"].get(sl, {}).get("ingressSecurityRules", [])
    ]
    rules += [
        r
        for n in machine.extra.get("nsgs", [])
        for r in state.get("nsgs", {}).get(n, {}).get("rules", [])
        if r.get("direction") == "INGRESS"
    ]
    out: list[IngressRule] = []
    for r in rules:
        got = _tcp_rule(r)
        if got is not None and got not in out:
            out.append(got)
    return out


def public_nsg(nsg: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in nsg.items() if k != "rules"}


def shape_json(t: InstanceType) -> dict[str, Any]:
    assert t.gpu is not None
    return {
        "shape": t.name,
        "processorDescription": "simulated",
        "ocpus": float(t.vcpus // 2 or 1),
        "memoryInGBs": float(t.memory_gib),
        "gpus": t.gpu.count,
        "gpuDescription": t.gpu_description,
        "networkingBandwidthInGbps": 100.0 if t.name.startswith("BM.") else 24.0,
        "isLiveMigrationSupported": False,
        "billingType": "PAID",
        "quotaNames": [t.name.lower()],
    }

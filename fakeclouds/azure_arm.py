"""The simulated Azure subscription's resources (Azure Resource Manager): resource groups, virtual
networks, network security groups, public IP addresses, network interfaces and virtual machines,
with ARM's ids, JSON shapes, references between them and the refusals the real ARM makes. The
HTTP layer (`azure_api.py`) maps requests onto an `Account`; VM machines live in the engine.

State is JSON in `engine.facade_state["azure"]` (persisted with the engine): `groups` and
`resources` keyed by lower-cased ARM id (ARM ids are case-insensitive), `operations` for
long-running operations. A VM record names its engine machine; once that machine is gone, so is
the VM. A VM whose allocation failed has no machine: it stays `Failed` until deleted.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fakeclouds import azure_catalog as cat
from fakeclouds.common import iso
from fakeclouds.engine import ERROR, PENDING, RUNNING, TERMINATED, TERMINATING, Engine, Machine
from fakeclouds.errors import Invalid, NoCapacity, QuotaExceeded
from fakeclouds.ssh import parse_public_key

NAME = "azure"
SUBSCRIPTION = "5f1c0a2e-7d4b-4c1e-9a3f-2b6d8e0c4a71"
TENANT = "9c3e7b1a-2f4d-4e8a-b6c0-1d5f3a7e9b20"
CLIENT_ID = "3a8d6f2c-1b9e-4d7a-8c5f-0e2b4a6d8f13"

VM, NIC, PIP, NSG, VNET = (
    "Microsoft.Compute/virtualMachines",
    "Microsoft.Network/networkInterfaces",
    "Microsoft.Network/publicIPAddresses",
    "Microsoft.Network/networkSecurityGroups",
    "Microsoft.Network/virtualNetworks",
)
TYPES = {t.split("/")[1].lower(): t for t in (VM, NIC, PIP, NSG, VNET)}
SIDE_KINDS = {NIC: "nic", PIP: "public-ip", NSG: "nsg", VNET: "virtual-network"}
MAX_OPERATIONS = 1000  # long-running operations kept for polling (oldest dropped first)
MAX_CUSTOM_DATA = 65535  # bytes, decoded (Azure's limit on osProfile.customData)

# Azure resource names: VMs 1-64 (Linux), network resources 1-80; letters, digits, '_', '.', '-';
# starting with a letter or digit, ending with a letter, digit or '_'.
_NAME_RULES = {VM: 64, NIC: 80, PIP: 80, NSG: 80, VNET: 64}
_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?")
_GROUP_RE = re.compile(r"[-\w._()]{0,89}[-\w_()]", re.UNICODE)
_PORT_RANGE = re.compile(r"\*|\d{1,5}(?:-\d{1,5})?")
_private_ips = itertools.count(4)


class ArmError(Exception):
    """A refusal in ARM's shape: HTTP status and `{"error": {"code", "message"}}`."""

    def __init__(self, status: int, code: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.retry_after = status, code, message, retry_after


def group_id(group: str) -> str:
    return f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{group}"


def resource_id(group: str, rtype: str, name: str) -> str:
    return f"{group_id(group)}/providers/{rtype}/{name}"


def _ref(value: Any) -> str | None:
    """The lower-cased id of a `{"id": ...}` reference (None when absent)."""
    if isinstance(value, dict) and isinstance(value.get("id"), str):
        return str(value["id"]).lower()
    return None


def _props(body: dict[str, Any]) -> dict[str, Any]:
    props = body.get("properties") or {}
    if not isinstance(props, dict):
        raise ArmError(400, "InvalidRequestContent", "properties must be an object")
    return props


def _tags(body: dict[str, Any]) -> dict[str, str]:
    tags = body.get("tags") or {}
    if not isinstance(tags, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
    ):
        raise ArmError(400, "InvalidTag", "tags must be an object of string names to string values")
    if len(tags) > 50:
        raise ArmError(400, "InvalidTag", "a resource may carry at most 50 tags")
    for k, v in tags.items():
        if len(k) > 512 or len(v) > 256 or re.search(r"[<>%&\\?/]", k):
            raise ArmError(
                400,
                "InvalidTagNameCharacters",
                "tag names are at most 512 characters without <, >, %, &, \\, ? or /; "
                "values at most 256 characters",
            )
    return dict(tags)


@dataclass
class Outcome:
    """What a PUT/DELETE answers: status, body, and the long-running operation to poll (if any)."""

    status: int
    body: dict[str, Any] | None
    operation: str | None = None  # the operation id (Azure-AsyncOperation)
    location: str | None = None  # where the operation lives (its URL's location segment)


class Account:
    """The subscription's resources over an engine. Every method is synchronous, hence atomic on
    the server's loop."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> dict[str, Any]:
        st = self.engine.facade_state.setdefault(NAME, {})
        for key in ("groups", "resources", "operations"):
            st.setdefault(key, {})
        return st

    @property
    def groups(self) -> dict[str, Any]:
        return dict.__getitem__(self.state, "groups")

    @property
    def resources(self) -> dict[str, Any]:
        return dict.__getitem__(self.state, "resources")

    @property
    def operations(self) -> dict[str, Any]:
        return dict.__getitem__(self.state, "operations")

    def save(self) -> None:
        self.engine.save()

    def machine(self, rec: dict[str, Any]) -> Machine | None:
        mid = rec.get("machine_id")
        return self.engine.machines.get(mid) if mid else None

    def prune(self) -> None:
        """Forget VMs whose machine is gone (deleted, or forgotten by an engine reset)."""
        gone = [
            k
            for k, r in self.resources.items()
            if r["type"] == VM
            and r.get("machine_id")
            and ((m := self.machine(r)) is None or m.status == TERMINATED)
        ]
        for k in gone:
            del self.resources[k]
        if gone:
            self.save()

    def find(self, rid: str) -> dict[str, Any] | None:
        self.prune()
        rec: dict[str, Any] | None = self.resources.get(rid.lower())
        return rec

    def of_type(self, rtype: str, group: str | None = None) -> Iterator[dict[str, Any]]:
        self.prune()
        for r in list(self.resources.values()):
            if r["type"] == rtype and (group is None or r["group"].lower() == group.lower()):
                yield r

    # ------------------------------------------------------------------ resource groups

    def put_group(self, name: str, body: dict[str, Any]) -> Outcome:
        if not _GROUP_RE.fullmatch(name) or name.endswith("."):
            raise ArmError(
                400,
                "InvalidResourceGroupName",
                "resource group names are 1-90 characters of letters, digits, '.', '_', '-', "
                "'(' and ')', not ending in '.'",
            )
        location = body.get("location")
        if not isinstance(location, str) or location.lower() not in cat.LOCATIONS:
            raise ArmError(
                400,
                "LocationNotAvailableForResourceGroup",
                f"The provided location '{location}' is not available for resource group. "
                f"List of available regions is '{','.join(cat.LOCATIONS)}'.",
            )
        existing = self.groups.get(name.lower())
        if existing and existing["location"] != location.lower():
            raise ArmError(
                409,
                "InvalidResourceGroupLocation",
                f"Invalid resource group location '{location}'. The Resource group already exists in "
                f"location '{existing['location']}'.",
            )
        tags = _tags(body)
        self.groups[name.lower()] = {
            "name": existing["name"] if existing else name,
            "location": location.lower(),
            "tags": tags,
        }
        self.save()
        return Outcome(200 if existing else 201, self.group_json(name))

    def group(self, name: str) -> dict[str, Any]:
        g: dict[str, Any] | None = self.groups.get(name.lower())
        if g is None:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found.")
        return g

    def group_json(self, name: str) -> dict[str, Any]:
        g = self.group(name)
        return {
            "id": group_id(g["name"]),
            "name": g["name"],
            "type": "Microsoft.Resources/resourceGroups",
            "location": g["location"],
            "tags": g["tags"],
            "properties": {"provisioningState": "Succeeded"},
        }

    def delete_group(self, name: str) -> Outcome:
        """Deletes the group with everything in it (VMs first, as ARM orders it)."""
        g = self.groups.get(name.lower())
        if g is None:
            return Outcome(204, None)
        for rec in list(self.of_type(VM, name)):
            m = self.machine(rec)
            if m is not None and m.status not in (TERMINATED, TERMINATING):
                self.engine.terminate(NAME, m.id)
        for k in [k for k, r in self.resources.items() if r["group"].lower() == name.lower()]:
            del self.resources[k]
        del self.groups[name.lower()]
        self.save()
        return Outcome(200, None)

    # ------------------------------------------------------------------ shared checks

    def _check_name(self, rtype: str, name: str) -> None:
        limit = _NAME_RULES[rtype]
        if len(name) > limit or not _NAME_RE.fullmatch(name):
            raise ArmError(
                400,
                "InvalidResourceName",
                f"Resource name {name} is invalid. The name can be up to {limit} characters long, "
                "contain letters, digits, '_', '.' and '-', start with a letter or digit and end "
                "with a letter, digit or '_'.",
            )

    def _location(self, body: dict[str, Any], rtype: str) -> str:
        location = body.get("location")
        if not isinstance(location, str) or not location:
            raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
        if location.lower() not in cat.LOCATIONS:
            raise ArmError(
                400,
                "LocationNotAvailableForResourceType",
                f"The provided location '{location}' is not available for resource type "
                f"'{rtype}'. List of available regions for the resource type is "
                f"'{','.join(cat.LOCATIONS)}'.",
            )
        return location.lower()

    def _referenced(self, ref_id: str | None, rtype: str, by: str, location: str) -> dict[str, Any]:
        rec = self.find(ref_id) if ref_id else None
        if rec is None or rec["type"] != rtype:
            raise ArmError(
                400,
                "InvalidResourceReference",
                f"Resource {ref_id} referenced by resource {by} was not found. Please make sure "
                "that the referenced resource exists, and that both resources are in the same region.",
            )
        if rec["location"] != location:
            raise ArmError(
                400,
                "InvalidResourceReference",
                f"Resource {rec['id']} referenced by resource {by} is in location "
                f"'{rec['location']}', not '{location}'.",
            )
        return rec

    def _new_record(
        self,
        group: str,
        rtype: str,
        name: str,
        location: str,
        body: dict[str, Any],
        props: dict[str, Any],
        existing: dict[str, Any] | None,
    ) -> dict[str, Any]:
        rid = existing["id"] if existing else resource_id(self.group(group)["name"], rtype, name)
        if existing and existing["location"] != location:
            raise ArmError(
                409,
                "InvalidResourceLocation",
                f"The resource '{existing['name']}' already exists in location "
                f"'{existing['location']}' in resource group '{group}'. A resource with the same "
                f"name cannot be created in location '{location}'. Please select a new resource name.",
            )
        rec = dict(existing or {})
        rec.update(
            {
                "id": rid,
                "name": rid.rsplit("/", 1)[1],
                "type": rtype,
                "group": self.group(group)["name"],
                "location": location,
                "tags": _tags(body),
                "properties": props,
                "guid": (existing or {}).get("guid") or str(uuid.uuid4()),
            }
        )
        return rec

    # ------------------------------------------------------------------ network

    def put_network(self, group: str, rtype: str, name: str, body: dict[str, Any]) -> Outcome:
        """Create or replace a network resource. Completes at once (provisioningState Succeeded)."""
        self.group(group)
        self._check_name(rtype, name)
        location = self._location(body, rtype)
        rid = resource_id(self.group(group)["name"], rtype, name)
        existing = self.find(rid)
        props = dict(_props(body))
        if rtype == NSG:
            props = {"securityRules": self._rules(props.get("securityRules") or [])}
        elif rtype == PIP:
            props = self._public_ip(props, body)
        elif rtype == NIC:
            props = self._nic(props, rid, location)
        elif rtype == VNET:
            props = self._vnet(props, rid, existing)
        rec = self._new_record(group, rtype, name, location, body, props, existing)
        if rtype == PIP:
            rec["sku"] = body.get("sku") or {"name": "Standard", "tier": "Regional"}
        if rtype == NIC and existing is None:
            n = next(_private_ips)
            rec["private_ip"] = f"10.64.{n // 250}.{n % 250 + 4}"
        self.resources[rid.lower()] = rec
        self.save()
        return Outcome(200 if existing else 201, self.render(rec))

    def _rules(self, rules: Any) -> list[dict[str, Any]]:
        if not isinstance(rules, list):
            raise ArmError(400, "InvalidRequestFormat", "securityRules must be an array")
        seen: dict[tuple[str, int], str] = {}
        names: set[str] = set()
        out = []
        for rule in rules:
            p = rule.get("properties") if isinstance(rule, dict) else None
            name = rule.get("name") if isinstance(rule, dict) else None
            if not isinstance(p, dict) or not isinstance(name, str) or not name:
                raise ArmError(400, "InvalidRequestFormat", "each security rule needs a name and properties")
            if name.lower() in names:
                raise ArmError(400, "InvalidRequestFormat", f"two security rules are named {name}")
            names.add(name.lower())
            if p.get("protocol") not in ("Tcp", "Udp", "Icmp", "Esp", "Ah", "*"):
                raise ArmError(
                    400,
                    "SecurityRuleParameterContainsUnsupportedValue",
                    f"Security rule parameter Protocol for rule {name} has an unsupported value.",
                )
            if p.get("access") not in ("Allow", "Deny") or p.get("direction") not in ("Inbound", "Outbound"):
                raise ArmError(
                    400,
                    "SecurityRuleParameterContainsUnsupportedValue",
                    f"Security rule {name} needs access Allow|Deny and direction Inbound|Outbound.",
                )
            priority = p.get("priority")
            if not isinstance(priority, int) or not 100 <= priority <= 4096:
                raise ArmError(
                    400,
                    "SecurityRuleInvalidPriority",
                    f"Security rule {name} has invalid Priority. Value provided: {priority}. "
                    "Allowed range 100-4096.",
                )
            if (p["direction"], priority) in seen:
                # [unconfirmed] the exact code Azure gives two rules of one priority and direction
                raise ArmError(
                    400,
                    "SecurityRuleConflict",
                    f"Security rule {name} conflicts with rule {seen[(p['direction'], priority)]}. "
                    "Rules cannot have the same Priority and Direction.",
                )
            seen[(p["direction"], priority)] = name
            ranges = p.get("destinationPortRanges") or [p.get("destinationPortRange")]
            for port in ranges:
                if (
                    not isinstance(port, str)
                    or not _PORT_RANGE.fullmatch(port)
                    or any(not 0 <= int(x) <= 65535 for x in port.split("-") if x != "*")
                ):
                    raise ArmError(
                        400,
                        "SecurityRuleInvalidPortRange",
                        f"Security rule {name} has invalid Port range. Value provided: {port}. "
                        "Value should be an integer OR integer range with '-' delimiter. "
                        "Valid range 0-65535.",
                    )
            out.append({"name": name, "properties": dict(p)})
        return out

    def _public_ip(self, props: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
        sku = (body.get("sku") or {}).get("name", "Standard")
        method = props.get("publicIPAllocationMethod", "Static" if sku == "Standard" else "Dynamic")
        # Basic public IPs were retired on 2025-09-30. Both codes below are [unconfirmed].
        if sku == "Basic":
            raise ArmError(
                400, "BasicSkuPublicIpRetired", "Basic SKU public IP addresses are retired; use Standard."
            )
        if method != "Static":
            raise ArmError(
                400,
                "InvalidRequestFormat",
                "Standard sku public IP addresses must specify publicIPAllocationMethod as Static.",
            )
        return {
            "publicIPAllocationMethod": method,
            "publicIPAddressVersion": props.get("publicIPAddressVersion", "IPv4"),
            "idleTimeoutInMinutes": props.get("idleTimeoutInMinutes", 4),
        }

    def _nic(self, props: dict[str, Any], rid: str, location: str) -> dict[str, Any]:
        configs = props.get("ipConfigurations")
        if not isinstance(configs, list) or not configs:
            raise ArmError(
                400,
                "NetworkInterfaceMustHaveAtLeastOneIpConfiguration",
                f"Network interface {rid} must have one or more IP configurations.",
            )
        out = []
        for c in configs:
            cp = (c or {}).get("properties") or {}
            subnet = _ref(cp.get("subnet"))
            vnet_id = subnet.rsplit("/subnets/", 1)[0] if subnet and "/subnets/" in subnet else None
            vnet = self._referenced(vnet_id, VNET, rid, location) if vnet_id else None
            if vnet is None or not any(
                s["name"].lower() == subnet.rsplit("/", 1)[1]  # type: ignore[union-attr]
                for s in vnet["properties"]["subnets"]
            ):
                raise ArmError(
                    400,
                    "InvalidResourceReference",
                    f"Resource {subnet} referenced by resource {rid} was not found.",
                )
            pip = _ref(cp.get("publicIPAddress"))
            if pip:
                self._referenced(pip, PIP, rid, location)
                for other in self.of_type(NIC):
                    if other["id"].lower() != rid.lower() and any(
                        x["pip"] == pip for x in other["properties"]["ipConfigurations"]
                    ):
                        raise ArmError(
                            400, "PublicIPAddressInUse", f"Resource {pip} is already in use by {other['id']}."
                        )
            out.append({"name": c.get("name") or "ipconfig1", "subnet": subnet, "pip": pip})
        nsg = _ref(props.get("networkSecurityGroup"))
        if nsg:
            self._referenced(nsg, NSG, rid, location)
        return {"ipConfigurations": out, "nsg": nsg}

    def _vnet(self, props: dict[str, Any], rid: str, existing: dict[str, Any] | None) -> dict[str, Any]:
        prefixes = (props.get("addressSpace") or {}).get("addressPrefixes") or []
        subnets = []
        for s in props.get("subnets") or []:
            name, sp = (s or {}).get("name"), (s or {}).get("properties") or {}
            if not isinstance(name, str) or not isinstance(sp.get("addressPrefix"), str):
                raise ArmError(400, "InvalidRequestFormat", "each subnet needs a name and an addressPrefix")
            subnets.append({"name": name, "addressPrefix": sp["addressPrefix"]})
        if existing is not None:
            dropped = {s["name"].lower() for s in existing["properties"]["subnets"]} - {
                s["name"].lower() for s in subnets
            }
            for name in dropped:
                users = self._subnet_users(f"{rid}/subnets/{name}".lower())
                if users:
                    raise ArmError(
                        400,
                        "InUseSubnetCannotBeDeleted",
                        f"Subnet {name} is in use by {users[0]} and cannot be deleted.",
                    )
        return {"addressSpace": {"addressPrefixes": list(prefixes)}, "subnets": subnets}

    def _subnet_users(self, subnet: str) -> list[str]:
        return [
            n["id"] + "/ipConfigurations/" + c["name"]
            for n in self.of_type(NIC)
            for c in n["properties"]["ipConfigurations"]
            if c["subnet"] == subnet
        ]

    def nic_vm(self, nic_id: str) -> dict[str, Any] | None:
        """The VM a NIC is attached to (a VM that still exists and names it)."""
        return next((v for v in self.of_type(VM) if nic_id.lower() in v["nics"]), None)

    def delete_network(self, group: str, rtype: str, name: str) -> Outcome:
        self.group(group)
        rid = resource_id(self.group(group)["name"], rtype, name)
        rec = self.find(rid)
        if rec is None:
            return Outcome(204, None)
        rid = rec["id"]
        if rtype == NIC and (vm := self.nic_vm(rid)) is not None:
            raise ArmError(
                400,
                "NicInUse",
                f"Network Interface {rid} is used by existing resource {vm['id']}. In order to delete "
                "the network interface, it must be dissociated from the resource.",
            )
        if rtype == PIP:
            users = [
                n["id"] + "/ipConfigurations/" + c["name"]
                for n in self.of_type(NIC)
                for c in n["properties"]["ipConfigurations"]
                if c["pip"] == rid.lower()
            ]
            if users:
                raise ArmError(
                    400,
                    "PublicIPAddressCannotBeDeleted",
                    f"Public IP address {rid} can not be deleted since it is still allocated to "
                    f"resource {users[0]}. In order to delete the public IP, disassociate/detach the "
                    "Public IP address from the resource.",
                )
        if rtype == NSG:
            users = [n["id"] for n in self.of_type(NIC) if n["properties"]["nsg"] == rid.lower()]
            if users:
                raise ArmError(
                    400,
                    "InUseNetworkSecurityGroupCannotBeDeleted",
                    f"Network security group {rid} cannot be deleted because it is in use by the "
                    f"following resources: {', '.join(users)}. In order to delete the Network "
                    "security group, remove the association with the resource(s).",
                )
        if rtype == VNET:
            for s in rec["properties"]["subnets"]:
                users = self._subnet_users(f"{rid}/subnets/{s['name']}".lower())
                if users:
                    raise ArmError(
                        400,
                        "InUseSubnetCannotBeDeleted",
                        f"Subnet {s['name']} is in use by {users[0]} and cannot be deleted.",
                    )
        del self.resources[rid.lower()]
        self.save()
        return Outcome(200, None)

    # ------------------------------------------------------------------ virtual machines

    def vm_checks(self, group: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Everything ARM refuses synchronously (nothing is created): returns the normalized request."""
        self.group(group)
        self._check_name(VM, name)
        location = self._location(body, VM)
        props = _props(body)
        size_name = (props.get("hardwareProfile") or {}).get("vmSize")
        size = cat.BY_NAME.get(str(size_name).lower())
        if size is None:
            raise ArmError(
                400,
                "InvalidParameter",
                f"The value {size_name} provided for the VM size is not valid. Valid sizes are the "
                "ones the Resource SKUs API lists for the location.",
            )
        zones = body.get("zones") or []
        if not isinstance(zones, list) or len(zones) > 1:
            raise ArmError(400, "InvalidParameter", "A virtual machine may name at most one zone.")
        zone = str(zones[0]) if zones else None
        if zone is not None and zone not in cat.LOCATIONS[location]:
            raise ArmError(
                400,
                "InvalidParameter",
                f"The zone(s) '{zone}' for resource '{name}' is not supported in location '{location}'."
                if cat.LOCATIONS[location]
                else f"Location '{location}' does not support availability zones.",
            )
        if not size.available_in(location, zone):
            raise ArmError(
                409,
                "SkuNotAvailable",
                f"The requested VM size for resource 'Following SKUs have failed for Capacity "
                f"Restrictions: {size.name}' is currently not available in location '{location}'"
                + (f" zones '{zone}'" if zone else "")
                + ". Please try another size or deploy to "
                "a different location or different zone. See https://aka.ms/azureskunotavailable "
                "for details.",
            )
        image = self._image(props, size)
        os_profile = props.get("osProfile") or {}
        user = os_profile.get("adminUsername")
        if (
            not isinstance(user, str)
            or not re.fullmatch(r"[a-z_][a-z0-9_-]{0,63}", user)
            or user in cat.RESERVED_ADMIN_NAMES
        ):
            raise ArmError(400, "InvalidParameter", "The Admin Username specified is not allowed.")
        if user != "ubuntu":
            # A simulation limit: its machines accept one login user, the image's `ubuntu`.
            raise ArmError(
                400, "InvalidParameter", "This simulation's images accept adminUsername 'ubuntu' only."
            )
        keys = self._ssh_keys(os_profile, user)
        custom_data = self._custom_data(os_profile.get("customData"))
        priority = props.get("priority") or "Regular"
        if priority not in ("Regular", "Low", "Spot"):
            raise ArmError(
                400, "InvalidParameter", f"The value '{priority}' of parameter 'priority' is not valid."
            )
        spot = priority != "Regular"
        if spot:
            if not size.spot:
                raise ArmError(
                    409,
                    "SkuNotAvailable",
                    f"The requested VM size {size.name} is not available for Spot in location '{location}'.",
                )
            if props.get("evictionPolicy") not in ("Deallocate", "Delete"):
                raise ArmError(
                    400, "InvalidParameter", "Spot virtual machines need evictionPolicy Deallocate or Delete."
                )
            max_price = (props.get("billingProfile") or {}).get("maxPrice", -1)
            if not isinstance(max_price, int | float) or (max_price != -1 and max_price <= 0):
                raise ArmError(
                    400, "InvalidParameter", "billingProfile.maxPrice must be -1 or greater than 0."
                )
        nics = [_ref(n) for n in (props.get("networkProfile") or {}).get("networkInterfaces") or []]
        if not nics or None in nics:
            raise ArmError(
                400,
                "InvalidParameter",
                "Required parameter 'networkProfile' is missing (null): a VM needs a network interface.",
            )
        vm_id = resource_id(self.group(group)["name"], VM, name)
        for nic in nics:
            self._referenced(nic, NIC, vm_id, location)
            holder = self.nic_vm(str(nic))
            if holder is not None and holder["id"].lower() != vm_id.lower():
                raise ArmError(
                    400,
                    "NicInUse",
                    f"Network Interface {nic} is used by existing resource {holder['id']}. In order "
                    "to use it for this virtual machine, remove it from the existing resource.",
                )
        return {
            "location": location,
            "zone": zone,
            "size": size,
            "image": image,
            "user": user,
            "keys": keys,
            "custom_data": custom_data,
            "spot": spot,
            "nics": [str(n) for n in nics],
            "os_disk_delete": ((props.get("storageProfile") or {}).get("osDisk") or {}).get("deleteOption"),
        }

    def _image(self, props: dict[str, Any], size: cat.Size) -> cat.Image:
        ref = (props.get("storageProfile") or {}).get("imageReference") or {}
        parts = [ref.get(k) for k in ("publisher", "offer", "sku")]
        if not all(isinstance(p, str) and p for p in parts):
            raise ArmError(
                400,
                "InvalidParameter",
                "storageProfile.imageReference needs publisher, offer, sku and version.",
            )
        image = cat.find_image(*[str(p) for p in parts])
        if image is None or ref.get("version", "latest") not in image.versions:
            raise ArmError(
                404,
                "PlatformImageNotFound",
                f"The platform image '{':'.join(map(str, parts))}:{ref.get('version', 'latest')}' is "
                "not available. Verify that all fields in the storage profile are correct.",
            )
        if image.hyperv not in size.hyperv.split(","):
            raise ArmError(
                400,
                "BadRequest",
                f"The selected VM size '{size.name}' cannot boot Hypervisor Generation '{image.hyperv[1:]}'.",
            )
        return image

    def _ssh_keys(self, os_profile: dict[str, Any], user: str) -> list[str]:
        linux = os_profile.get("linuxConfiguration") or {}
        keys = ((linux.get("ssh") or {}).get("publicKeys")) or []
        out = []
        for k in keys:
            path = (k or {}).get("path")
            if path != f"/home/{user}/.ssh/authorized_keys":
                raise ArmError(
                    400,
                    "InvalidParameter",
                    "Destination path for SSH public keys is currently limited to its default value "
                    f"/home/{user}/.ssh/authorized_keys due to a known issue in Linux provisioning agent.",
                )
            try:
                parse_public_key(str((k or {}).get("keyData") or ""))
            except ValueError:
                raise ArmError(
                    400,
                    "InvalidParameter",
                    "The value of parameter linuxConfiguration.ssh.publicKeys.keyData is invalid.",
                ) from None
            out.append(str(k["keyData"]).strip())
        if not out:
            # Without a password (this simulation takes none) a key is the only way in.
            raise ArmError(
                400,
                "InvalidParameter",
                "Required parameter 'adminPassword' is missing (null): give an SSH public key "
                "(linuxConfiguration.ssh.publicKeys) or a password.",
            )
        return out

    @staticmethod
    def _custom_data(value: Any) -> str | None:
        if value is None:
            return None
        try:
            raw = base64.b64decode(str(value), validate=True)
        except (binascii.Error, ValueError):
            raise ArmError(400, "InvalidParameter", "customData must be base64-encoded.") from None
        if len(raw) > MAX_CUSTOM_DATA:
            raise ArmError(
                400,
                "InvalidParameter",
                f"Custom data in OSProfile must be at most {MAX_CUSTOM_DATA} bytes once decoded.",
            )
        return raw.decode("utf-8", errors="replace")

    def existing_vm(self, group: str, name: str) -> dict[str, Any] | None:
        return self.find(resource_id(self.group(group)["name"], VM, name))

    @staticmethod
    def _fingerprint(req: dict[str, Any]) -> dict[str, Any]:
        """The properties a PUT on an existing VM may not change (resizing is not simulated)."""
        return {
            "location": req["location"],
            "zones": req["zone"],
            "vmSize": req["size"].name,
            "imageReference": req["image"].urn(),
            "adminUsername": req["user"],
            "ssh": sorted(req["keys"]),
            "customData": req["custom_data"],
            "priority": req["spot"],
            "networkInterfaces": sorted(req["nics"]),
        }

    def converge_vm(self, rec: dict[str, Any], req: dict[str, Any]) -> None:
        """A PUT under a taken name: the same parameters converge; others are refused as ARM does."""
        if rec.get("deleting"):
            raise ArmError(
                409,
                "OperationNotAllowed",
                f"Operation 'PUT' is not allowed on VM '{rec['name']}' since the VM is marked for "
                "deletion. You can only retry the Delete operation (or wait for an ongoing one to "
                "complete).",
            )
        if rec["location"] != req["location"]:
            raise ArmError(
                409,
                "InvalidResourceLocation",
                f"The resource '{rec['name']}' already exists in location '{rec['location']}' in "
                f"resource group '{rec['group']}'. A resource with the same name cannot be created in "
                f"location '{req['location']}'. Please select a new resource name.",
            )
        was, now = rec["fingerprint"], self._fingerprint(req)
        for prop in now:
            if was[prop] != now[prop]:
                raise ArmError(409, "PropertyChangeNotAllowed", f"Changing property '{prop}' is not allowed.")

    def create_vm(
        self,
        group: str,
        name: str,
        body: dict[str, Any],
        req: dict[str, Any],
        *,
        capacity_refused: bool,
        stuck: bool,
        die_after_boot: float | None,
    ) -> Outcome:
        """Allocate a new VM (or retry the allocation of a Failed one under identical parameters).
        No capacity is not refused here: the operation fails later with (Zonal)AllocationFailed and
        the VM stays behind as Failed — as on Azure."""
        rid = resource_id(self.group(group)["name"], VM, name)
        existing = self.find(rid)
        location, zone, size = req["location"], req["zone"], req["size"]
        regions = [cat.engine_region(location, zone)] if zone else cat.engine_regions(location)
        if not capacity_refused and not any(self.engine.in_stock(NAME, size.name, r) for r in regions):
            capacity_refused = True
        failed = None
        machine = None
        if capacity_refused:
            code = "ZonalAllocationFailed" if zone else "AllocationFailed"
            failed = {
                "code": code,
                "message": "Allocation failed. We do not have sufficient capacity for the requested VM size "
                + ("in this zone" if zone else "in this region")
                + ". Read more about improving likelihood of allocation "
                "success at http://aka.ms/allocation-guidance",
            }
        else:
            region = next(r for r in regions if self.engine.in_stock(NAME, size.name, r))
            try:
                [machine] = self.engine.create(
                    NAME,
                    instance_type=size.name,
                    region=region,
                    public_keys=req["keys"],
                    name=f"{self.group(group)['name']}/{name}",
                    spot=req["spot"],
                    user_data=req["custom_data"],
                    stuck=stuck,
                    die_after_boot=die_after_boot,
                    labels={k: v for k, v in _tags(body).items()},
                )
            except QuotaExceeded:
                raise self.quota_error(size, location) from None
            except NoCapacity:  # raced to zero: same as no stock
                return self.create_vm(
                    group, name, body, req, capacity_refused=True, stuck=stuck, die_after_boot=die_after_boot
                )
            except Invalid as exc:
                raise ArmError(400, "InvalidParameter", exc.message) from None
        vm_uuid = machine.id if machine else (existing or {}).get("vm_uuid") or str(uuid.uuid4())
        op = self.new_operation("create", location, rid, error=failed)
        rec = {
            "id": rid,
            "name": name,
            "type": VM,
            "group": self.group(group)["name"],
            "location": location,
            "tags": _tags(body),
            "zones": [zone] if zone else None,
            "machine_id": machine.id if machine else None,
            "vm_uuid": vm_uuid,
            "failed": failed,
            "deleting": False,
            "created": time.time(),
            "request": {"properties": _props(body)},
            "fingerprint": self._fingerprint(req),
            "nics": [n.lower() for n in req["nics"]],
            "os_disk": f"{name}_OsDisk_1_{uuid.uuid4().hex}",
            "operation": op,
        }
        self.resources[rid.lower()] = rec
        self.save()
        return Outcome(200 if existing else 201, self.render(rec), operation=op, location=location)

    def quota_error(self, size: cat.Size, location: str) -> ArmError:
        return ArmError(
            409,
            "OperationNotAllowed",
            f"Operation could not be completed as it results in exceeding approved {size.family} "
            f"Cores quota. Additional details - Deployment Model: Resource Manager, Location: "
            f"{location}, Current Limit: 0, Current Usage: 0, Additional Required: {size.vcpus}, "
            f"(Minimum) New Limit Required: {size.vcpus}. Submit a request for Quota increase at "
            "https://aka.ms/ProdportalCRP.",
        )

    def delete_vm(self, group: str, name: str) -> Outcome:
        self.group(group)
        rec = self.existing_vm(group, name)
        if rec is None:
            return Outcome(204, None)
        m = self.machine(rec)
        rec["deleting"] = True
        if m is None:  # a Failed VM without a machine goes at once
            del self.resources[rec["id"].lower()]
        elif m.status != TERMINATING:
            self.engine.terminate(NAME, m.id)
        op = self.new_operation("delete", rec["location"], rec["id"], machine_id=m.id if m else None)
        self.save()
        return Outcome(202, None, operation=op, location=rec["location"])

    # ------------------------------------------------------------------ operations

    def new_operation(
        self,
        kind: str,
        location: str,
        rid: str,
        *,
        error: dict[str, str] | None = None,
        machine_id: str | None = None,
    ) -> str:
        op = str(uuid.uuid4())
        self.operations[op] = {
            "kind": kind,
            "location": location,
            "resource": rid,
            "error": error,
            "machine_id": machine_id,
            "start": time.time(),
        }
        while len(self.operations) > MAX_OPERATIONS:
            del self.operations[next(iter(self.operations))]
        return op

    def operation_json(self, op_id: str) -> dict[str, Any]:
        op = self.operations.get(op_id)
        if op is None:
            raise ArmError(404, "NotFound", f"The operation '{op_id}' was not found.")
        status = "Succeeded"
        if op["error"]:
            status = "Failed"
        elif op["kind"] == "delete" and op["machine_id"]:
            m = self.engine.machines.get(op["machine_id"])
            if m is not None and m.status != TERMINATED:
                status = "InProgress"
        out: dict[str, Any] = {"name": op_id, "status": status, "startTime": iso(op["start"])}
        if status != "InProgress":
            out["endTime"] = iso(op["start"])
        if op["error"]:
            out["error"] = dict(op["error"])
        return out

    # ------------------------------------------------------------------ rendering

    def render(self, rec: dict[str, Any], *, instance_view: bool = False) -> dict[str, Any]:
        base = {
            "id": rec["id"],
            "name": rec["name"],
            "type": rec["type"],
            "location": rec["location"],
            "tags": rec["tags"],
        }
        rtype = rec["type"]
        if rtype == VM:
            return self._vm_json(rec, base, instance_view)
        props: dict[str, Any] = {"provisioningState": "Succeeded", "resourceGuid": rec["guid"]}
        base["etag"] = f'W/"{rec["guid"]}"'
        if rtype == NSG:
            props["securityRules"] = [
                {
                    "id": f"{rec['id']}/securityRules/{r['name']}",
                    "name": r["name"],
                    "type": "Microsoft.Network/networkSecurityGroups/securityRules",
                    "properties": {**r["properties"], "provisioningState": "Succeeded"},
                }
                for r in rec["properties"]["securityRules"]
            ]
            props["networkInterfaces"] = [
                {"id": n["id"]} for n in self.of_type(NIC) if n["properties"]["nsg"] == rec["id"].lower()
            ]
        elif rtype == PIP:
            base["sku"] = rec.get("sku")
            props.update(rec["properties"])
            user = next(
                (
                    (n, c)
                    for n in self.of_type(NIC)
                    for c in n["properties"]["ipConfigurations"]
                    if c["pip"] == rec["id"].lower()
                ),
                None,
            )
            if user is not None:
                props["ipConfiguration"] = {"id": f"{user[0]['id']}/ipConfigurations/{user[1]['name']}"}
                address = self._address_of_nic(user[0])
                if address:
                    props["ipAddress"] = address
        elif rtype == NIC:
            configs = []
            for c in rec["properties"]["ipConfigurations"]:
                cp: dict[str, Any] = {
                    "privateIPAddress": rec.get("private_ip"),
                    "privateIPAllocationMethod": "Dynamic",
                    "subnet": {"id": self._canonical(c["subnet"])},
                    "primary": True,
                    "provisioningState": "Succeeded",
                }
                if c["pip"]:
                    cp["publicIPAddress"] = {"id": self._canonical(c["pip"])}
                configs.append(
                    {"id": f"{rec['id']}/ipConfigurations/{c['name']}", "name": c["name"], "properties": cp}
                )
            props["ipConfigurations"] = configs
            if rec["properties"]["nsg"]:
                props["networkSecurityGroup"] = {"id": self._canonical(rec["properties"]["nsg"])}
            vm = self.nic_vm(rec["id"])
            if vm is not None:
                props["virtualMachine"] = {"id": vm["id"]}
            props["primary"] = True
        elif rtype == VNET:
            props["addressSpace"] = rec["properties"]["addressSpace"]
            props["subnets"] = [
                {
                    "id": f"{rec['id']}/subnets/{s['name']}",
                    "name": s["name"],
                    "properties": {
                        "addressPrefix": s["addressPrefix"],
                        "provisioningState": "Succeeded",
                        "ipConfigurations": [
                            {"id": u} for u in self._subnet_users(f"{rec['id']}/subnets/{s['name']}".lower())
                        ],
                    },
                }
                for s in rec["properties"]["subnets"]
            ]
        base["properties"] = props
        return base

    def _canonical(self, rid: str | None) -> str | None:
        """An id as its resource spells it (references are kept lower-cased)."""
        if rid is None:
            return None
        rec = self.resources.get(rid.lower())
        if rec is not None:
            return str(rec["id"])
        if "/subnets/" in rid:
            vnet = self.resources.get(rid.rsplit("/subnets/", 1)[0])
            if vnet is not None:
                return f"{vnet['id']}/subnets/{rid.rsplit('/', 1)[1]}"
        return rid

    def _address_of_nic(self, nic: dict[str, Any]) -> str | None:
        vm = self.nic_vm(nic["id"])
        m = self.machine(vm) if vm else None
        # The machine's own loopback address, once it has one (real Standard static IPs exist from
        # their creation; here the address comes with the machine it reaches).
        return m.address if m is not None else None

    def vm_states(self, rec: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """provisioningState and the instance view's statuses."""
        m = self.machine(rec)
        now = iso(time.time())

        def status(
            code: str, display: str, level: str = "Info", message: str | None = None
        ) -> dict[str, Any]:
            s = {"code": code, "level": level, "displayStatus": display, "time": now}
            if message:
                s["message"] = message
            return s

        if rec.get("failed"):
            f = rec["failed"]
            return "Failed", [
                status(f"ProvisioningState/failed/{f['code']}", "Provisioning failed", "Error", f["message"])
            ]
        if m is None or rec.get("deleting") or m.status == TERMINATING:
            return "Deleting", [
                status("ProvisioningState/deleting", "Deleting"),
                status("PowerState/deallocating", "VM deallocating"),
            ]
        if m.status == PENDING:
            return "Creating", [
                status("ProvisioningState/creating", "Creating"),
                status("PowerState/starting", "VM starting"),
            ]
        if m.status == RUNNING:
            return "Succeeded", [
                status("ProvisioningState/succeeded", "Provisioning succeeded"),
                status("PowerState/running", "VM running"),
            ]
        if m.status == ERROR:
            return "Failed", [
                status(
                    "ProvisioningState/failed/InternalExecutionError",
                    "Provisioning failed",
                    "Error",
                    m.detail or "the VM stopped unexpectedly",
                ),
                status("PowerState/stopped", "VM stopped"),
            ]
        return "Deleting", [status("ProvisioningState/deleting", "Deleting")]

    def _vm_json(self, rec: dict[str, Any], base: dict[str, Any], instance_view: bool) -> dict[str, Any]:
        req = rec["request"]["properties"]
        state, statuses = self.vm_states(rec)
        os_profile = {
            k: v for k, v in (req.get("osProfile") or {}).items() if k not in ("customData", "adminPassword")
        }
        os_profile.setdefault("computerName", rec["name"])
        os_profile.update(secrets=[], allowExtensionOperations=True, requireGuestProvisionSignal=True)
        storage = dict(req.get("storageProfile") or {})
        os_disk = dict(storage.get("osDisk") or {})
        os_disk.update(
            osType="Linux",
            name=rec["os_disk"],
            createOption=os_disk.get("createOption", "FromImage"),
            caching=os_disk.get("caching", "ReadWrite"),
            deleteOption=os_disk.get("deleteOption", "Detach"),
            diskSizeGB=os_disk.get("diskSizeGB", 30),
        )
        storage["osDisk"] = os_disk
        props: dict[str, Any] = {
            "vmId": rec["vm_uuid"],
            "hardwareProfile": req.get("hardwareProfile"),
            "storageProfile": storage,
            "osProfile": os_profile,
            "networkProfile": req.get("networkProfile"),
            "provisioningState": state,
            "timeCreated": iso(rec["created"]),
        }
        for key in ("priority", "evictionPolicy", "billingProfile", "diagnosticsProfile", "securityProfile"):
            if key in req:
                props[key] = req[key]
        if instance_view:
            props["instanceView"] = {
                "computerName": os_profile["computerName"],
                "osName": "ubuntu",
                "osVersion": "22.04",
                "statuses": statuses,
            }
        out = {**base, "properties": props}
        if rec.get("zones"):
            out["zones"] = rec["zones"]
        return out

    def instance_view(self, rec: dict[str, Any]) -> dict[str, Any]:
        return self._vm_json(rec, {}, True)["properties"]["instanceView"]

    # ------------------------------------------------------------------ listings

    def generic(self, rec: dict[str, Any]) -> dict[str, Any]:
        out = {
            "id": rec["id"],
            "name": rec["name"],
            "type": rec["type"],
            "location": rec["location"],
            "tags": rec["tags"],
        }
        if rec.get("zones"):
            out["zones"] = rec["zones"]
        return out

    def side_rows(self) -> list[dict[str, Any]]:
        """Per-machine network resources, for the admin API (a VNet is shared: not listed)."""
        self.prune()
        return [
            {"kind": SIDE_KINDS[r["type"]], "id": r["id"], "name": r["name"], "tags": r["tags"]}
            for r in self.resources.values()
            if r["type"] in (NIC, PIP, NSG)
        ]

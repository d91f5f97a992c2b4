"""The simulated Azure subscription, network: virtual networks and their subnets, network
security groups, Standard public IP addresses and network interfaces — their checks, the references
between them, what ARM refuses to delete while in use, and their ARM JSON; and what a VM's NSG lets in
(`Network.ingress`, the facade's `ingress`). Shared state and checks: `azure_arm_state.py`."""

from __future__ import annotations

import ipaddress
import itertools
import uuid
from typing import TYPE_CHECKING, Any

from fakeclouds.azure_arm_state import (
    NIC,
    NSG,
    PIP,
    PORT_RANGE,
    VM,
    VNET,
    ArmError,
    ArmState,
    Outcome,
    properties_of,
    reference,
    resource_id,
    tags_of,
)

if TYPE_CHECKING:
    from fakeclouds.engine import Machine
    from fakeclouds.facade import IngressRule

_private_ips = itertools.count(4)  # NICs' private addresses, 10.64.x.y in turn


class Network(ArmState):
    """The account's network resources (a part of `Account`)."""

    def put_network(self, group: str, rtype: str, name: str, body: dict[str, Any]) -> Outcome:
        """Create or replace a network resource. Completes at once (provisioningState Succeeded)."""
        self.group(group)
        self._check_name(rtype, name)
        location = self._location(body, rtype)
        rid = resource_id(self.group(group)["name"], rtype, name)
        existing = self.find(rid)
        props = dict(properties_of(body))
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
                "tags": tags_of(body),
                "properties": props,
                "guid": (existing or {}).get("guid") or str(uuid.uuid4()),
            }
        )
        return rec

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
                    or not PORT_RANGE.fullmatch(port)
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
            subnet = reference(cp.get("subnet"))
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
            pip = reference(cp.get("publicIPAddress"))
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
        nsg = reference(props.get("networkSecurityGroup"))
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
                self._refuse_if_in_use(rid, name)
        return {"addressSpace": {"addressPrefixes": list(prefixes)}, "subnets": subnets}

    def _refuse_if_in_use(self, vnet_id: str, subnet: str) -> None:
        """ARM refuses to delete a subnet a NIC still uses (a vnet PUT dropping it, or its DELETE)."""
        users = self._subnet_users(f"{vnet_id}/subnets/{subnet}".lower())
        if users:
            raise ArmError(400, "InUseSubnetCannotBeDeleted",
                           f"Subnet {subnet} is in use by {users[0]} and cannot be deleted.")

    def _subnet_users(self, subnet: str) -> list[str]:
        return [
            n["id"] + "/ipConfigurations/" + c["name"]
            for n in self.of_type(NIC)
            for c in n["properties"]["ipConfigurations"]
            if c["subnet"] == subnet
        ]

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
                self._refuse_if_in_use(rid, s["name"])
        del self.resources[rid.lower()]
        self.save()
        return Outcome(200, None)

    def _network_json(self, rec: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
        """A network resource's ARM JSON over its `base` (id, name, type, location, tags)."""
        rtype = rec["type"]
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

    def ingress(self, machine: Machine) -> list[IngressRule]:
        """What reaches `machine` from outside: its VM's NICs that hold a public IP, each through the
        inbound rules of its NSG. Without an NSG nothing does (a Standard public IP is closed to
        inbound traffic until an NSG allows it). Subnets carry no NSG here (not modelled)."""
        vm = next((v for v in self.of_type(VM) if v.get("machine_id") == machine.id), None)
        if vm is None:
            return []
        out: list[IngressRule] = []
        for nic_id in vm["nics"]:
            nic = self.find(nic_id)
            if nic is None or not any(c["pip"] for c in nic["properties"]["ipConfigurations"]):
                continue
            nsg = self.find(nic["properties"]["nsg"]) if nic["properties"]["nsg"] else None
            if nsg is None:
                continue
            targets = {a for a in (nic.get("private_ip"), machine.address) if a}
            out += [r for r in nsg_inbound(nsg["properties"]["securityRules"], targets) if r not in out]
        return out


# Service tags a rule may name as its source, as networks a peer on the internet is in.
_ANYWHERE = {"*", "any", "internet"}
# ... and as its destination, covering the NIC the traffic arrives on.
_ANY_DESTINATION = {"*", "any", "virtualnetwork"}


def _values(p: dict[str, Any], one: str, many: str) -> list[str]:
    """A rule's field that takes one value (`one`) or a list (`many`, which wins when given)."""
    listed, single = p.get(many), p.get(one)
    return [str(x) for x in (listed if isinstance(listed, list) and listed else [single] if single else [])]


def _sources(p: dict[str, Any]) -> list[str]:
    out = []
    for prefix in _values(p, "sourceAddressPrefix", "sourceAddressPrefixes"):
        if prefix.lower() in _ANYWHERE:
            out.append("0.0.0.0/0")
            continue
        try:
            out.append(str(ipaddress.ip_network(prefix, strict=False)))
        except ValueError:
            continue  # another service tag (VirtualNetwork, AzureLoadBalancer, ...): no internet peer
    return out


def _reaches(p: dict[str, Any], targets: set[str]) -> bool:
    for prefix in _values(p, "destinationAddressPrefix", "destinationAddressPrefixes"):
        if prefix.lower() in _ANY_DESTINATION:
            return True
        try:
            net = ipaddress.ip_network(prefix, strict=False)
        except ValueError:
            continue
        if any(ipaddress.ip_address(t) in net for t in targets):
            return True
    return False


def _ports(p: dict[str, Any]) -> list[tuple[int, int]]:
    out = []
    for r in _values(p, "destinationPortRange", "destinationPortRanges"):
        if r == "*":
            out.append((1, 65535))
        else:
            lo, _, hi = r.partition("-")
            out.append((max(int(lo), 1), int(hi or lo)))
    return [(lo, hi) for lo, hi in out if lo <= hi]


def _minus(rule: IngressRule, deny: IngressRule) -> list[IngressRule]:
    """`rule` without what `deny` covers."""
    lo, hi, cidr = rule
    dlo, dhi, dcidr = deny
    olo, ohi = max(lo, dlo), min(hi, dhi)
    net, dnet = ipaddress.ip_network(cidr), ipaddress.ip_network(dcidr)
    if olo > ohi or net.version != dnet.version or not net.overlaps(dnet):
        return [rule]
    out: list[IngressRule] = []
    if lo < olo:
        out.append((lo, olo - 1, cidr))
    if ohi < hi:
        out.append((ohi + 1, hi, cidr))
    if not net.subnet_of(dnet):  # type: ignore[arg-type]
        out += [(olo, ohi, str(n)) for n in net.address_exclude(dnet)]  # type: ignore[arg-type]
    return out


def nsg_inbound(rules: list[dict[str, Any]], targets: set[str]) -> list[IngressRule]:
    """The TCP (first port, last port, source CIDR) an NSG's rules let in to `targets` (the NIC's
    addresses), as Azure evaluates them: inbound rules by priority, the first match decides, so a
    Deny shadows the Allows after it; Azure's default rules admit nothing from the internet. A rule
    narrowed to source ports admits no arbitrary peer, so only its Deny counts (conservatively, never)."""
    allowed: list[IngressRule] = []
    denied: list[IngressRule] = []
    inbound = sorted(
        (r["properties"] for r in rules if r["properties"].get("direction") == "Inbound"),
        key=lambda p: int(p.get("priority") or 0),
    )
    for p in inbound:
        if p.get("protocol") not in ("Tcp", "*") or not _reaches(p, targets):
            continue
        if _values(p, "sourcePortRange", "sourcePortRanges") not in ([], ["*"]):
            continue
        here = [(lo, hi, c) for lo, hi in _ports(p) for c in _sources(p)]
        if p.get("access") == "Deny":
            denied += here
            continue
        for rule in here:
            left = [rule]
            for deny in denied:
                left = [piece for r in left for piece in _minus(r, deny)]
            allowed += [r for r in left if r not in allowed]
    return allowed

"""The simulated Compute Engine's reading of requests: what an instance insert and a firewall insert
may carry (names, machine and accelerator types, scheduling, metadata and its SSH keys, labels,
tags, boot image, network interfaces; a firewall's rules, ranges and target tags) and a `requestId`,
each refused with Compute Engine's 400 `invalid` (or 404 `notFound`) wording. The router
(`gcp_api.py`) calls these and hands what they return to the engine and `gcp_responses.py`.
"""

from __future__ import annotations

import ipaddress
import re
import time
import uuid
from typing import Any

from fastapi import Request

from fakeclouds.errors import Invalid, NotFound
from fakeclouds.gcp_catalog import ACCELERATOR_TYPES, INSTANCE_TYPES, MACHINE_TYPES, ZONES, machine_types_in
from fakeclouds.gcp_state import API, numeric_id, rfc3339
from providers.gcp_catalog import N1_ATTACHABLE, combo_type

LOGIN_USER = "ubuntu"
NAME_PATTERN = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
PUBLIC_IMAGE_PROJECTS = frozenset(
    {
        "ubuntu-os-cloud",
        "ubuntu-os-accelerator-images",
        "ubuntu-os-pro-cloud",
        "debian-cloud",
        "deeplearning-platform-release",
        "cos-cloud",
    }
)
_IMAGE = re.compile(
    r"(?:https://www\.googleapis\.com/compute/v1/)?projects/([a-z][-a-z0-9]{4,28}[a-z0-9])"
    r"/global/images/(?:family/)?" + NAME_PATTERN
)
_NETWORKS = {None, "default", "global/networks/default"}
_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
_PROTOCOLS = {"tcp", "udp", "icmp", "esp", "ah", "sctp", "ipip", "all"}
METADATA_MAX = 512 * 1024
_TYPES = {t.name: t for t in INSTANCE_TYPES}


def invalid(field: str, value: object, why: str) -> Invalid:
    return Invalid(f"Invalid value for field '{field}': '{value}'. {why}")


def check_name(field: str, name: object) -> str:
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
        raise invalid(field, name, f"Must be a match of regex '(?:{NAME_PATTERN})'")
    return name


def _last(path: object, collection: str, field: str, zone: str | None = None) -> str:
    """The resource name at the end of a (partial) URL like `zones/Z/machineTypes/T`; its zone must be
    the request's."""
    text = str(path or "")
    m = re.fullmatch(r"(?:.*/)?(?:zones/([^/]+)/)?" + collection + r"/([^/]+)", text)
    if m is None or (zone is not None and m.group(1) not in (None, zone)):
        raise invalid(field, text, f"Must be a {collection} URL in zone '{zone}'")
    return m.group(2)


# --------------------------------------------------------------------------- instances


def _accelerators(body: dict[str, Any], zone: str) -> list[tuple[str, int]]:
    out = []
    for i, acc in enumerate(body.get("guestAccelerators") or []):
        field = f"resource.guestAccelerators[{i}].acceleratorType"
        name = _last(acc.get("acceleratorType"), "acceleratorTypes", field, zone)
        if name not in ZONES[zone][1]:
            raise invalid(field, name, f"Accelerator type '{name}' does not exist in zone '{zone}'.")
        count = int(acc.get("acceleratorCount") or 0)
        if not 1 <= count <= ACCELERATOR_TYPES[name].max_cards:
            raise invalid(
                f"resource.guestAccelerators[{i}].acceleratorCount",
                count,
                f"At most {ACCELERATOR_TYPES[name].max_cards} of '{name}' per instance.",
            )
        out.append((name, count))
    return out


def engine_type(body: dict[str, Any], zone: str) -> tuple[str, str, list[tuple[str, int]]]:
    """(engine instance type, machine type, accelerators) of an insert body."""
    given = body.get("machineType")
    machine_name = _last(given, "machineTypes", "resource.machineType", zone)
    machine = MACHINE_TYPES.get(machine_name)
    if machine is None or machine not in machine_types_in(zone):
        raise invalid(
            "resource.machineType",
            given,
            f"Machine type with name '{machine_name}' does not exist in zone '{zone}'.",
        )
    accelerators = _accelerators(body, zone)
    if machine.accelerator is not None:  # A2/G2: the GPUs come with the machine type
        if accelerators and accelerators != [(machine.accelerator, machine.count)]:
            raise Invalid(
                f"Machine type '{machine_name}' has its accelerators built in; "
                "guestAccelerators must be empty or match them."
            )  # wording [unconfirmed]
        return machine_name, machine_name, [(machine.accelerator, machine.count)]
    if len(accelerators) > 1:
        raise Invalid("Only one accelerator type may be attached to an instance.")  # wording [unconfirmed]
    if not accelerators:
        return machine_name, machine_name, []
    accelerator, count = accelerators[0]
    if accelerator not in N1_ATTACHABLE:
        raise Invalid(
            f"Accelerator type '{accelerator}' cannot be attached to machine type '{machine_name}'."
        )  # wording [unconfirmed]
    name = combo_type(machine_name, accelerator, count)
    if name not in _TYPES or zone not in _TYPES[name].prices:
        raise Invalid(f"{count} x {accelerator} on {machine_name} is not modelled by this simulation")
    return name, machine_name, accelerators


def scheduling(body: dict[str, Any], gpus: bool) -> tuple[dict[str, Any], bool]:
    given = dict(body.get("scheduling") or {})
    spot = given.get("provisioningModel") == "SPOT" or bool(given.get("preemptible"))
    sched = {
        "onHostMaintenance": "TERMINATE" if spot else "MIGRATE",
        "automaticRestart": not spot,
        "provisioningModel": "SPOT" if spot else "STANDARD",
        "preemptible": bool(given.get("preemptible")),
    }
    sched.update(given)
    if gpus and sched["onHostMaintenance"] != "TERMINATE":
        raise Invalid("Instances with guest accelerators do not support live migration.")
    if spot and sched["automaticRestart"]:
        raise Invalid("Scheduling.automaticRestart must be false for Spot VMs.")  # wording [unconfirmed]
    return sched, spot


def metadata(body: dict[str, Any]) -> tuple[list[dict[str, str]], list[str], str | None]:
    """(items, login user's SSH keys, user-data) of the instance's metadata."""
    items = [
        {"key": str(i.get("key")), "value": str(i.get("value") or "")}
        for i in (body.get("metadata") or {}).get("items") or []
    ]
    if sum(len(i["key"]) + len(i["value"]) for i in items) > METADATA_MAX:
        raise Invalid("Metadata exceeds the maximum size of 512 KB.")
    by_key = {i["key"]: i["value"] for i in items}
    keys = []
    for line in by_key.get("ssh-keys", "").splitlines():
        user, sep, key = line.strip().partition(":")
        if sep and user == LOGIN_USER and key.strip():
            keys.append(key.strip())
    if not keys:  # a simulation limit: its machines only take logins with a key
        raise Invalid(f"the simulation needs an 'ssh-keys' metadata line for user {LOGIN_USER!r}")
    return items, keys, by_key.get("user-data")


def labels(labels: object) -> dict[str, str]:
    if not isinstance(labels, dict) or len(labels) > 64:
        raise invalid("resource.labels", "", "At most 64 labels.")
    for k, v in labels.items():
        if not _LABEL_KEY.fullmatch(str(k)) or not _LABEL_VALUE.fullmatch(str(v)):
            raise invalid("resource.labels", k, "Label keys and values violate format constraints.")
    return {str(k): str(v) for k, v in labels.items()}


def tags(body: dict[str, Any]) -> list[str]:
    items = list((body.get("tags") or {}).get("items") or [])
    return [check_name(f"resource.tags.items[{i}]", t) for i, t in enumerate(items)]


def boot_image(body: dict[str, Any], project: str) -> str:
    disks = list(body.get("disks") or [])
    boot = [d for d in disks if d.get("boot")] or disks[:1]
    image = ((boot[0].get("initializeParams") or {}).get("sourceImage") if boot else None) or ""
    m = _IMAGE.fullmatch(image)
    if m is None:
        raise invalid(
            "resource.disks[0].initializeParams.sourceImage",
            image,
            "A boot disk with a source image (projects/P/global/images/[family/]NAME) is required.",
        )
    if m.group(1) not in PUBLIC_IMAGE_PROJECTS | {project}:
        raise NotFound(f"The resource 'projects/{m.group(1)}/global/images/...' was not found")
    return image


def nat(body: dict[str, Any], project: str) -> bool:
    nics = list(body.get("networkInterfaces") or [])
    if not nics:
        raise invalid("resource.networkInterfaces", "", "At least one network interface is required.")
    for nic in nics:
        network = nic.get("network")
        if network not in _NETWORKS and not str(network).endswith(
            f"projects/{project}/global/networks/default"
        ):
            raise NotFound(f"The resource '{network}' was not found")
    return any(
        a.get("type", "ONE_TO_ONE_NAT") == "ONE_TO_ONE_NAT" for a in nics[0].get("accessConfigs") or []
    )



def firewall(body: dict[str, Any], project: str) -> dict[str, Any]:
    name = check_name("resource.name", body.get("name"))
    network = body.get("network")
    if network not in _NETWORKS and not str(network).endswith(f"projects/{project}/global/networks/default"):
        raise NotFound(f"The resource '{network}' was not found")
    direction = body.get("direction", "INGRESS")
    if direction not in ("INGRESS", "EGRESS"):
        raise invalid("resource.direction", direction, "Must be INGRESS or EGRESS.")
    allowed = list(body.get("allowed") or [])
    if not allowed and not body.get("denied"):
        raise invalid("resource.allowed", "", "A firewall must allow or deny something.")
    for i, rule in enumerate(allowed):
        proto = str(rule.get("IPProtocol", "")).lower()
        if proto not in _PROTOCOLS:
            raise invalid(f"resource.allowed[{i}].IPProtocol", proto, "Unknown protocol.")
        for port in rule.get("ports") or []:
            lo, _, hi = str(port).partition("-")
            if (
                proto not in ("tcp", "udp", "sctp")
                or not (lo.isdigit() and (not hi or hi.isdigit()))
                or not 0 <= int(lo) <= int(hi or lo) <= 65535
            ):
                raise invalid(f"resource.allowed[{i}].ports", port, "Invalid port or port range.")
    for cidr in body.get("sourceRanges") or []:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise invalid("resource.sourceRanges", cidr, "Must be an IP range in CIDR notation.") from None
    tags = [check_name(f"resource.targetTags[{i}]", t) for i, t in enumerate(body.get("targetTags") or [])]
    priority = int(body.get("priority", 1000))
    if not 0 <= priority <= 65535:
        raise invalid("resource.priority", priority, "Must be 0 to 65535.")
    if len(str(body.get("description") or "")) > 2048:
        raise invalid("resource.description", "...", "At most 2048 characters.")
    return {
        "kind": "compute#firewall",
        "id": numeric_id(),
        "creationTimestamp": rfc3339(time.time()),
        "name": name,
        "description": str(body.get("description") or ""),
        "network": f"{API}/projects/{project}/global/networks/default",
        "priority": priority,
        "direction": direction,
        "sourceRanges": list(body.get("sourceRanges") or []),
        "targetTags": tags,
        "allowed": allowed,
        "denied": list(body.get("denied") or []),
        "logConfig": {"enable": False},
        "disabled": bool(body.get("disabled", False)),
        "selfLink": f"{API}/projects/{project}/global/firewalls/{name}",
    }



def request_id(request: Request) -> str | None:
    raw = request.query_params.get("requestId")
    if raw is None:
        return None
    try:
        parsed = uuid.UUID(raw)
    except ValueError:
        raise invalid("requestId", raw, "Must be a UUID.") from None
    if parsed.int == 0:
        raise invalid("requestId", raw, "The zero UUID is not supported.")
    return str(parsed)

"""The Azure adapter's VM as ARM JSON: names (VM, resource group), the image URN, base64 custom
data, the NSG rules (SSH and the asked ports from anywhere, the Kubernetes API from the asked networks)
and the VM body the adapter PUTs; and what it reads back: the VM's
`timeCreated` and its state from the instance view (provisioning state, power state, why
provisioning failed).
"""

from __future__ import annotations

import base64
import hashlib
import re
from datetime import datetime
from typing import Any

from providers import cloudinit
from providers.base import InstanceState, InvalidRequest, LaunchSpec, Offer
from providers.cloudtime import created_at

DEFAULT_IMAGE = "microsoft-dsvm:ubuntu-hpc:2204:latest"  # Ubuntu 22.04 with NVIDIA drivers and CUDA
VM_NAME_MAX = 64
MAX_CUSTOM_DATA = 65535


def vm_name(installation_id: str, key: str) -> str:
    """`gpuprov-<installation>-<key>`, at most 64 characters (Linux VM names); a longer one is
    shortened deterministically (head + hash), so a key always yields the same name."""
    name = f"gpuprov-{installation_id}-{key}"
    if len(name) <= VM_NAME_MAX and not name.endswith("-"):
        return name
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    head = name[: VM_NAME_MAX - 9].rstrip("-")
    return f"{head}-{digest}"


def group_name(installation_id: str, region: str) -> str:
    return f"gpuprov-{installation_id}-{region}"


# An image URN, `publisher:offer:sku:version` (Capabilities.image_pattern: the request refuses another form)
IMAGE_URN = r"[^:\s]+:[^:\s]+:[^:\s]+:[^:\s]+"
IMAGE_FORM = ("azure: --image takes an image URN publisher:offer:sku:version "
              "(e.g. Canonical:ubuntu-24_04-lts:server:latest)")


def parse_image(urn: str) -> dict[str, str]:
    """An image URN `publisher:offer:sku:version` as an imageReference."""
    if not re.fullmatch(IMAGE_URN, urn):
        raise InvalidRequest(IMAGE_FORM)
    return dict(zip(("publisher", "offer", "sku", "version"), urn.split(":"), strict=True))


def custom_data(user_data: str | None, *, k3s: bool) -> str:
    """Base64 cloud-init for osProfile.customData: k3s at boot (when asked), then the caller's own
    user data (MIME multipart, so cloud-init runs both)."""
    text = cloudinit.boot_user_data(user_data, k3s=k3s) or ""
    raw = text.encode()
    if len(raw) > MAX_CUSTOM_DATA:
        raise InvalidRequest(f"azure: user data is {len(raw)} bytes; Azure takes at most {MAX_CUSTOM_DATA}")
    return base64.b64encode(raw).decode()



def time_created(vm: dict[str, Any]) -> datetime | None:
    """The VM's `properties.timeCreated` (ISO 8601, compute API 2021-11-01 and later)."""
    return created_at((vm.get("properties") or {}).get("timeCreated"))



def nsg_rule(name: str, port: int, priority: int, sources: list[str] | None = None) -> dict[str, Any]:
    """An inbound TCP allow rule for `port`: from anywhere, or from the CIDRs `sources` only
    (`sourceAddressPrefixes`; Azure takes it instead of the single `sourceAddressPrefix`)."""
    source: dict[str, Any] = (
        {"sourceAddressPrefixes": list(sources)} if sources else {"sourceAddressPrefix": "*"}
    )
    return {
        "name": name,
        "properties": {
            "protocol": "Tcp",
            "sourcePortRange": "*",
            "destinationPortRange": str(port),
            **source,
            "destinationAddressPrefix": "*",
            "access": "Allow",
            "priority": priority,
            "direction": "Inbound",
        },
    }



def vm_body(
    offer: Offer, spec: LaunchSpec, image: dict[str, str], data: str, nic_id: str, *, user: str,
    computer_name: str, tags: dict[str, str],
) -> dict[str, Any]:
    props: dict[str, Any] = {
        "hardwareProfile": {"vmSize": offer.instance_type},
        "storageProfile": {
            "imageReference": image,
            "osDisk": {
                "createOption": "FromImage",
                "deleteOption": "Delete",
                "managedDisk": {"storageAccountType": "StandardSSD_LRS"},
            },
        },
        "osProfile": {
            "computerName": computer_name,
            "adminUsername": user,
            "customData": data,
            "linuxConfiguration": {
                "disablePasswordAuthentication": True,
                "ssh": {
                    "publicKeys": [
                        {"path": f"/home/{user}/.ssh/authorized_keys", "keyData": k.strip()}
                        for k in spec.ssh_public_keys
                    ]
                },
            },
        },
        "networkProfile": {"networkInterfaces": [{"id": nic_id, "properties": {"primary": True}}]},
    }
    if offer.spot:
        # Deallocate, not Delete: an eviction is then visible through ARM — the Spot VM stays,
        # `PowerState/deallocated`, which gpuprov never asks for (`evicted`) — where a deleted VM is
        # only a 404, like any other disappearance. Its compute stops billing at eviction; its OS
        # disk and public IP bill until the lost allocation's terminate deletes them (one watch
        # interval). learn.microsoft.com/azure/virtual-machines/spot-vms ("Eviction policy").
        props.update(priority="Spot", evictionPolicy="Deallocate", billingProfile={"maxPrice": -1})
    body: dict[str, Any] = {
        "location": offer.region,
        "tags": tags,
        "properties": props,
    }
    if offer.zone:
        body["zones"] = [offer.zone]
    return body



def _statuses(props: dict[str, Any]) -> list[dict[str, Any]]:
    return list(((props.get("instanceView") or {}).get("statuses")) or [])


def provisioning_failure(view: dict[str, Any] | None) -> tuple[str, str]:
    """(code, message) of a failed provisioning, from an instance view's statuses."""
    for s in (view or {}).get("statuses") or []:
        code = str(s.get("code") or "")
        if code.startswith("ProvisioningState/failed/"):
            return code.rsplit("/", 1)[1], str(s.get("message") or "")
    return "", ""


def _power(props: dict[str, Any]) -> str:
    return next((str(s.get("code"))[len("PowerState/"):] for s in _statuses(props)
                 if str(s.get("code") or "").startswith("PowerState/")), "")


def evicted(props: dict[str, Any]) -> bool:
    """Azure evicted this Spot VM: `priority: Spot` and deallocated (or deallocating), which gpuprov
    never does itself (it only deletes). ARM has no eviction flag on the VM; the instance view's
    power state is what it shows (Scheduled Events' `Preempt` notice is only inside the VM)."""
    return props.get("priority") == "Spot" and _power(props) in ("deallocated", "deallocating")


def vm_state(props: dict[str, Any]) -> tuple[InstanceState, str]:
    provisioning = str(props.get("provisioningState") or "")
    power = next(
        (
            str(s.get("code"))[len("PowerState/") :]
            for s in _statuses(props)
            if str(s.get("code") or "").startswith("PowerState/")
        ),
        "",
    )
    if provisioning == "Failed":
        code, message = provisioning_failure(props.get("instanceView"))
        return InstanceState.ERROR, f"Failed: {code}: {message}".rstrip(": ")
    if provisioning == "Deleting":
        return InstanceState.TERMINATING, "Deleting"
    detail = f"{provisioning}, {power or 'no power state'}"
    if power == "running" and provisioning == "Succeeded":
        return InstanceState.RUNNING, detail
    if power in ("stopped", "deallocated"):
        return InstanceState.STOPPED, detail
    if power in ("stopping", "deallocating"):
        return InstanceState.STOPPING, detail
    return InstanceState.PENDING, detail

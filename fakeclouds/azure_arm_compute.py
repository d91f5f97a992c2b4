"""The simulated Azure subscription, compute: virtual machines — what ARM refuses synchronously
(size, zone, image, admin user, SSH keys, custom data, spot), allocation on the engine (or an
AllocationFailed operation), converging a PUT under a taken name, deletion, and the VM's JSON and
instance view with its OS disk. Shared state and checks: `azure_arm_state.py`.

A Spot VM's eviction (`admin.preempt`, fakeclouds/preemption.py): with evictionPolicy Deallocate it
stays `Succeeded` and `PowerState/deallocated` until deleted (its compute no longer billing); with
Delete it is gone (`azure_arm_state.evicted_kept`). Azure's 30 s notice is a Scheduled Event inside
the VM (IMDS), not in ARM: nothing shows it here."""


from __future__ import annotations

import base64
import binascii
import re
import time
import uuid
from typing import Any

from fakeclouds import azure_catalog as cat
from fakeclouds import guest_power, preemption
from fakeclouds.azure_arm_state import (
    MAX_CUSTOM_DATA,
    NAME,
    NIC,
    VM,
    ArmError,
    ArmState,
    Outcome,
    evicted_kept,
    properties_of,
    reference,
    resource_id,
    tags_of,
)
from fakeclouds.common import iso
from fakeclouds.engine import ERROR, PENDING, RUNNING, TERMINATING
from fakeclouds.errors import Invalid, NoCapacity, QuotaExceeded
from fakeclouds.ssh import parse_public_key


class Compute(ArmState):
    """The account's virtual machines (a part of `Account`)."""

    def vm_checks(self, group: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """Everything ARM refuses synchronously (nothing is created): returns the normalized request."""
        self.group(group)
        self._check_name(VM, name)
        location = self._location(body, VM)
        props = properties_of(body)
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
        nics = [reference(n) for n in (props.get("networkProfile") or {}).get("networkInterfaces") or []]
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
                    labels={k: v for k, v in tags_of(body).items()},
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
            "tags": tags_of(body),
            "zones": [zone] if zone else None,
            "machine_id": machine.id if machine else None,
            "vm_uuid": vm_uuid,
            "failed": failed,
            "deleting": False,
            "created": time.time(),
            "request": {"properties": properties_of(body)},
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
        elif preemption.reclaimed(m):  # an evicted (deallocated) Spot VM: nothing runs, it just goes
            preemption.release(self.engine, m)
        elif m.status != TERMINATING:
            self.engine.terminate(NAME, m.id)
        op = self.new_operation("delete", rec["location"], rec["id"], machine_id=m.id if m else None)
        self.save()
        return Outcome(202, None, operation=op, location=rec["location"])

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
        if m is not None and evicted_kept(rec, m):  # a Spot VM evicted with Deallocate
            return "Succeeded", [
                status("ProvisioningState/succeeded", "Provisioning succeeded"),
                status("PowerState/deallocated", "VM deallocated"),
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
        if m.status == ERROR and m.detail == guest_power.STOPPED:  # shut down from inside: Stopped
            return "Succeeded", [  # ...still allocated, still billed (guest_power.py, Azure's stop_billing)
                status("ProvisioningState/succeeded", "Provisioning succeeded"),
                status("PowerState/stopped", "VM stopped"),
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

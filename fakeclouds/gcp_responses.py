"""What the simulated Compute Engine answers: its error bodies (`error_response`, mapping the
simulation's `CloudError`s onto Google's codes and reasons, and `Forbidden`), an instance's JSON as
the engine's machine stands, the catalogue's rows (machine types, accelerator types) and the
aggregated lists with their per-zone NO_RESULTS_ON_PAGE warnings. The router (`gcp_api.py`) serves them.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from fakeclouds import gcp_filter, preemption
from fakeclouds.engine import PENDING, RUNNING, TERMINATING, Machine
from fakeclouds.errors import (
    BadBody,
    CloudError,
    LostResponse,
    NameConflict,
    NotFound,
    QuotaExceeded,
    RateLimit,
    ServerFault,
    Unauthorized,
)
from fakeclouds.gcp_auth import PROJECT
from fakeclouds.gcp_catalog import ACCELERATOR_TYPES, MACHINE_TYPES, ZONES, machine_types_in
from fakeclouds.gcp_state import API, rfc3339
from fakeclouds.vendor_errors import retry_after_header

_UNAUTHENTICATED = (
    "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
    "cookie or other valid authentication credential. See "
    "https://developers.google.com/identity/sign-in/web/devconsole-project."
)


class Forbidden(CloudError):
    """403 `forbidden`: the credentials lack permission (here: another project than the key's)."""


def _error(
    status: int, reason: str, message: str, domain: str = "global", headers: dict[str, str] | None = None
) -> JSONResponse:
    err: dict[str, Any] = {
        "code": status,
        "message": message,
        "errors": [{"message": message, "domain": domain, "reason": reason}],
    }
    if status == 401:
        err["errors"][0].update(location="Authorization", locationType="header")
        err["status"] = "UNAUTHENTICATED"
    return JSONResponse({"error": err}, status_code=status, headers=headers)


def error_response(exc: CloudError, _request: Request | None = None) -> JSONResponse:
    if isinstance(exc, BadBody):  # not JSON, or not an object (an absent body is `{}`)
        return _error(400, "invalid", "Invalid JSON payload received.")
    if isinstance(exc, Unauthorized):
        return _error(401, "authError", _UNAUTHENTICATED)
    if isinstance(exc, Forbidden):
        return _error(403, "forbidden", exc.message)
    if isinstance(exc, RateLimit):
        # Compute Engine sends no Retry-After; the simulation does, so tests can steer the delay.
        return _error(
            403,
            "rateLimitExceeded",
            "Rate Limit Exceeded",
            "usageLimits",
            headers={"Retry-After": retry_after_header(exc.retry_after)},
        )
    if isinstance(exc, NotFound):
        return _error(404, "notFound", exc.message)
    if isinstance(exc, NameConflict):
        return _error(409, "alreadyExists", exc.message)
    if isinstance(exc, QuotaExceeded):
        return _error(403, "quotaExceeded", exc.message, "usageLimits")
    if isinstance(exc, LostResponse):
        return _error(504, "deadlineExceeded", "Deadline exceeded (the call took effect; injected)")
    if isinstance(exc, ServerFault):
        return _error(
            exc.status, "backendError", "Internal error. Please try again or contact Google Support."
        )
    return _error(400, "invalid", exc.message)



def _instance_status(m: Machine, now: float) -> str:
    if m.status == PENDING:
        return "PROVISIONING" if now < (m.created_at + m.boot_at) / 2 else "STAGING"
    if preemption.noticed(m):  # the preemption's ACPI soft off: the guest shuts down (gcp_preemption.py)
        return "STOPPING"
    return {RUNNING: "RUNNING", TERMINATING: "STOPPING"}.get(m.status, "TERMINATED")


def instance_json(m: Machine, project: str, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    x = m.extra
    zone_url = f"{API}/projects/{project}/zones/{m.region}"
    status = _instance_status(m, now)
    access: dict[str, Any] = {
        "kind": "compute#accessConfig",
        "type": "ONE_TO_ONE_NAT",
        "name": "External NAT",
        "networkTier": "PREMIUM",
    }
    if m.address and status != "PROVISIONING" and status != "STAGING":
        access["natIP"] = m.address  # an external address stays with the instance once it has one
    out: dict[str, Any] = {
        "kind": "compute#instance",
        "id": m.id,
        "creationTimestamp": rfc3339(m.created_at),
        "name": m.name,
        "description": x.get("description", ""),
        "tags": {"items": x.get("tags", []), "fingerprint": "sim"},
        "machineType": f"{zone_url}/machineTypes/{x['machine_type']}",
        "status": status,
        "zone": zone_url,
        "networkInterfaces": [
            {
                "kind": "compute#networkInterface",
                "name": "nic0",
                "network": f"{API}/projects/{project}/global/networks/default",
                "networkIP": f"10.128.{int(m.id) % 250}.{int(m.id) // 250 % 250 + 2}",
                "accessConfigs": [access] if x.get("nat") else [],
            }
        ],
        "disks": [
            {
                "kind": "compute#attachedDisk",
                "type": "PERSISTENT",
                "mode": "READ_WRITE",
                "boot": True,
                "autoDelete": True,
                "deviceName": "persistent-disk-0",
                "index": 0,
                "source": f"{zone_url}/disks/{m.name}",
                "diskSizeGb": str(x.get("disk_gb", 10)),
            }
        ],
        "metadata": {"kind": "compute#metadata", "items": x.get("metadata", []), "fingerprint": "sim"},
        "scheduling": x.get("scheduling", {}),
        "labels": m.labels,
        "labelFingerprint": "sim",
        "guestAccelerators": [
            {"acceleratorType": f"{zone_url}/acceleratorTypes/{a}", "acceleratorCount": n}
            for a, n in x.get("accelerators", [])
        ],
        "cpuPlatform": "Intel Cascade Lake",
        "deletionProtection": False,
        "selfLink": f"{zone_url}/instances/{m.name}",
    }
    if status == "TERMINATED":
        out["statusMessage"] = ("Instance was preempted." if preemption.reclaimed(m)
                                else m.detail or "Instance terminated by Compute Engine.")
    if x.get("spot"):
        out["scheduling"] = {**out["scheduling"], "provisioningModel": "SPOT"}
    return out



def aggregated_list(kind: str, key: str, rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    items: dict[str, Any] = {}
    for zone in ZONES:
        found = rows.get(zone, [])
        items[f"zones/{zone}"] = (
            {key: found}
            if found
            else {
                "warning": {
                    "code": "NO_RESULTS_ON_PAGE",
                    "message": f"There are no results for scope 'zones/{zone}' on this page.",
                    "data": [{"key": "scope", "value": f"zones/{zone}"}],
                }
            }
        )
    return {"kind": kind, "id": f"projects/{PROJECT}/aggregated/{key}", "items": items}


def machine_type_json(project: str, zone: str, name: str) -> dict[str, Any]:
    m = MACHINE_TYPES[name]
    out: dict[str, Any] = {
        "kind": "compute#machineType",
        "id": str(zlib.crc32(name.encode())),
        "name": name,
        "description": m.description,
        "guestCpus": m.vcpus,
        "memoryMb": m.memory_mb,
        "zone": zone,
        "isSharedCpu": False,
        "maximumPersistentDisks": 128,
        "maximumPersistentDisksSizeGb": "263168",
        "selfLink": f"{API}/projects/{project}/zones/{zone}/machineTypes/{name}",
    }
    if m.accelerator:
        out["accelerators"] = [{"guestAcceleratorType": m.accelerator, "guestAcceleratorCount": m.count}]
    return out

def machine_types(project: str, zone: str, flt: str | None) -> list[dict[str, Any]]:
    keep = gcp_filter.parse(flt)
    rows = [machine_type_json(project, zone, m.name) for m in machine_types_in(zone)]
    return [r for r in rows if keep(r)]

def accelerator_types(project: str, zone: str, flt: str | None) -> list[dict[str, Any]]:
    keep = gcp_filter.parse(flt)
    rows = [
        {
            "kind": "compute#acceleratorType",
            "id": str(zlib.crc32(a.encode())),
            "name": a,
            "description": ACCELERATOR_TYPES[a].description,
            "maximumCardsPerInstance": ACCELERATOR_TYPES[a].max_cards,
            "zone": f"{API}/projects/{project}/zones/{zone}",
            "selfLink": f"{API}/projects/{project}/zones/{zone}/acceleratorTypes/{a}",
        }
        for a in ZONES[zone][1]
    ]
    return [r for r in rows if keep(r)]

"""Google Compute Engine, simulated: the REST API v1 (`/compute/v1/projects/...`) that
google-cloud-compute's REST transport calls, served under this facade's prefix, so the adapter runs
the official SDK unchanged with `client_options={"api_endpoint": <server>/gcp}`. `FACADE` at the
bottom declares it.

Modelled, as Compute Engine does it:
- Auth: every request carries the SDK's self-signed JWT; it is verified against the public half of
  the service-account key this simulation issues (fakeclouds/gcp_auth.py): signature, key id,
  issuer, audience or scope, expiry. Anything else is Google's 401 `authError`. A project other than
  the key's is 403 `forbidden` ("Required '...' permission").
- Long-running operations: insert and delete answer an Operation (RUNNING), polled on
  `zones/{zone}/operations/{name}` / `global/operations/{name}`. An insert's operation is DONE a
  quarter of the boot delay later, a delete's once the machine is gone. Capacity and quota
  failures are not HTTP errors: the insert answers 200 and its operation ends DONE with
  `error.errors[0].code` ZONE_RESOURCE_POOL_EXHAUSTED (httpErrorStatusCode 503) or QUOTA_EXCEEDED (403).
- `requestId` (insert, delete): a UUID; the same id again, within 60 minutes, answers the first
  request's operation (also a failed one) and does nothing else; malformed or the zero UUID is 400.
- Names: `[a-z]([-a-z0-9]{0,61}[a-z0-9])?`, unique per zone: a second instance under a taken name is
  409 `alreadyExists` (whatever its parameters). Firewall names alike, unique per project.
- Rate limiting: 403 with reason `rateLimitExceeded` (domain usageLimits).
- Lists: `filter` (the subset in gcp_filter.py), aggregatedList with per-zone scopes and
  NO_RESULTS_ON_PAGE warnings; everything in one page (no nextPageToken).
- Instances: status PROVISIONING -> STAGING -> RUNNING; STOPPING while being deleted, then 404;
  a machine that died is TERMINATED (Compute Engine stopped it: it still exists until deleted). The
  external address (`accessConfigs[0].natIP`, when an ONE_TO_ONE_NAT access config was asked for) is
  the machine's own loopback address, SSH on port 22 there; `ssh-keys` metadata lines for `ubuntu`
  are its login keys, `user-data` runs at boot (cloud-init's `#!` scripts and ssh_authorized_keys).

Refused, as Compute Engine refuses them: a bad or taken name; an unknown zone; a machine type or
accelerator type not offered in the zone (or a bundled-GPU type with other accelerators); GPUs
without `onHostMaintenance: TERMINATE`; a Spot VM with `automaticRestart: true`; no network
interface, a network other than `default`; no boot disk image, an image outside the public image
projects and the caller's own; bad labels or tags; metadata over 512 KB; a firewall with a bad name,
protocol, port range, CIDR or target tag; deleting what does not exist (404 `notFound`).

Not modelled: pagination, stopping/starting/resetting, preemption notices, zones going DOWN, disks,
networks and images as resources (the boot image is checked for shape and project only, and does
not change the machine), firewall rules being enforced (they are stored, validated and listed; every
machine's port 22 is reachable), `wait` on operations, IAM beyond the one project, label fingerprints.
Simulation limits: an instance needs an `ssh-keys` entry for `ubuntu` (400 otherwise; Compute Engine
would boot it unreachable); a 403 `rateLimitExceeded` carries `Retry-After` (Compute Engine sends
none: its per-minute quotas refill at the next minute) so tests can steer the delay.
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
import uuid
import zlib
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from fakeclouds import gcp_filter, k3s
from fakeclouds.bodies import optional_object
from fakeclouds.common import run_op
from fakeclouds.engine import PENDING, RUNNING, TERMINATING, Engine, Machine
from fakeclouds.errors import (
    BadBody,
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
from fakeclouds.facade import Facade, NameRule
from fakeclouds.faults import CallPlan
from fakeclouds.gcp_auth import PROJECT, AuthFailure, Verifier, service_account_key
from fakeclouds.gcp_catalog import (
    ACCELERATOR_TYPES,
    INSTANCE_TYPES,
    MACHINE_TYPES,
    REGIONS,
    ZONES,
    machine_types_in,
    region_of,
)
from fakeclouds.gcp_state import API, GcpState, Operation, numeric_id, operation_name, rfc3339, state_of
from fakeclouds.vendor_errors import retry_after_header, vendor_router
from providers.gcp_catalog import N1_ATTACHABLE, combo_type

NAME = "gcp"
LOGIN_USER = "ubuntu"
NAME_PATTERN = r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
BASE = "/compute/v1/projects/{project}"
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


def _invalid(field: str, value: object, why: str) -> Invalid:
    return Invalid(f"Invalid value for field '{field}': '{value}'. {why}")


def _check_name(field: str, name: object) -> str:
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
        raise _invalid(field, name, f"Must be a match of regex '(?:{NAME_PATTERN})'")
    return name


def _last(path: object, collection: str, field: str, zone: str | None = None) -> str:
    """The resource name at the end of a (partial) URL like `zones/Z/machineTypes/T`; its zone must be
    the request's."""
    text = str(path or "")
    m = re.fullmatch(r"(?:.*/)?(?:zones/([^/]+)/)?" + collection + r"/([^/]+)", text)
    if m is None or (zone is not None and m.group(1) not in (None, zone)):
        raise _invalid(field, text, f"Must be a {collection} URL in zone '{zone}'")
    return m.group(2)


# --------------------------------------------------------------------------- instances


def _accelerators(body: dict[str, Any], zone: str) -> list[tuple[str, int]]:
    out = []
    for i, acc in enumerate(body.get("guestAccelerators") or []):
        field = f"resource.guestAccelerators[{i}].acceleratorType"
        name = _last(acc.get("acceleratorType"), "acceleratorTypes", field, zone)
        if name not in ZONES[zone][1]:
            raise _invalid(field, name, f"Accelerator type '{name}' does not exist in zone '{zone}'.")
        count = int(acc.get("acceleratorCount") or 0)
        if not 1 <= count <= ACCELERATOR_TYPES[name].max_cards:
            raise _invalid(
                f"resource.guestAccelerators[{i}].acceleratorCount",
                count,
                f"At most {ACCELERATOR_TYPES[name].max_cards} of '{name}' per instance.",
            )
        out.append((name, count))
    return out


def _engine_type(body: dict[str, Any], zone: str) -> tuple[str, str, list[tuple[str, int]]]:
    """(engine instance type, machine type, accelerators) of an insert body."""
    given = body.get("machineType")
    machine_name = _last(given, "machineTypes", "resource.machineType", zone)
    machine = MACHINE_TYPES.get(machine_name)
    if machine is None or machine not in machine_types_in(zone):
        raise _invalid(
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


def _scheduling(body: dict[str, Any], gpus: bool) -> tuple[dict[str, Any], bool]:
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


def _metadata(body: dict[str, Any]) -> tuple[list[dict[str, str]], list[str], str | None]:
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


def _labels(labels: object) -> dict[str, str]:
    if not isinstance(labels, dict) or len(labels) > 64:
        raise _invalid("resource.labels", "", "At most 64 labels.")
    for k, v in labels.items():
        if not _LABEL_KEY.fullmatch(str(k)) or not _LABEL_VALUE.fullmatch(str(v)):
            raise _invalid("resource.labels", k, "Label keys and values violate format constraints.")
    return {str(k): str(v) for k, v in labels.items()}


def _tags(body: dict[str, Any]) -> list[str]:
    items = list((body.get("tags") or {}).get("items") or [])
    return [_check_name(f"resource.tags.items[{i}]", t) for i, t in enumerate(items)]


def _boot_image(body: dict[str, Any], project: str) -> str:
    disks = list(body.get("disks") or [])
    boot = [d for d in disks if d.get("boot")] or disks[:1]
    image = ((boot[0].get("initializeParams") or {}).get("sourceImage") if boot else None) or ""
    m = _IMAGE.fullmatch(image)
    if m is None:
        raise _invalid(
            "resource.disks[0].initializeParams.sourceImage",
            image,
            "A boot disk with a source image (projects/P/global/images/[family/]NAME) is required.",
        )
    if m.group(1) not in PUBLIC_IMAGE_PROJECTS | {project}:
        raise NotFound(f"The resource 'projects/{m.group(1)}/global/images/...' was not found")
    return image


def _nat(body: dict[str, Any], project: str) -> bool:
    nics = list(body.get("networkInterfaces") or [])
    if not nics:
        raise _invalid("resource.networkInterfaces", "", "At least one network interface is required.")
    for nic in nics:
        network = nic.get("network")
        if network not in _NETWORKS and not str(network).endswith(
            f"projects/{project}/global/networks/default"
        ):
            raise NotFound(f"The resource '{network}' was not found")
    return any(
        a.get("type", "ONE_TO_ONE_NAT") == "ONE_TO_ONE_NAT" for a in nics[0].get("accessConfigs") or []
    )


def _instance_status(m: Machine, now: float) -> str:
    if m.status == PENDING:
        return "PROVISIONING" if now < (m.created_at + m.boot_at) / 2 else "STAGING"
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
        out["statusMessage"] = m.detail or "Instance terminated by Compute Engine."
    if x.get("spot"):
        out["scheduling"] = {**out["scheduling"], "provisioningModel": "SPOT"}
    return out


# --------------------------------------------------------------------------- firewalls


def _firewall(body: dict[str, Any], project: str) -> dict[str, Any]:
    name = _check_name("resource.name", body.get("name"))
    network = body.get("network")
    if network not in _NETWORKS and not str(network).endswith(f"projects/{project}/global/networks/default"):
        raise NotFound(f"The resource '{network}' was not found")
    direction = body.get("direction", "INGRESS")
    if direction not in ("INGRESS", "EGRESS"):
        raise _invalid("resource.direction", direction, "Must be INGRESS or EGRESS.")
    allowed = list(body.get("allowed") or [])
    if not allowed and not body.get("denied"):
        raise _invalid("resource.allowed", "", "A firewall must allow or deny something.")
    for i, rule in enumerate(allowed):
        proto = str(rule.get("IPProtocol", "")).lower()
        if proto not in _PROTOCOLS:
            raise _invalid(f"resource.allowed[{i}].IPProtocol", proto, "Unknown protocol.")
        for port in rule.get("ports") or []:
            lo, _, hi = str(port).partition("-")
            if (
                proto not in ("tcp", "udp", "sctp")
                or not (lo.isdigit() and (not hi or hi.isdigit()))
                or not 0 <= int(lo) <= int(hi or lo) <= 65535
            ):
                raise _invalid(f"resource.allowed[{i}].ports", port, "Invalid port or port range.")
    for cidr in body.get("sourceRanges") or []:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise _invalid("resource.sourceRanges", cidr, "Must be an IP range in CIDR notation.") from None
    tags = [_check_name(f"resource.targetTags[{i}]", t) for i, t in enumerate(body.get("targetTags") or [])]
    priority = int(body.get("priority", 1000))
    if not 0 <= priority <= 65535:
        raise _invalid("resource.priority", priority, "Must be 0 to 65535.")
    if len(str(body.get("description") or "")) > 2048:
        raise _invalid("resource.description", "...", "At most 2048 characters.")
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


def side_resources(engine: Engine) -> list[dict[str, Any]]:
    return [
        {"facade": NAME, "kind": "firewall-rule", "id": fw["id"], "name": fw["name"]}
        for fw in state_of(engine).firewalls.values()
    ]


# --------------------------------------------------------------------------- the router


def _request_id(request: Request) -> str | None:
    raw = request.query_params.get("requestId")
    if raw is None:
        return None
    try:
        parsed = uuid.UUID(raw)
    except ValueError:
        raise _invalid("requestId", raw, "Must be a UUID.") from None
    if parsed.int == 0:
        raise _invalid("requestId", raw, "The zero UUID is not supported.")
    return str(parsed)


def _aggregated(kind: str, key: str, rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
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


def build_router(engine: Engine, token: str) -> APIRouter:
    router = vendor_router(error_response)
    verifier = Verifier.for_token(token)
    st: GcpState = state_of(engine)
    op_delay = lambda: engine.boot_delay / 4  # noqa: E731 — an insert's operation ends before the boot

    def authorize(request: Request, project: str, permission: str) -> dict[str, Any]:
        try:
            claims = verifier.check(request.headers.get("authorization"))
        except AuthFailure:
            raise Unauthorized("invalid credentials") from None
        if project != PROJECT:
            raise Forbidden(f"Required '{permission}' permission for 'projects/{project}'")
        return claims

    def zone_of(zone: str) -> str:
        if zone not in ZONES:
            raise _invalid("zone", zone, "Unknown zone.")
        return zone

    async def call(
        request: Request,
        project: str,
        op: str,
        permission: str,
        effect: Callable[[CallPlan, dict[str, Any]], Any],
        region: str | None = None,
    ) -> Response:
        claims = authorize(request, project, permission)
        result = await run_op(engine, NAME, op, lambda plan: effect(plan, claims), region)
        return JSONResponse(result)

    def live_named(zone: str, name: str) -> Machine | None:
        return next((m for m in engine.live(NAME) if m.region == zone and m.name == name), None)

    def instance_url(project: str, zone: str, name: object) -> str:
        return f"{API}/projects/{project}/zones/{zone}/instances/{name}"

    # ------------------------------------------------------------------ project, catalogue

    @router.get(BASE)
    async def get_project(request: Request, project: str) -> Response:
        def effect(_: CallPlan, __: dict[str, Any]) -> dict[str, Any]:
            return {
                "kind": "compute#project",
                "id": str(int(verifier.kid[:12], 16)),
                "name": project,
                "selfLink": f"{API}/projects/{project}",
                "defaultNetworkTier": "PREMIUM",
                "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS",
            }

        return await call(request, project, "verify", "compute.projects.get", effect)

    @router.get(BASE + "/zones")
    async def list_zones(request: Request, project: str) -> Response:
        def effect(_: CallPlan, __: dict[str, Any]) -> dict[str, Any]:
            rows = [
                {
                    "kind": "compute#zone",
                    "name": z,
                    "description": z,
                    "status": "UP",
                    "region": f"{API}/projects/{project}/regions/{region_of(z)}",
                    "selfLink": f"{API}/projects/{project}/zones/{z}",
                }
                for z in ZONES
            ]
            keep = gcp_filter.parse(request.query_params.get("filter"))
            return {"kind": "compute#zoneList", "items": [r for r in rows if keep(r)]}

        return await call(request, project, "offers", "compute.zones.list", effect)

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

    def catalogue_routes(collection: str, kind: str,
                         rows: Callable[[str, str, str | None], list[dict[str, Any]]]) -> None:
        """The zonal list and the aggregated list of one catalogue collection (machineTypes,
        acceleratorTypes): the same rows, per zone or for every zone."""

        @router.get(BASE + "/zones/{zone}/" + collection)
        async def listed(request: Request, project: str, zone: str) -> Response:
            def effect(_: CallPlan, __: dict[str, Any]) -> dict[str, Any]:
                flt = request.query_params.get("filter")
                return {"kind": f"compute#{kind}List", "items": rows(project, zone_of(zone), flt)}

            return await call(request, project, "offers", f"compute.{collection}.list", effect)

        @router.get(BASE + "/aggregated/" + collection)
        async def aggregated(request: Request, project: str) -> Response:
            def effect(_: CallPlan, __: dict[str, Any]) -> dict[str, Any]:
                flt = request.query_params.get("filter")
                return _aggregated(f"compute#{kind}AggregatedList", collection,
                                   {z: rows(project, z, flt) for z in ZONES})

            return await call(request, project, "offers", f"compute.{collection}.list", effect)

    catalogue_routes("machineTypes", "machineType", machine_types)
    catalogue_routes("acceleratorTypes", "acceleratorType", accelerator_types)

    # ------------------------------------------------------------------ instances

    def failed_insert(
        project: str, zone: str, name: object, user: str, exc: CloudError, request_id: str | None
    ) -> dict[str, Any]:
        """Capacity and quota end the insert's operation with an error; nothing is made."""
        if isinstance(exc, NoCapacity):
            code, http, text = (
                "ZONE_RESOURCE_POOL_EXHAUSTED",
                (503, "SERVICE UNAVAILABLE"),
                (
                    f"The zone 'projects/{project}/zones/{zone}' does not have enough resources available to "
                    "fulfill the request.  Try a different zone, or try again later."
                ),
            )
        else:
            code, http, text = (
                "QUOTA_EXCEEDED",
                (403, "FORBIDDEN"),
                (f"Quota 'INSTANCES' exceeded.  Limit reached in region {region_of(zone)} ({exc.message})."),
            )
        now = time.time()
        op = Operation(
            name=operation_name(now),
            project=project,
            zone=zone,
            operation_type="insert",
            target_link=instance_url(project, zone, name),
            user=user,
            inserted_at=now,
            done_at=now,
            error={"errors": [{"code": code, "message": text}]},
            http_status=http[0],
            http_message=http[1],
        )
        return st.add(op, request_id).to_json(engine)

    @router.post(BASE + "/zones/{zone}/instances")
    async def insert_instance(request: Request, project: str, zone: str) -> Response:
        claims = authorize(request, project, "compute.instances.create")
        zone_of(zone)
        request_id = _request_id(request)
        body = await optional_object(request) or {}
        user = str(claims.get("iss"))

        def effect(plan: CallPlan) -> dict[str, Any]:
            known = st.by_request(project, request_id)
            if known is not None:  # a retry: the first request's operation, nothing else happens
                return known.to_json(engine)
            name = _check_name("resource.name", body.get("name"))
            if live_named(zone, name) is not None:
                raise NameConflict(
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists"
                )
            itype, machine, accelerators = _engine_type(body, zone)
            scheduling, spot = _scheduling(body, bool(accelerators))
            items, keys, user_data = _metadata(body)
            extra = {
                "machine_type": machine,
                "accelerators": accelerators,
                "scheduling": scheduling,
                "metadata": items,
                "tags": _tags(body),
                "nat": _nat(body, project),
                "spot": spot,
                "image": _boot_image(body, project),
                "description": str(body.get("description") or ""),
            }
            labels = _labels(body.get("labels") or {})
            try:
                m = engine.create(
                    NAME,
                    name=name,
                    instance_type=itype,
                    region=zone,
                    public_keys=keys,
                    spot=spot,
                    labels=labels,
                    user_data=user_data,
                    stuck=plan.stuck_booting,
                    die_after_boot=plan.die_after_boot,
                    extra=extra,
                )[0]
            except (NoCapacity, QuotaExceeded) as exc:
                return failed_insert(project, zone, name, user, exc, request_id)
            now = time.time()
            op = Operation(
                name=operation_name(now),
                project=project,
                zone=zone,
                operation_type="insert",
                target_link=instance_url(project, zone, name),
                user=user,
                inserted_at=now,
                done_at=now + op_delay(),
                target_id=m.id,
            )
            return st.add(op, request_id).to_json(engine)

        try:
            result = await run_op(engine, NAME, "create", effect, region=zone)
        except (NoCapacity, QuotaExceeded) as exc:  # injected: refused before anything happened
            known = st.by_request(project, request_id)
            result = (
                known.to_json(engine)
                if known
                else failed_insert(project, zone, body.get("name"), user, exc, request_id)
            )
        return JSONResponse(result)

    @router.get(BASE + "/zones/{zone}/instances/{name}")
    async def get_instance(request: Request, project: str, zone: str, name: str) -> Response:
        def effect(_: CallPlan, __: dict[str, Any]) -> dict[str, Any]:
            m = live_named(zone_of(zone), name)
            if m is None:
                raise NotFound(
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found"
                )
            return instance_json(m, project)

        return await call(request, project, "get", "compute.instances.get", effect)

    def instances(project: str, flt: str | None) -> dict[str, list[dict[str, Any]]]:
        keep = gcp_filter.parse(flt)
        rows: dict[str, list[dict[str, Any]]] = {}
        for m in engine.live(NAME):
            row = instance_json(m, project)
            if keep(row):
                rows.setdefault(m.region, []).append(row)
        return rows

    @router.get(BASE + "/zones/{zone}/instances")
    async def list_instances(request: Request, project: str, zone: str) -> Response:
        def effect(_: CallPlan, __: dict[str, Any]) -> dict[str, Any]:
            rows = instances(project, request.query_params.get("filter")).get(zone_of(zone), [])
            return {"kind": "compute#instanceList", "items": rows}

        return await call(request, project, "list", "compute.instances.list", effect)

    @router.get(BASE + "/aggregated/instances")
    async def aggregated_instances(request: Request, project: str) -> Response:
        def effect(_: CallPlan, __: dict[str, Any]) -> dict[str, Any]:
            return _aggregated(
                "compute#instanceAggregatedList",
                "instances",
                instances(project, request.query_params.get("filter")),
            )

        return await call(request, project, "list", "compute.instances.list", effect)

    @router.delete(BASE + "/zones/{zone}/instances/{name}")
    async def delete_instance(request: Request, project: str, zone: str, name: str) -> Response:
        request_id = _request_id(request)

        def effect(_: CallPlan, claims: dict[str, Any]) -> dict[str, Any]:
            known = st.by_request(project, request_id)
            if known is not None:
                return known.to_json(engine)
            m = live_named(zone_of(zone), name)
            if m is None:
                raise NotFound(
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found"
                )
            engine.terminate(NAME, m.id)
            now = time.time()
            op = Operation(
                name=operation_name(now),
                project=project,
                zone=zone,
                operation_type="delete",
                target_link=instance_url(project, zone, name),
                user=str(claims.get("iss")),
                inserted_at=now,
                done_at=None,
                target_id=m.id,
                machine_id=m.id,
            )
            return st.add(op, request_id).to_json(engine)

        return await call(request, project, "terminate", "compute.instances.delete", effect)

    # ------------------------------------------------------------------ operations

    def operation(project: str, zone: str | None, name: str) -> dict[str, Any]:
        op = st.operations.get(name)
        if op is None or op.project != project or op.zone != zone:
            scope = f"zones/{zone}" if zone else "global"
            raise NotFound(f"The resource 'projects/{project}/{scope}/operations/{name}' was not found")
        return op.to_json(engine)

    @router.get(BASE + "/zones/{zone}/operations/{name}")
    async def get_zone_operation(request: Request, project: str, zone: str, name: str) -> Response:
        return await call(
            request,
            project,
            "get",
            "compute.zoneOperations.get",
            lambda _, __: operation(project, zone, name),
        )

    @router.get(BASE + "/global/operations/{name}")
    async def get_global_operation(request: Request, project: str, name: str) -> Response:
        return await call(
            request,
            project,
            "get",
            "compute.globalOperations.get",
            lambda _, __: operation(project, None, name),
        )

    # ------------------------------------------------------------------ firewalls

    def firewall_op(project: str, name: str, kind: str, user: str) -> dict[str, Any]:
        now = time.time()
        op = Operation(
            name=operation_name(now),
            project=project,
            zone=None,
            operation_type=kind,
            target_link=f"{API}/projects/{project}/global/firewalls/{name}",
            user=user,
            inserted_at=now,
            done_at=now,
        )
        return st.add(op, None).to_json(engine)

    @router.post(BASE + "/global/firewalls")
    async def insert_firewall(request: Request, project: str) -> Response:
        body = await optional_object(request) or {}

        def effect(_: CallPlan, claims: dict[str, Any]) -> dict[str, Any]:
            fw = _firewall(body, project)
            if fw["name"] in st.firewalls:
                raise NameConflict(
                    f"The resource 'projects/{project}/global/firewalls/{fw['name']}' already exists"
                )
            st.firewalls[fw["name"]] = fw
            return firewall_op(project, fw["name"], "insert", str(claims.get("iss")))

        return await call(request, project, "side_resources", "compute.firewalls.create", effect)

    @router.get(BASE + "/global/firewalls")
    async def list_firewalls(request: Request, project: str) -> Response:
        def effect(_: CallPlan, __: dict[str, Any]) -> dict[str, Any]:
            keep = gcp_filter.parse(request.query_params.get("filter"))
            return {"kind": "compute#firewallList", "items": [f for f in st.firewalls.values() if keep(f)]}

        return await call(request, project, "side_resources", "compute.firewalls.list", effect)

    @router.get(BASE + "/global/firewalls/{name}")
    async def get_firewall(request: Request, project: str, name: str) -> Response:
        def effect(_: CallPlan, __: dict[str, Any]) -> dict[str, Any]:
            if name not in st.firewalls:
                raise NotFound(f"The resource 'projects/{project}/global/firewalls/{name}' was not found")
            return st.firewalls[name]

        return await call(request, project, "side_resources", "compute.firewalls.get", effect)

    @router.delete(BASE + "/global/firewalls/{name}")
    async def delete_firewall(request: Request, project: str, name: str) -> Response:
        def effect(_: CallPlan, claims: dict[str, Any]) -> dict[str, Any]:
            if st.firewalls.pop(name, None) is None:
                raise NotFound(f"The resource 'projects/{project}/global/firewalls/{name}' was not found")
            return firewall_op(project, name, "delete", str(claims.get("iss")))

        return await call(request, project, "side_resources", "compute.firewalls.delete", effect)

    return router


def credentials(token: str) -> dict[str, Any]:
    """What `make run` connects with: the service-account key JSON this simulation issues for the
    token, and no project id (the adapter fills it from the key, as the connect form does)."""
    return {"project_id": "", "service_account_key": json.dumps(service_account_key(token))}


FACADE = Facade(
    name=NAME,
    prefix="/gcp",
    display_name="Google Compute Engine (simulated)",
    build_router=build_router,
    credentials=credentials,
    login_user=LOGIN_USER,
    regions=REGIONS,
    instance_types=INSTANCE_TYPES,
    names=NameRule(
        required=True,
        unique=True,
        per_region=True,
        max_length=63,
        pattern=NAME_PATTERN,
        hint=f"name must match {NAME_PATTERN}",
    ),
    machine_id=numeric_id,
    preinstalled={"k3s": k3s.SCRIPT},
    ssh_port=22,
    side_resources=side_resources,
)

"""Google Compute Engine, simulated: the REST API v1 (`/compute/v1/projects/...`) that
google-cloud-compute's REST transport calls, served under this facade's prefix, so the adapter runs
the official SDK unchanged with `client_options={"api_endpoint": <server>/gcp}`. `FACADE` at the
bottom declares it.

This module is the router: each route authorizes, runs its effect on the engine and answers. Its
pieces: what a request may carry, `gcp_requests.py`; what is answered (errors, instance and catalogue
JSON), `gcp_responses.py`; operations, request ids and firewall rules, `gcp_state.py`; zones and
types, `gcp_catalog.py`; list filters, `gcp_filter.py`; the service-account key and JWTs, `gcp_auth.py`.

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

- Preemption of Spot VMs (`gcp_preemption.py`): STOPPING through the 30 s notice with a
  `compute.instances.preempted` system-event operation (zone and aggregated operation lists), then
  TERMINATED (instanceTerminationAction STOP) or gone (DELETE).

Not modelled: pagination, stopping/starting/resetting, zones going DOWN, disks,
networks and images as resources (the boot image is checked for shape and project only, and does
not change the machine), firewall rules being enforced on SSH (they are stored, validated and listed;
every machine's port 22 is reachable; `FACADE.ingress` reads them for the simulated Kubernetes API on
the machine, which admits only a peer they let in: gcp_state.ingress), the default network's
pre-populated rules, source tags and service accounts, `wait` on operations, IAM beyond the one
project, label fingerprints.
Simulation limits: an instance needs an `ssh-keys` entry for `ubuntu` (400 otherwise; Compute Engine
would boot it unreachable); a 403 `rateLimitExceeded` carries `Retry-After` (Compute Engine sends
none: its per-minute quotas refill at the next minute) so tests can steer the delay.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from fakeclouds import gcp_filter, gcp_preemption, gcp_requests, gcp_state, k3s, preemption
from fakeclouds.bodies import optional_object
from fakeclouds.common import run_op
from fakeclouds.engine import Engine, Machine
from fakeclouds.errors import CloudError, NameConflict, NoCapacity, NotFound, QuotaExceeded, Unauthorized
from fakeclouds.facade import Facade, IngressRule, NameRule
from fakeclouds.faults import CallPlan
from fakeclouds.gcp_auth import PROJECT, AuthFailure, Verifier, service_account_key
from fakeclouds.gcp_catalog import INSTANCE_TYPES, REGIONS, ZONES, region_of
from fakeclouds.gcp_requests import LOGIN_USER, NAME_PATTERN
from fakeclouds.gcp_responses import (
    Forbidden,
    accelerator_types,
    aggregated_list,
    error_response,
    instance_json,
    machine_types,
)
from fakeclouds.gcp_state import API, GcpState, Operation, numeric_id, operation_name, state_of
from fakeclouds.vendor_errors import vendor_router

NAME = "gcp"
BASE = "/compute/v1/projects/{project}"


def side_resources(engine: Engine) -> list[dict[str, Any]]:
    return [
        {"facade": NAME, "kind": "firewall-rule", "id": fw["id"], "name": fw["name"]}
        for fw in state_of(engine).firewalls.values()
    ]



def ingress(engine: Engine, machine: Machine) -> list[IngressRule]:
    """What the project's firewall rules let in to the machine's instance (its network tags)."""
    if machine.facade != NAME:
        return []
    tags = [str(t) for t in machine.extra.get("tags") or []]
    return gcp_state.ingress(list(state_of(engine).firewalls.values()), tags)


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
            raise gcp_requests.invalid("zone", zone, "Unknown zone.")
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

    def live_named(zone: str, name: str) -> Machine | None:  # a preempted one it stopped too
        return next((m for m in gcp_preemption.shown(engine, NAME) if m.region == zone and m.name == name),
                    None)

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
                return aggregated_list(f"compute#{kind}AggregatedList", collection,
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
        request_id = gcp_requests.request_id(request)
        body = await optional_object(request) or {}
        user = str(claims.get("iss"))

        def effect(plan: CallPlan) -> dict[str, Any]:
            known = st.by_request(project, request_id)
            if known is not None:  # a retry: the first request's operation, nothing else happens
                return known.to_json(engine)
            name = gcp_requests.check_name("resource.name", body.get("name"))
            if live_named(zone, name) is not None:
                raise NameConflict(
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' already exists"
                )
            itype, machine, accelerators = gcp_requests.engine_type(body, zone)
            scheduling, spot = gcp_requests.scheduling(body, bool(accelerators))
            items, keys, user_data = gcp_requests.metadata(body)
            extra = {
                "machine_type": machine,
                "accelerators": accelerators,
                "scheduling": scheduling,
                "metadata": items,
                "tags": gcp_requests.tags(body),
                "nat": gcp_requests.nat(body, project),
                "spot": spot,
                "image": gcp_requests.boot_image(body, project),
                "description": str(body.get("description") or ""),
            }
            labels = gcp_requests.labels(body.get("labels") or {})
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
                    preempt_after=plan.preempt_after,
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
        for m in gcp_preemption.shown(engine, NAME):
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
            return aggregated_list(
                "compute#instanceAggregatedList",
                "instances",
                instances(project, request.query_params.get("filter")),
            )

        return await call(request, project, "list", "compute.instances.list", effect)

    @router.delete(BASE + "/zones/{zone}/instances/{name}")
    async def delete_instance(request: Request, project: str, zone: str, name: str) -> Response:
        request_id = gcp_requests.request_id(request)

        def effect(_: CallPlan, claims: dict[str, Any]) -> dict[str, Any]:
            known = st.by_request(project, request_id)
            if known is not None:
                return known.to_json(engine)
            m = live_named(zone_of(zone), name)
            if m is None:
                raise NotFound(
                    f"The resource 'projects/{project}/zones/{zone}/instances/{name}' was not found"
                )
            if preemption.reclaimed(m):  # a preempted VM Compute Engine stopped: deleting it is all
                preemption.release(engine, m)
            else:
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

    gcp_preemption.add_routes(router, BASE, engine, st, NAME, call, zone_of)

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
            fw = gcp_requests.firewall(body, project)
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
    ingress=ingress,
    guest_shutdown="stop_compute",  # TERMINATED (GCP's stopped): no VM charges, disks bill until deleted
)

"""A simulated Oracle Cloud Infrastructure, as the official `oci` Python SDK (2.189.0) calls it:
Identity, Core Services (compute and virtual network) and Work Requests, all API version 20160918,
mounted at `/oci` (`service_endpoint="<server>/oci"`). Paths, query parameters and JSON field names
follow the SDK's clients and models (github.com/oracle/oci-python-sdk src/oci/{identity,core,
work_requests}; docs.oracle.com/en-us/iaas/api/#/en/iaas/20160918/ and /en/identity/20160918/).

| client | calls |
|---|---|
| IdentityClient | get_tenancy, list_region_subscriptions, list_availability_domains |
| ComputeClient | list_shapes, list_images, launch_instance, get_instance, list_instances, |
| | terminate_instance, list_vnic_attachments |
| VirtualNetworkClient | get_vnic, list_subnets, get/list_security_list(s), |
| | create/list/delete network_security_group(s), add/list_network_security_group_security_rules |
| WorkRequestClient | get_work_request (the launch's) |

Modelled: every request's signature is verified (fakeclouds/oci_auth.py), else 401 NotAuthenticated;
errors are `{"code", "message"}` with `opc-request-id`; a missing or foreign OCID is 404
`NotAuthorizedOrNotFound`; `launch_instance` is deduplicated by `opc-retry-token` (the same token with
another body: 409 `Conflict`); no host capacity is 500 `InternalError` "Out of host capacity."; limits
are 400 `LimitExceeded`; 429 `TooManyRequests`. The public IP is only on the VNIC. An NSG still used by
a live instance's VNIC cannot be deleted (409 `Conflict`).

Simplified [sim]: one endpoint answers every subscribed region (real OCI has one per region); each
region has one availability domain, whose name carries the region; a terminated instance is 404 at
once (real OCI shows TERMINATED for a while); each VCN has only its default security list (SSH from
anywhere), which every subnet uses; security rules are enforced only by the simulated Kubernetes API on
an instance's address (`FACADE.ingress`: the subnet's security lists plus the VNIC's NSGs).
Fault ops: `verify`, `offers` (shapes), `create`, `get`, `list`, `terminate`, `side_resources`.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from fakeclouds import k3s
from fakeclouds.common import check_rate, iso, run_op
from fakeclouds.engine import TERMINATING, Engine
from fakeclouds.errors import (
    Invalid,
    NotFound,
)
from fakeclouds.facade import Facade, NameRule
from fakeclouds.faults import CallPlan
from fakeclouds.oci_auth import HOME_REGION, Signatures, credentials
from fakeclouds.oci_state import (
    IMAGES,
    INSTANCE_TYPES,
    NAME,
    REGION_KEYS,
    REGIONS,
    Account,
    V,
    ad_name,
    ingress,
    machine_id,
    ocid,
    public_nsg,
    region_of_ad,
    render,
    shape_json,
)
from fakeclouds.vendor_errors import vendor_router


def build_router(engine: Engine, token: str) -> APIRouter:
    sigs = Signatures(token)
    account = Account(engine, sigs.tenancy)
    router = vendor_router(render)

    async def do(
        request: Request,
        op: str,
        effect: Callable[[CallPlan], Any],
        *,
        status: int = 200,
        region: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        raw = request.scope.get("raw_path") or request.url.path.encode()
        query = request.scope.get("query_string") or b""
        target = raw.decode() + (f"?{query.decode()}" if query else "")
        sigs.check(
            request.method, target, {k.lower(): v for k, v in request.headers.items()}, await request.body()
        )
        check_rate(engine, NAME, request, op)
        body = await run_op(engine, NAME, op, effect, region)
        if status == 204:
            return Response(status_code=204, headers={"opc-request-id": uuid.uuid4().hex.upper()})
        return JSONResponse(
            body, status_code=status, headers={"opc-request-id": uuid.uuid4().hex.upper(), **(headers or {})}
        )

    async def json_of(request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            raise Invalid("The request body could not be parsed as JSON.") from None
        if not isinstance(body, dict):
            raise Invalid("The request body must be a JSON object.")
        return body

    q = lambda request, name: request.query_params.get(name)  # noqa: E731

    @router.get(V + "/tenancies/{tenancy_id}")
    async def get_tenancy(request: Request, tenancy_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            account.compartment(tenancy_id)
            return {
                "id": tenancy_id,
                "name": "simulated-tenancy",
                "homeRegionKey": REGION_KEYS[HOME_REGION],
                "description": "gpuprov simulation",
            }

        return await do(request, "verify", effect)

    @router.get(V + "/tenancies/{tenancy_id}/regionSubscriptions")
    async def region_subscriptions(request: Request, tenancy_id: str) -> Response:
        def effect(_: CallPlan) -> list[dict[str, Any]]:
            account.compartment(tenancy_id)
            return [
                {
                    "regionKey": REGION_KEYS[r.name],
                    "regionName": r.name,
                    "status": "READY",
                    "isHomeRegion": r.name == HOME_REGION,
                }
                for r in REGIONS
            ]

        return await do(request, "offers", effect)

    @router.get(V + "/availabilityDomains")
    async def availability_domains(request: Request) -> Response:
        def effect(_: CallPlan) -> list[dict[str, Any]]:
            account.compartment(q(request, "compartmentId"))
            return [
                {
                    "name": ad_name(r.name),
                    "id": ocid("availabilitydomain", r.name),
                    "compartmentId": account.tenancy,
                }
                for r in REGIONS
            ]

        return await do(request, "offers", effect)

    @router.get(V + "/shapes")
    async def shapes(request: Request) -> Response:
        def effect(_: CallPlan) -> list[dict[str, Any]]:
            account.compartment(q(request, "compartmentId"))
            ad = q(request, "availabilityDomain")
            region = region_of_ad(ad) if ad else None
            return [shape_json(t) for t in INSTANCE_TYPES if region is None or region in t.prices]

        return await do(request, "offers", effect)

    @router.get(V + "/images")
    async def images(request: Request) -> Response:
        def effect(_: CallPlan) -> list[dict[str, Any]]:
            account.compartment(q(request, "compartmentId"))
            os_, ver = q(request, "operatingSystem"), q(request, "operatingSystemVersion")
            return [
                {
                    "id": i,
                    "displayName": f"{o}-{v}-Gpu-2026.11.01-0",
                    "operatingSystem": o,
                    "operatingSystemVersion": v,
                    "lifecycleState": "AVAILABLE",
                    "compartmentId": None,
                    "createImageAllowed": True,
                    "timeCreated": iso(0),
                }
                for i, (o, v) in IMAGES.items()
                if os_ in (None, o) and ver in (None, v)
            ]

        return await do(request, "offers", effect)

    @router.post(V + "/instances")
    async def launch(request: Request) -> Response:
        body = await json_of(request)
        retry = request.headers.get("opc-retry-token")
        ad = str(body.get("availabilityDomain"))
        region = region_of_ad(ad) if ad in {ad_name(r.name) for r in REGIONS} else None
        made: dict[str, str] = {}

        def effect(plan: CallPlan) -> dict[str, Any]:
            m, wr = account.launch(body, retry, plan)
            made["wr"] = wr
            return account.instance_json(m)

        resp = await do(request, "create", effect, region=region)
        resp.headers["opc-work-request-id"] = made.get("wr", "")
        return resp

    @router.get(V + "/instances")
    async def list_instances(request: Request) -> Response:
        def effect(_: CallPlan) -> list[dict[str, Any]]:
            account.compartment(q(request, "compartmentId"))
            name, ad = q(request, "displayName"), q(request, "availabilityDomain")
            return [
                account.instance_json(m)
                for m in engine.live(NAME)
                if name in (None, m.extra.get("display_name")) and ad in (None, ad_name(m.region))
            ]

        return await do(request, "list", effect)

    @router.get(V + "/instances/{instance_id}")
    async def get_instance(request: Request, instance_id: str) -> Response:
        return await do(request, "get", lambda _: account.instance_json(account.machine(instance_id)))

    @router.delete(V + "/instances/{instance_id}")
    async def terminate(request: Request, instance_id: str) -> Response:
        def effect(_: CallPlan) -> None:
            m = account.machine(instance_id)
            if m.status != TERMINATING:
                engine.terminate(NAME, m.id)

        return await do(request, "terminate", effect, status=204)

    @router.get(V + "/vnicAttachments")
    async def vnic_attachments(request: Request) -> Response:
        def effect(_: CallPlan) -> list[dict[str, Any]]:
            account.compartment(q(request, "compartmentId"))
            wanted = q(request, "instanceId")
            return [
                {
                    "id": m.extra["vnic"].replace("vnic", "vnicattachment"),
                    "instanceId": m.id,
                    "vnicId": m.extra["vnic"],
                    "subnetId": m.extra["subnet"],
                    "compartmentId": account.tenancy,
                    "availabilityDomain": ad_name(m.region),
                    "lifecycleState": "ATTACHED",
                    "timeCreated": iso(m.created_at),
                }
                for m in engine.live(NAME)
                if wanted in (None, m.id) and m.status != "pending"
            ]

        return await do(request, "get", effect)

    @router.get(V + "/vnics/{vnic_id}")
    async def get_vnic(request: Request, vnic_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            m = next((m for m in engine.live(NAME) if m.extra.get("vnic") == vnic_id), None)
            if m is None:
                raise NotFound("Authorization failed or requested resource not found.")
            return account.vnic_json(m)

        return await do(request, "get", effect)

    @router.get(V + "/subnets")
    async def subnets(request: Request) -> Response:
        def effect(_: CallPlan) -> list[dict[str, Any]]:
            account.compartment(q(request, "compartmentId"))
            return list(account.state["subnets"].values())

        return await do(request, "side_resources", effect)

    @router.get(V + "/securityLists")
    async def list_security_lists(request: Request) -> Response:
        def effect(_: CallPlan) -> list[dict[str, Any]]:
            account.compartment(q(request, "compartmentId"))
            vcn = q(request, "vcnId")
            return [sl for sl in account.state["security_lists"].values() if vcn in (None, sl["vcnId"])]

        return await do(request, "side_resources", effect)

    @router.get(V + "/securityLists/{security_list_id}")
    async def get_security_list(request: Request, security_list_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            found = account.state["security_lists"].get(security_list_id)
            if found is None:
                raise NotFound("Authorization failed or requested resource not found.")
            return dict(found)

        return await do(request, "side_resources", effect)

    @router.post(V + "/networkSecurityGroups")
    async def add_nsg(request: Request) -> Response:
        body = await json_of(request)
        return await do(request, "side_resources", lambda _: public_nsg(account.add_nsg(body)))

    @router.get(V + "/networkSecurityGroups")
    async def list_nsgs(request: Request) -> Response:
        def effect(_: CallPlan) -> list[dict[str, Any]]:
            account.compartment(q(request, "compartmentId"))
            name = q(request, "displayName")
            return [public_nsg(n) for n in account.state["nsgs"].values() if name in (None, n["displayName"])]

        return await do(request, "list", effect)

    @router.post(V + "/networkSecurityGroups/{nsg_id}/actions/addSecurityRules")
    async def add_rules(request: Request, nsg_id: str) -> Response:
        body = await json_of(request)

        def effect(_: CallPlan) -> dict[str, Any]:
            nsg = account.nsg(nsg_id)
            rules = [
                {**r, "id": secrets.token_hex(3).upper(), "isValid": True}
                for r in body.get("securityRules") or []
            ]
            nsg["rules"] += rules
            engine.save()
            return {"securityRules": rules}

        return await do(request, "side_resources", effect)

    @router.get(V + "/networkSecurityGroups/{nsg_id}/securityRules")
    async def list_rules(request: Request, nsg_id: str) -> Response:
        return await do(request, "side_resources", lambda _: account.nsg(nsg_id)["rules"])

    @router.delete(V + "/networkSecurityGroups/{nsg_id}")
    async def delete_nsg(request: Request, nsg_id: str) -> Response:
        return await do(request, "side_resources", lambda _: account.delete_nsg(nsg_id), status=204)

    @router.get(V + "/workRequests/{wr_id}")
    async def work_request(request: Request, wr_id: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            wr = account.state["work_requests"].get(wr_id)
            if wr is None:
                raise NotFound("Authorization failed or requested resource not found.")
            m = engine.machines.get(wr["instance"])
            done = m is not None and m.status != "pending"
            return {
                "id": wr_id,
                "operationType": "LaunchInstance",
                "status": "SUCCEEDED" if done else "IN_PROGRESS",
                "compartmentId": account.tenancy,
                "percentComplete": 100.0 if done else 50.0,
                "timeAccepted": iso(wr["created"]),
                "resources": [
                    {"entityType": "instance", "actionType": "CREATED", "identifier": wr["instance"]}
                ],
            }

        return await do(request, "get", effect)

    return router


def side_resources(engine: Engine) -> list[dict[str, Any]]:
    nsgs = engine.facade_state.get(NAME, {}).get("nsgs", {})
    return [
        {"kind": "network-security-group", "id": n["id"], "name": n["displayName"]} for n in nsgs.values()
    ]


FACADE = Facade(
    name=NAME,
    prefix="/oci",
    display_name="Oracle Cloud Infrastructure (simulated)",
    build_router=build_router,
    credentials=credentials,
    login_user="ubuntu",
    regions=REGIONS,
    instance_types=INSTANCE_TYPES,
    # displayName is optional and NOT unique (LaunchInstanceDetails.display_name, kept in `extra`); the
    # engine's name is the launch's opc-retry-token, unique among live instances (a retry under it is
    # answered with its instance, Account.launch), none without one. A token is at most 64 characters.
    names=NameRule(required=False, unique=True, max_length=64),
    machine_id=machine_id,
    preinstalled={"k3s": k3s.SCRIPT},
    ssh_port=22,
    side_resources=side_resources,
    ingress=ingress,
)

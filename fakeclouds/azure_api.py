"""Microsoft Azure, simulated: the Microsoft Entra token endpoint and the slice of Azure Resource
Manager (ARM) that azure-identity + azure-mgmt-compute/-network/-resource call, unchanged, over TLS
(`Facade.tls`: the SDK refuses a bearer token over plain http, and that check stays on).

    {prefix}/login/{tenant}/v2.0/.well-known/openid-configuration   (MSAL's tenant discovery)
    {prefix}/login/{tenant}/oauth2/v2.0/token                        (client credentials grant)
    {prefix}/arm/subscriptions/...                                   (ARM, `api-version` required)

so an adapter is pointed here with `authority=<endpoint>/login`, `base_url=<endpoint>/arm`,
`disable_instance_discovery=True` and the server's CA as `connection_verify`. Access tokens are
HMAC-signed by the client secret (the facade's token): they survive a server restart.

This module is ARM's router. Entra's endpoints and the tokens they issue live in `azure_login.py`;
ARM resources and their refusals in `azure_arm.py`; machines in the engine (each VM's machine
listens on its own 127.x.y.z:22, which is also its public IP's address). Stock is per zone
(`azure_catalog.py`).

Modelled (refused as Azure does, with its codes):
- a bad client secret (401 `invalid_client`, AADSTS7000215), unknown tenant or client; an invalid,
  expired or missing bearer token (401 `InvalidAuthenticationToken`); another subscription (403
  `AuthorizationFailed`); a missing api-version (400 `MissingApiVersionParameter`);
- VM create in two phases: synchronous refusals — `SkuNotAvailable` (409: a size restricted for the
  subscription in a location or zone, as the SKU list says; or no spot for that size),
  `OperationNotAllowed` (409: the family's core quota), `InvalidParameter` (unknown size, reserved
  admin name, SSH key path other than /home/<user>/.ssh/authorized_keys, bad key, customData over 64 KB
  or not base64, a zone the location lacks), `PlatformImageNotFound` (404), `InvalidResourceName`,
  `ResourceGroupNotFound` (404), `InvalidResourceReference` / `NicInUse` (a NIC missing, elsewhere or
  taken); then asynchronously, in the long-running operation, `ZonalAllocationFailed` /
  `AllocationFailed` when the zone (location) has no stock — leaving a `Failed` VM that must be
  deleted (a PUT with identical parameters retries its allocation, as on Azure);
- a PUT under a taken VM name: identical parameters converge (200, the same VM and operation);
  another location → 409 `InvalidResourceLocation`; any other immutable property (size, image,
  admin user, SSH keys, customData, priority, zone, NICs) → 409 `PropertyChangeNotAllowed`; a VM
  being deleted → 409 `OperationNotAllowed` ("marked for deletion");
- deletes in dependency order: a NIC still on a VM → 400 `NicInUse`; a public IP still on a NIC →
  400 `PublicIPAddressCannotBeDeleted`; an NSG still on a NIC → 400
  `InUseNetworkSecurityGroupCannotBeDeleted`; a subnet with NICs → 400 `InUseSubnetCannotBeDeleted`;
  deleting what does not exist → 204;
- NSG rules: protocol/access/direction values, priority 100-4096 unique per direction, port ranges;
  Standard public IPs must be Static (Basic is retired);
- long-running operations (`Azure-AsyncOperation` + `Retry-After`) for VM create and delete; the
  delete's operation ends when the machine is gone;
- faults from the admin API: `create` (VM PUT: `capacity` becomes the async AllocationFailed,
  `quota` the sync OperationNotAllowed), `get` (VM GET, instance view, operation status), `list`
  (listings), `terminate` (VM DELETE), `offers` (resource SKUs), `verify` (subscription GET); `*`
  rules also hit resource-group and network calls. 429 `TooManyRequests` + `Retry-After`; 5xx
  `InternalServerError`/`BadGateway`/`ServiceUnavailable`; a lost answer is 504 `GatewayTimeout`.

Not modelled: the Retail Prices API (the adapter ships a dated table); OS disks as resources (the
disk's deleteOption is stored, never enforced); NSG rules filter nothing but the simulated Kubernetes
API on a VM's address (`FACADE.ingress`: the inbound TCP rules of the NSG on its NIC, by priority;
NSGs on subnets are not modelled); a public IP has its
address only once its VM's machine has booted; network PUT/DELETE complete at once (no operation);
resizing (a PUT with another vmSize is refused); spot eviction; throttling budgets and the
x-ms-ratelimit-remaining-* headers; pagination (every list is one page); the VM's provisioningState
is `Creating` until its machine runs although the create operation already succeeded at allocation;
images accept only adminUsername `ubuntu` (the simulated machine's one login user).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from fakeclouds import azure_catalog as cat
from fakeclouds import k3s
from fakeclouds.azure_arm import (
    CLIENT_ID,
    NAME,
    SUBSCRIPTION,
    TENANT,
    TYPES,
    VM,
    VNET,
    Account,
    ArmError,
    Outcome,
)
from fakeclouds.azure_login import add_login_routes, check_token
from fakeclouds.bodies import optional_object
from fakeclouds.calls import name_call
from fakeclouds.engine import Engine
from fakeclouds.errors import (
    BadBody,
    CloudError,
    LostResponse,
    NoCapacity,
    QuotaExceeded,
    RateLimit,
    ServerFault,
)
from fakeclouds.facade import Facade, NameRule
from fakeclouds.faults import CallPlan
from fakeclouds.vendor_errors import retry_after_header, vendor_router

PREFIX = "/azure"
# Retry-After on long-running operations. The SDK reads it as an integer (a fraction breaks it) and
# treats 0 as "none given": then the client's own polling_interval applies.
LRO_RETRY_AFTER = 0
OTHER_OP = "other"  # resource groups and network calls: only "*" fault rules hit them

_SERVER_ERRORS = {500: "InternalServerError", 502: "BadGateway", 503: "ServiceUnavailable"}


# --------------------------------------------------------------------------- responses


def arm_error(exc: ArmError) -> JSONResponse:
    headers = {"Retry-After": retry_after_header(exc.retry_after)} if exc.retry_after is not None else None
    return JSONResponse(
        {"error": {"code": exc.code, "message": exc.message}}, status_code=exc.status, headers=headers
    )


def error_response(exc: CloudError, _request: Request | None = None) -> JSONResponse:
    """ARM's `{"error": {"code", "message"}}` for whatever an ARM call raised."""
    return arm_error(exc if isinstance(exc, ArmError) else from_cloud_error(exc))


def from_cloud_error(exc: CloudError) -> ArmError:
    if isinstance(exc, BadBody):  # an absent body reads as {}
        message = "The request content must be a JSON object." if exc.fault == "object" else \
            "The request content was invalid and could not be deserialized."
        return ArmError(400, "InvalidRequestContent", message)
    if isinstance(exc, RateLimit):
        return ArmError(
            429,
            "TooManyRequests",
            "The request is being throttled as the limit has been reached for operation type. (injected)",
            retry_after=exc.retry_after,
        )
    if isinstance(exc, ServerFault):
        return ArmError(
            exc.status,
            _SERVER_ERRORS.get(exc.status, "InternalServerError"),
            "An internal execution error occurred. Please retry later. (injected)",
        )
    if isinstance(exc, LostResponse):
        return ArmError(
            504,
            "GatewayTimeout",
            "The gateway did not receive a response within the specified "
            "time period. (injected: the call took effect)",
        )
    return ArmError(500, "InternalServerError", exc.message)




_SUB = r"/subscriptions/(?P<sub>[^/]+)"
_RG = _SUB + r"/resourcegroups/(?P<rg>[^/]+)"
_NET_TYPES = r"(?P<type>networkinterfaces|publicipaddresses|networksecuritygroups|virtualnetworks)"
ROUTES: list[tuple[str, re.Pattern[str]]] = [
    (name, re.compile(rx + "$", re.IGNORECASE))
    for name, rx in [
        ("subscription", _SUB),
        ("resources", _SUB + r"/resources"),
        ("skus", _SUB + r"/providers/Microsoft\.Compute/skus"),
        ("vms_all", _SUB + r"/providers/Microsoft\.Compute/virtualMachines"),
        ("net_all", _SUB + r"/providers/Microsoft\.Network/" + _NET_TYPES),
        (
            "operation",
            _SUB
            + r"/providers/Microsoft\.(?:Compute|Network)/locations/(?P<loc>[^/]+)/operations/(?P<op>[^/]+)",
        ),
        ("group", _RG),
        ("vms_group", _RG + r"/providers/Microsoft\.Compute/virtualMachines"),
        ("net_group", _RG + r"/providers/Microsoft\.Network/" + _NET_TYPES),
        (
            "instance_view",
            _RG + r"/providers/Microsoft\.Compute/virtualMachines/(?P<name>[^/]+)/instanceView",
        ),
        (
            "subnet",
            _RG + r"/providers/Microsoft\.Network/virtualNetworks/(?P<name>[^/]+)/subnets/(?P<subnet>[^/]+)",
        ),
        (
            "resource",
            _RG + r"/providers/(?P<ns>Microsoft\.(?:Compute|Network))/(?P<type>[^/]+)/(?P<name>[^/]+)",
        ),
    ]
]


def _tag_filter(text: str | None) -> Any:
    """A predicate on generic resources from ARM's `$filter` (the forms ARM documents for tags and
    types); ArmError for others."""
    if not text:
        return lambda r: True
    m = re.fullmatch(r"\s*tagName\s+eq\s+'([^']*)'(?:\s+and\s+tagValue\s+eq\s+'([^']*)')?\s*", text, re.I)
    if m:
        name, value = m.group(1).lower(), m.group(2)
        return lambda r: any(
            k.lower() == name and (value is None or v == value) for k, v in r["tags"].items()
        )
    m = re.fullmatch(r"\s*resourceType\s+eq\s+'([^']*)'\s*", text, re.I)
    if m:
        rtype = m.group(1).lower()
        return lambda r: r["type"].lower() == rtype
    raise ArmError(
        400,
        "InvalidFilterInQueryString",
        "Invalid $filter: supported are tagName eq '<name>' [and tagValue eq '<value>'], "
        "resourceType eq '<type>'.",
    )


# --------------------------------------------------------------------------- the router


def build_router(engine: Engine, token: str) -> APIRouter:
    router = vendor_router(error_response)
    account = Account(engine)

    add_login_routes(router, token)  # Microsoft Entra ID, under /login

    # ------------------------------------------------------------------ ARM

    @router.api_route("/arm/{path:path}", methods=["GET", "PUT", "DELETE", "HEAD", "POST", "PATCH"])
    async def arm(request: Request, path: str) -> Response:
        check_token(request.headers.get("authorization", ""), token)
        api_version = request.query_params.get("api-version")
        if not api_version:
            raise ArmError(
                400,
                "MissingApiVersionParameter",
                "The api-version query parameter (?api-version=) is required for all requests.",
            )
        route, m = next(((n, mm) for n, rx in ROUTES if (mm := rx.fullmatch("/" + path))), ("", None))
        if m is None:
            raise ArmError(
                404, "InvalidResourceType", f"The resource type could not be found for '/{path}'."
            )
        if m.group("sub").lower() != SUBSCRIPTION:
            raise ArmError(
                403,
                "AuthorizationFailed",
                f"The client '{CLIENT_ID}' does not have authorization to perform action "
                f"'{request.method}' over scope '/subscriptions/{m.group('sub')}' or the scope is "
                "invalid.",
            )
        # The call by what it acts on: "PUT virtualMachines", "GET skus" (one route serves them all).
        name_call(request.scope, f"{request.method} {m.groupdict().get('type') or route}")
        ctx = _Ctx(request, api_version, str(request.url).split("/arm/", 1)[0] + "/arm")
        return await _dispatch(ctx, route, m.groupdict())

    async def _faults(op: str, region: str | None = None) -> CallPlan:
        plan = engine.faults.take(NAME, op, region)
        await plan.before()  # an injected refusal reaches the router's guard (from_cloud_error)
        return plan

    async def _finish(plan: CallPlan) -> None:
        await plan.after()

    async def _dispatch(ctx: _Ctx, route: str, g: dict[str, Any]) -> Response:
        method = ctx.request.method
        if route == "subscription" and method == "GET":
            plan = await _faults("verify")
            body: dict[str, Any] = {
                "id": f"/subscriptions/{SUBSCRIPTION}",
                "subscriptionId": SUBSCRIPTION,
                "tenantId": TENANT,
                "displayName": "gpuprov simulated subscription",
                "state": "Enabled",
                "authorizationSource": "RoleBased",
                "subscriptionPolicies": {
                    "locationPlacementId": "Public_2014-09-01",
                    "quotaId": "PayAsYouGo_2014-09-01",
                    "spendingLimit": "Off",
                },
            }
            await _finish(plan)
            return JSONResponse(body)
        if route == "skus" and method == "GET":
            plan = await _faults("offers")
            body = {"value": _skus(ctx.request.query_params.get("$filter"))}
            await _finish(plan)
            return JSONResponse(body)
        if route == "resources" and method == "GET":
            plan = await _faults("list")
            keep = _tag_filter(ctx.request.query_params.get("$filter"))
            body = {"value": [account.generic(r) for r in _all_resources() if keep(r)]}
            await _finish(plan)
            return JSONResponse(body)
        if route in ("vms_all", "vms_group") and method == "GET":
            plan = await _faults("list")
            if g.get("rg"):
                account.group(g["rg"])
            # statusOnly=true (the subscription's list only): each VM with its instance view, as ARM
            # gives it to `Get-AzVM -Status` and the SDK's list_all(status_only="true").
            asked = ctx.request.query_params.get("statusOnly", "")
            status_only = route == "vms_all" and asked.lower() == "true"
            body = {
                "value": [
                    account.render(r, instance_view=status_only) for r in account.of_type(VM, g.get("rg"))
                ]
            }
            await _finish(plan)
            return JSONResponse(body)
        if route in ("net_all", "net_group") and method == "GET":
            plan = await _faults("list")
            if g.get("rg"):
                account.group(g["rg"])
            rtype = TYPES[g["type"].lower()]
            body = {"value": [account.render(r) for r in account.of_type(rtype, g.get("rg"))]}
            await _finish(plan)
            return JSONResponse(body)
        if route == "operation" and method == "GET":
            plan = await _faults("get")
            body = account.operation_json(g["op"])
            await _finish(plan)
            headers = (
                {"Retry-After": retry_after_header(LRO_RETRY_AFTER)}
                if body["status"] == "InProgress"
                else None
            )
            return JSONResponse(body, headers=headers)
        if route == "group":
            return await _group(ctx, method, g["rg"])
        if route == "instance_view" and method == "GET":
            plan = await _faults("get")
            rec = account.existing_vm(g["rg"], g["name"])
            if rec is None:
                raise _not_found(VM, g["name"], g["rg"])
            body = account.instance_view(rec)
            await _finish(plan)
            return JSONResponse(body)
        if route == "subnet" and method == "GET":
            await _faults(OTHER_OP)
            vnet = account.find(account_id(g["rg"], VNET, g["name"]))
            sub = next(
                (
                    s
                    for s in (vnet or {}).get("properties", {}).get("subnets", [])
                    if s["name"].lower() == g["subnet"].lower()
                ),
                None,
            )
            if vnet is None or sub is None:
                raise _not_found(VNET, f"{g['name']}/subnets/{g['subnet']}", g["rg"])
            rendered = account.render(vnet)["properties"]["subnets"]
            return JSONResponse(next(s for s in rendered if s["name"].lower() == g["subnet"].lower()))
        if route == "resource":
            found = TYPES.get(g["type"].lower())
            if found is None or found.split("/")[0].lower() != g["ns"].lower():
                raise ArmError(
                    404,
                    "InvalidResourceType",
                    f"The resource type '{g['type']}' could not be found in the namespace '{g['ns']}'.",
                )
            if found == VM:
                return await _vm(ctx, method, g["rg"], g["name"])
            return await _network(ctx, method, g["rg"], found, g["name"])
        raise ArmError(405, "MethodNotAllowed", f"The method {method} is not allowed here.")

    def account_id(group: str, rtype: str, name: str) -> str:
        return f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{group}/providers/{rtype}/{name}"

    def _all_resources() -> list[dict[str, Any]]:
        account.prune()
        return list(account.resources.values())

    def _not_found(rtype: str, name: str, group: str) -> ArmError:
        code = "NotFound" if rtype != VM else "ResourceNotFound"
        return ArmError(
            404,
            code,
            f"The Resource '{rtype}/{name}' under resource group '{group}' was not found. "
            "For more details please go to https://aka.ms/ARMResourceNotFoundFix",
        )

    def _respond(ctx: _Ctx, out: Outcome) -> Response:
        headers: dict[str, str] = {}
        if out.operation:
            provider = "Microsoft.Compute"
            headers["Azure-AsyncOperation"] = (
                f"{ctx.arm_base}/subscriptions/{SUBSCRIPTION}/providers/{provider}/locations/{out.location}"
                f"/operations/{out.operation}?api-version={ctx.api_version}"
            )
            headers["Retry-After"] = retry_after_header(LRO_RETRY_AFTER)
        if out.body is None:
            return Response(status_code=out.status, headers=headers)
        return JSONResponse(out.body, status_code=out.status, headers=headers)

    async def _group(ctx: _Ctx, method: str, name: str) -> Response:
        plan = await _faults(OTHER_OP)
        response = await _group_call(ctx, method, name)
        await _finish(plan)
        return response

    async def _group_call(ctx: _Ctx, method: str, name: str) -> Response:
        if method == "PUT":
            return _respond(ctx, account.put_group(name, await optional_object(ctx.request) or {}))
        if method in ("GET", "HEAD"):
            if name.lower() not in account.groups:
                if method == "HEAD":
                    return Response(status_code=404)
                account.group(name)  # raises ResourceGroupNotFound
            return Response(status_code=204) if method == "HEAD" else JSONResponse(account.group_json(name))
        if method == "DELETE":
            return _respond(ctx, account.delete_group(name))
        raise ArmError(405, "MethodNotAllowed", f"The method {method} is not allowed on a resource group.")

    async def _network(ctx: _Ctx, method: str, group: str, rtype: str, name: str) -> Response:
        plan = await _faults(OTHER_OP)
        response = await _network_call(ctx, method, group, rtype, name)
        await _finish(plan)
        return response

    async def _network_call(ctx: _Ctx, method: str, group: str, rtype: str, name: str) -> Response:
        if method == "PUT":
            body = await optional_object(ctx.request) or {}
            return _respond(ctx, account.put_network(group, rtype, name, body))
        if method == "GET":
            account.group(group)
            rec = account.find(account_id(account.group(group)["name"], rtype, name))
            if rec is None:
                raise _not_found(rtype, name, group)
            return JSONResponse(account.render(rec))
        if method == "DELETE":
            return _respond(ctx, account.delete_network(group, rtype, name))
        raise ArmError(405, "MethodNotAllowed", f"The method {method} is not allowed here.")

    async def _vm(ctx: _Ctx, method: str, group: str, name: str) -> Response:
        if method == "GET":
            plan = await _faults("get")
            rec = account.existing_vm(group, name)
            if rec is None:
                raise _not_found(VM, name, group)
            body = account.render(
                rec, instance_view=ctx.request.query_params.get("$expand") == "instanceView"
            )
            await _finish(plan)
            return JSONResponse(body)
        if method == "DELETE":
            plan = await _faults("terminate")
            out = account.delete_vm(group, name)
            await _finish(plan)
            return _respond(ctx, out)
        if method != "PUT":
            raise ArmError(
                405, "MethodNotAllowed", f"The method {method} is not allowed on a virtual machine."
            )
        body = await optional_object(ctx.request) or {}
        zones = body.get("zones") or []
        location = str(body.get("location") or "").lower()
        region = cat.engine_region(location, str(zones[0])) if zones and isinstance(zones, list) else location
        plan = engine.faults.take(NAME, "create", region)
        capacity_refused = False
        try:
            await plan.before()
        except NoCapacity:
            capacity_refused = True  # arrives later, in the operation, as on Azure
        except QuotaExceeded:
            size = cat.BY_NAME.get(
                str((body.get("properties") or {}).get("hardwareProfile", {}).get("vmSize")).lower()
            )
            if size is None:
                raise ArmError(
                    409,
                    "OperationNotAllowed",
                    "Operation results in exceeding quota limits of Core. (injected)",
                ) from None
            raise account.quota_error(size, location) from None
        req = account.vm_checks(group, name, body)
        existing = account.existing_vm(group, name)
        if existing is not None and not existing.get("failed"):
            account.converge_vm(existing, req)
            out = Outcome(
                200, account.render(existing), operation=existing["operation"], location=existing["location"]
            )
        else:
            if existing is not None:
                account.converge_vm(existing, req)  # a Failed VM: identical parameters retry the allocation
            limit = engine.quota.get(NAME)
            if limit is not None and len(engine.live(NAME)) >= limit:
                raise account.quota_error(req["size"], req["location"])
            out = account.create_vm(
                group,
                name,
                body,
                req,
                capacity_refused=capacity_refused,
                stuck=plan.stuck_booting,
                die_after_boot=plan.die_after_boot,
            )
        await _finish(plan)
        return _respond(ctx, out)

    def _skus(filter_text: str | None) -> list[dict[str, Any]]:
        wanted: str | None = None
        if filter_text:
            m = re.fullmatch(r"\s*location\s+eq\s+'([^']+)'\s*", filter_text, re.I)
            if m is None:
                raise ArmError(
                    400, "InvalidFilter", "Only the location filter is supported: location eq '<name>'."
                )
            wanted = m.group(1).lower()
        out = []
        for size in cat.SIZES_SOLD:
            for loc in size.locations:
                if wanted and loc != wanted:
                    continue
                caps = [
                    ("vCPUs", size.vcpus),
                    ("MemoryGB", f"{size.memory_gb:g}"),
                    ("HyperVGenerations", size.hyperv),
                    ("LowPriorityCapable", "True" if size.spot else "False"),
                    ("vCPUsAvailable", size.vcpus),
                    ("PremiumIO", "True"),
                    ("MaxNetworkInterfaces", 4),
                ]
                if size.gpu:
                    caps.append(("GPUs", size.gpu.count))
                restrictions = [
                    {
                        "type": "Zone" if r.zones else "Location",
                        "values": [loc],
                        "restrictionInfo": {
                            "locations": [loc],
                            **({"zones": list(r.zones)} if r.zones else {}),
                        },
                        "reasonCode": r.reason,
                    }
                    for r in size.restrictions
                    if r.location == loc
                ]
                out.append(
                    {
                        "resourceType": "virtualMachines",
                        "name": size.name,
                        "tier": "Standard",
                        "size": size.name.removeprefix("Standard_"),
                        "family": size.family,
                        "locations": [loc],
                        "locationInfo": [
                            {"location": loc, "zones": list(cat.LOCATIONS[loc]), "zoneDetails": []}
                        ],
                        "capabilities": [{"name": n, "value": str(v)} for n, v in caps],
                        "restrictions": restrictions,
                    }
                )
        return out

    return router


class _Ctx:
    __slots__ = ("request", "api_version", "arm_base")

    def __init__(self, request: Request, api_version: str, arm_base: str) -> None:
        self.request, self.api_version, self.arm_base = request, api_version, arm_base


def credentials(token: str) -> dict[str, Any]:
    """The simulated subscription's service principal: the facade's token is its client secret."""
    return {
        "tenant_id": TENANT,
        "subscription_id": SUBSCRIPTION,
        "client_id": CLIENT_ID,
        "client_secret": token,
    }


FACADE = Facade(
    name=NAME,
    prefix=PREFIX,
    display_name="Microsoft Azure (simulated)",
    build_router=build_router,
    credentials=credentials,
    login_user="ubuntu",
    regions=cat.REGIONS,
    instance_types=cat.INSTANCE_TYPES,
    # Engine names are "<resource group>/<vm>": unique per resource group, as Azure's VM names are.
    names=NameRule(required=True, unique=True, max_length=160),
    machine_id=lambda: str(uuid.uuid4()),  # the VM's vmId
    preinstalled={"k3s": k3s.SCRIPT},
    ssh_port=22,
    tls=True,
    side_resources=lambda engine: Account(engine).side_rows(),
    ingress=lambda engine, machine: Account(engine).ingress(machine),
)

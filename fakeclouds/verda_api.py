"""Verda (formerly DataCrunch), simulated: its public API at /v1 as the official SDK
(verda-cloud/sdk-python) calls it, translated to the engine. `FACADE` at the bottom declares it.
Request bodies: `verda_bodies.py`; locations, images and instance types: `verda_catalog.py`.

- OAuth2 client credentials: `POST /oauth2/token` (JSON) issues short-lived access tokens and a
  refresh token; `grant_type=refresh_token` renews them. Tokens are HMAC-signed by the client secret
  (the facade's token), so they survive a restart. Their lifetimes are a knob (`set_token_ttl`) and
  `expire_tokens` ends every token issued so far: an expired or unknown access token is 401.
- Offers: `/instance-types` (one price and spot price per type), `/instance-availability` per
  location and market, `/locations`, `/images`. Create: `POST /instances` answers the new id as plain
  text and makes its OS volume (`/volumes`); `startup_script_id` names a `/scripts` entry, run at boot.
- The delete quirk: `PUT /instances {action: "delete"}` is refused while the instance provisions
  ("Can't discontinue a provisioning instance") and for one already deleted ("Can't discontinue a
  discontinued instance"); an unknown id is "Invalid instance id". A deleted instance stays visible
  by id as `discontinued` and leaves the listing. Volumes named in `volume_ids` go with it
  (`delete_permanently`: for good, else to the trash); other attached volumes stay, detached.
- Errors are `{code, message}` with the SDK's codes. [unconfirmed]: HTTP statuses other than 401;
  the capacity refusal (400 `invalid_request`, "Not enough capacity ..."); the 429 body; the JSON
  shape of `/locations` and `/images`; hostname rules (≤ 60 of [A-Za-z0-9-], not unique).
  Verda documents no rate limits, so none are enforced; injected faults still answer 429.

Not modelled: shutdown/hibernate/start actions, extra data volumes, clusters, volume billing, spot
discontinuation, a provisioning that never ends other than by an injected `stuck_booting`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from fakeclouds import k3s
from fakeclouds.bodies import json_body, optional_object
from fakeclouds.catalog import InstanceType
from fakeclouds.common import check_rate, iso, run_op
from fakeclouds.engine import ERROR, PENDING, RUNNING, Engine, Machine
from fakeclouds.errors import (
    CloudError,
    Invalid,
    LostResponse,
    NoCapacity,
    NotFound,
    QuotaExceeded,
    RateLimit,
    ServerFault,
    Unauthorized,
)
from fakeclouds.facade import Facade, NameRule
from fakeclouds.faults import CallPlan
from fakeclouds.ssh import parse_public_key
from fakeclouds.vendor_errors import CodeTable, retry_after, vendor_router
from fakeclouds.verda_bodies import (
    ActionBody,
    CreateBody,
    DeleteKeysBody,
    DeleteScriptsBody,
    OsVolume,
    ScriptBody,
    SshKeyBody,
    TokenBody,
    VolumeActionBody,
    ids_of,
    is_spot,
)
from fakeclouds.verda_catalog import (
    COUNTRY,
    CUDA_24,
    IMAGES,
    INSTANCE_TYPES,
    REGIONS,
    TYPES,
    supported_os,
    type_json,
)

NAME = "verda"
ACCESS_TTL_S = 3600.0  # [unconfirmed] Verda's access-token lifetime
REFRESH_TTL_S = 86400.0  # [unconfirmed]

_STATUS = {PENDING: "provisioning", RUNNING: "running", ERROR: "error"}  # other engine states: discontinued
PROVISIONING = "Can't discontinue a provisioning instance"
DISCONTINUED = "Can't discontinue a discontinued instance"
INVALID_ID = "Invalid instance id"


class Forbidden(CloudError):
    """Verda's `forbidden_action`: the request is understood but not allowed in this state."""


# (HTTP status, code) per error class. Statuses other than 401 and codes of capacity/429 are [unconfirmed].
_ERRORS = CodeTable([
    (Unauthorized, (401, "unauthorized_request")),
    (NotFound, (404, "not_found")),
    (Invalid, (400, "invalid_request")),
    (Forbidden, (403, "forbidden_action")),
    (NoCapacity, (400, "invalid_request")),
    (QuotaExceeded, (402, "insufficient_funds")),
    (RateLimit, (429, "too_many_requests")),
    (ServerFault, (500, "server_error")),
    (LostResponse, (504, "server_error")),  # simulation only: a gateway timeout
], default=(500, "server_error"))


def error_response(exc: CloudError, _request: Request | None = None) -> JSONResponse:
    status, code = _ERRORS(exc)
    message = exc.message
    if isinstance(exc, ServerFault):
        status = exc.status
        code = "service_unavailable" if status == 503 else "server_error"
    if isinstance(exc, NoCapacity):  # wording [unconfirmed]
        message = "Not enough capacity available for this instance type in this location"
    return JSONResponse({"code": code, "message": message}, status_code=status, headers=retry_after(exc))


# ----------------------------------------------------------------------------- account state


def state(engine: Engine) -> dict[str, Any]:
    """The simulated account's own state (JSON-able, persisted, cleared by reset)."""
    st = engine.facade_state[NAME]
    for k in ("ssh_keys", "scripts", "volumes", "trash"):
        st.setdefault(k, {})
    st.setdefault("ttl", {"access": ACCESS_TTL_S, "refresh": REFRESH_TTL_S})
    st.setdefault("not_before", {"access": 0.0, "refresh": 0.0})
    st.setdefault("grants", {"client_credentials": 0, "refresh_token": 0})
    return st


def set_token_ttl(engine: Engine, *, access_s: float | None = None, refresh_s: float | None = None) -> None:
    """Lifetimes of tokens issued from now on (tests make them short)."""
    ttl = state(engine)["ttl"]
    if access_s is not None:
        ttl["access"] = access_s
    if refresh_s is not None:
        ttl["refresh"] = refresh_s


def expire_tokens(engine: Engine, *, access: bool = True, refresh: bool = False) -> None:
    """Every access (and refresh) token issued until now is expired from now on."""
    nb = state(engine)["not_before"]
    now = time.time()
    if access:
        nb["access"] = now
    if refresh:
        nb["refresh"] = now


def grants(engine: Engine) -> dict[str, int]:
    """How many tokens each grant type issued (tests check the adapter refreshes, not re-logs in)."""
    return dict(state(engine)["grants"])


def client_id(secret: str) -> str:
    """The OAuth2 client id paired with the client secret `secret` (the facade's token)."""
    return "sim" + hashlib.sha256(f"verda-client:{secret}".encode()).hexdigest()[:21]


def credentials(token: str) -> dict[str, str]:
    return {"client_id": client_id(token), "client_secret": token}


def _sign(secret: str, payload: bytes) -> str:
    return hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def issue(secret: str, kind: str, ttl: float) -> str:
    now = time.time()
    payload = base64.urlsafe_b64encode(json.dumps(
        {"k": kind, "iat": now, "exp": now + ttl, "n": uuid.uuid4().hex}).encode()).decode()
    return f"{payload}.{_sign(secret, payload.encode())}"


def check_token(engine: Engine, secret: str, token: str, kind: str) -> None:
    """Unauthorized unless `token` is a live token of `kind` this account issued."""
    payload, _, sig = token.partition(".")
    # bytes, not str: compare_digest refuses a non-ASCII str (TypeError, a 500), where the API answers 401
    if not sig or not hmac.compare_digest(sig.encode(), _sign(secret, payload.encode()).encode()):
        raise Unauthorized(f"Invalid {kind} token")
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload.encode()))
    except ValueError:
        raise Unauthorized(f"Invalid {kind} token") from None
    now = time.time()
    if claims.get("k") != kind:
        raise Unauthorized(f"Invalid {kind} token")
    if claims["exp"] <= now or claims["iat"] < state(engine)["not_before"][kind]:
        raise Unauthorized(f"The {kind} token has expired")


# ----------------------------------------------------------------------------- JSON shapes


def instance_json(engine: Engine, m: Machine) -> dict[str, Any]:
    itype = TYPES[m.instance_type]
    status = _STATUS.get(m.status, "discontinued")
    t = type_json(itype)
    return {
        "id": m.id, "instance_type": m.instance_type, "price_per_hour": m.price_per_hour,
        "hostname": m.name, "description": m.extra.get("description", ""), "status": status,
        "created_at": iso(m.created_at), "ssh_key_ids": m.extra.get("ssh_key_ids", []),
        "cpu": t["cpu"], "gpu": t["gpu"], "memory": t["memory"], "gpu_memory": t["gpu_memory"],
        "storage": t["storage"],
        # Like the SDK says: no ip nor OS volume until provisioned; an instance in error keeps its ip.
        "ip": m.address if m.status in (RUNNING, ERROR) else None,
        "os_volume_id": m.extra.get("os_volume_id") if m.status != PENDING else None,
        "location": m.region, "image": m.extra.get("image"),
        "startup_script_id": m.extra.get("startup_script_id"), "is_spot": m.spot,
        "contract": m.extra.get("contract"), "pricing": m.extra.get("pricing"),
    }


# ----------------------------------------------------------------------------- the API


def build_router(engine: Engine, token: str) -> APIRouter:
    router = vendor_router(error_response)

    def authorize(request: Request) -> None:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthorized("Missing access token")
        check_token(engine, token, value.strip(), "access")

    async def call(request: Request, op: str, effect: Callable[[CallPlan], Any], *, status: int = 200,
                   region: str | None = None) -> Response:
        authorize(request)
        check_rate(engine, NAME, request, op)
        body = await run_op(engine, NAME, op, effect, region)
        if body is None:
            return Response(status_code=status)
        if isinstance(body, str):  # Verda answers a created resource's id as plain text
            return PlainTextResponse(body, status_code=status)
        return JSONResponse(body, status_code=status)

    async def with_body(request: Request, model: type[Any], op: str,
                        effect: Callable[[Any, CallPlan], Any], **kwargs: Any) -> Response:
        authorize(request)
        body = await json_body(request, model)
        if "region_of" in kwargs:
            kwargs["region"] = kwargs.pop("region_of")(body)
        return await call(request, op, lambda plan: effect(body, plan), **kwargs)

    # ------------------------------------------------------------------ auth

    @router.post("/oauth2/token")
    async def oauth2_token(request: Request) -> Response:
        body = await json_body(request, TokenBody)
        st = state(engine)
        if body.grant_type == "client_credentials":
            # bytes: see check_token
            secret_ok = hmac.compare_digest((body.client_secret or "").encode(), token.encode())
            if body.client_id != client_id(token) or not secret_ok:
                raise Unauthorized("Invalid client credentials")
        elif body.grant_type == "refresh_token":
            check_token(engine, token, body.refresh_token or "", "refresh")
        else:
            raise Invalid("grant_type must be client_credentials or refresh_token")
        st["grants"][body.grant_type] += 1
        ttl = st["ttl"]
        # expires_in is whole seconds (an integer, as OAuth2 and the SDK's own tests give it: sdk-python
        # tests/unit_tests/authentication/test_authentication.py EXPIRES_IN = 3600), rounded down: a
        # client never holds a token past its end by our number.
        return JSONResponse({"access_token": issue(token, "access", ttl["access"]),
                             "refresh_token": issue(token, "refresh", ttl["refresh"]),
                             "token_type": "Bearer", "expires_in": int(ttl["access"]),
                             "scope": "cloud-api-v1"})

    @router.get("/balance")
    async def balance(request: Request) -> Response:
        return await call(request, "verify", lambda _: {"amount": 1000.0, "currency": "usd"})

    # ------------------------------------------------------------------ catalogue

    @router.get("/instance-types")
    async def instance_types(request: Request, currency: str = "usd") -> Response:
        def effect(_: CallPlan) -> Any:
            if currency not in ("usd", "eur"):
                raise Invalid("currency must be usd or eur")
            return [type_json(t) for t in INSTANCE_TYPES]
        return await call(request, "offers", effect)

    def available(spot: bool, location: str, itype: InstanceType) -> bool:
        if location not in itype.prices or (spot and not itype.spot_factor):
            return False
        return engine.in_stock(NAME, itype.name, location) > 0

    def locations_of(location_code: str | None) -> list[str]:
        if location_code is None:
            return [r.name for r in REGIONS]
        if location_code not in COUNTRY:
            raise Invalid("Invalid location code")
        return [location_code]

    @router.get("/instance-availability")
    async def availability(request: Request, location_code: str | None = None) -> Response:
        def effect(_: CallPlan) -> Any:
            spot = is_spot(request.query_params.get("isSpot"))
            return [{"location_code": loc,
                     "availabilities": [t.name for t in INSTANCE_TYPES if available(spot, loc, t)]}
                    for loc in locations_of(location_code)]
        return await call(request, "offers", effect)

    @router.get("/instance-availability/{instance_type}")
    async def availability_of(request: Request, instance_type: str,
                              location_code: str | None = None) -> Response:
        def effect(_: CallPlan) -> Any:
            itype = TYPES.get(instance_type)
            if itype is None:
                raise Invalid("Invalid instance type")
            spot = is_spot(request.query_params.get("isSpot"))
            return any(available(spot, loc, itype) for loc in locations_of(location_code))
        return await call(request, "offers", effect)

    @router.get("/locations")
    async def locations(request: Request) -> Response:
        return await call(request, "offers", lambda _: [
            {"code": r.name, "name": r.description, "country_code": COUNTRY[r.name]} for r in REGIONS])

    @router.get("/images")
    async def images(request: Request) -> Response:
        return await call(request, "offers", lambda _: [
            {"id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"verda-sim/image/{i}")), "image_type": i, "name": i,
             "is_default": i == CUDA_24, "is_cluster": False, "details": [], "category": "ubuntu"}
            for i in IMAGES])

    # ------------------------------------------------------------------ SSH keys and startup scripts

    def store(kind: str) -> dict[str, dict[str, Any]]:
        return state(engine)[kind]  # type: ignore[no-any-return]

    def one(kind: str, rid: str, what: str, missing: type[CloudError] = NotFound) -> dict[str, Any]:
        found = store(kind).get(rid)
        if found is None:  # a reference inside a create body is a bad request, not a missing resource
            raise missing(f"Invalid {what} id")
        return found

    def drop(kind: str, ids: list[str], what: str) -> None:
        for rid in ids:  # all exist, or nothing is deleted
            one(kind, rid, what)
        for rid in ids:
            store(kind).pop(rid)
        engine.save()

    def add(kind: str, entry: dict[str, Any]) -> str:
        rid = str(uuid.uuid4())
        store(kind)[rid] = {"id": rid, **entry}
        engine.save()
        return rid

    def add_key(body: SshKeyBody, _: CallPlan) -> str:
        try:
            parse_public_key(body.key)
        except ValueError:
            raise Invalid("Invalid SSH key") from None
        return add("ssh_keys", {"name": body.name, "key": body.key.strip()})

    @router.get("/sshkeys")
    async def list_keys(request: Request) -> Response:
        return await call(request, "ssh_keys", lambda _: list(store("ssh_keys").values()))

    @router.post("/sshkeys")
    async def create_key(request: Request) -> Response:
        return await with_body(request, SshKeyBody, "ssh_keys", add_key, status=201)

    @router.get("/sshkeys/{key_id}")
    async def get_key(request: Request, key_id: str) -> Response:
        return await call(request, "ssh_keys", lambda _: [one("ssh_keys", key_id, "ssh key")])

    @router.delete("/sshkeys/{key_id}")
    async def delete_key(request: Request, key_id: str) -> Response:
        return await call(request, "ssh_keys", lambda _: drop("ssh_keys", [key_id], "ssh key"))

    @router.delete("/sshkeys")
    async def delete_keys(request: Request) -> Response:
        return await with_body(request, DeleteKeysBody, "ssh_keys",
                               lambda b, _: drop("ssh_keys", b.keys, "ssh key"))

    @router.get("/scripts")
    async def list_scripts(request: Request) -> Response:
        return await call(request, "side_resources", lambda _: list(store("scripts").values()))

    @router.post("/scripts")
    async def create_script(request: Request) -> Response:
        return await with_body(request, ScriptBody, "side_resources",
                               lambda b, _: add("scripts", {"name": b.name, "script": b.script}), status=201)

    @router.get("/scripts/{script_id}")
    async def get_script(request: Request, script_id: str) -> Response:
        return await call(request, "side_resources", lambda _: [one("scripts", script_id, "startup script")])

    @router.delete("/scripts/{script_id}")
    async def delete_script(request: Request, script_id: str) -> Response:
        return await call(request, "side_resources", lambda _: drop("scripts", [script_id], "startup script"))

    @router.delete("/scripts")
    async def delete_scripts(request: Request) -> Response:
        return await with_body(request, DeleteScriptsBody, "side_resources",
                               lambda b, _: drop("scripts", b.scripts, "startup script"))

    # ------------------------------------------------------------------ volumes

    def delete_volume(vid: str, permanent: bool) -> None:
        vol = store("volumes").pop(vid)
        if not permanent:  # the trash keeps it (recoverable) for a while; not billed [unconfirmed]
            store("trash")[vid] = {**vol, "status": "deleted", "deleted_at": iso(time.time()),
                                   "instance_id": None}

    def delete_volumes(ids: list[str], permanent: bool) -> None:
        for vid in ids:
            vol = one("volumes", vid, "volume")
            if vol["instance_id"] is not None:
                raise Forbidden("Volume is attached to an instance; delete or detach it first")
        for vid in ids:
            delete_volume(vid, permanent)
        engine.save()

    @router.get("/volumes")
    async def list_volumes(request: Request) -> Response:
        return await call(request, "side_resources", lambda _: list(store("volumes").values()))

    @router.get("/volumes/trash")
    async def list_trash(request: Request) -> Response:
        return await call(request, "side_resources", lambda _: list(store("trash").values()))

    @router.get("/volumes/{volume_id}")
    async def get_volume(request: Request, volume_id: str) -> Response:
        return await call(request, "side_resources", lambda _: one("volumes", volume_id, "volume"))

    @router.delete("/volumes/{volume_id}")
    async def delete_volume_by_id(request: Request, volume_id: str) -> Response:
        authorize(request)
        permanent = bool((await optional_object(request) or {}).get("is_permanent"))
        return await call(request, "side_resources", lambda _: delete_volumes([volume_id], permanent))

    @router.put("/volumes")
    async def volume_action(request: Request) -> Response:
        def effect(body: VolumeActionBody, _: CallPlan) -> None:
            if body.action != "delete":
                raise Invalid(f"volume action {body.action!r} is not supported by this simulation")
            delete_volumes(ids_of(body.id), body.is_permanent)
        return await with_body(request, VolumeActionBody, "side_resources", effect, status=202)

    # ------------------------------------------------------------------ instances

    def deploy(body: CreateBody, plan: CallPlan) -> str:
        itype = TYPES.get(body.instance_type)
        if itype is None:
            raise Invalid("Invalid instance type")
        if body.location_code not in COUNTRY:
            raise Invalid("Invalid location code")
        if body.image not in IMAGES:
            raise Invalid("Invalid image")
        if body.image not in supported_os(itype):
            raise Invalid("Operating system is not valid for this instance type")
        if body.volumes or body.existing_volumes:
            raise Invalid("extra volumes are not supported by this simulation")
        if not body.ssh_key_ids:
            raise Invalid("at least one ssh key id is required (this simulation has no passwords)")
        keys = [one("ssh_keys", k, "ssh key", Invalid)["key"] for k in body.ssh_key_ids]
        script = (one("scripts", body.startup_script_id, "startup script", Invalid)
                  if body.startup_script_id else None)
        os_volume = body.os_volume or OsVolume(name=f"OS-{body.hostname}", size=50)
        [m] = engine.create(
            NAME, name=body.hostname, instance_type=body.instance_type, region=body.location_code,
            spot=body.is_spot, public_keys=keys, user_data=script["script"] if script else None,
            stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot,
            extra={"description": body.description, "image": body.image, "ssh_key_ids": body.ssh_key_ids,
                   "startup_script_id": body.startup_script_id, "contract": body.contract,
                   "pricing": body.pricing})
        vid = str(uuid.uuid4())
        store("volumes")[vid] = {
            "id": vid, "status": "attached", "name": os_volume.name, "size": os_volume.size, "type": "NVMe",
            "is_os_volume": True, "created_at": iso(m.created_at), "target": "vda", "location": m.region,
            "instance_id": m.id, "ssh_key_ids": body.ssh_key_ids,
            "on_spot_discontinue": os_volume.on_spot_discontinue or "keep_detached"}
        m.extra["os_volume_id"] = vid
        engine.save()
        return m.id

    @router.post("/instances")
    async def create_instance(request: Request) -> Response:
        return await with_body(request, CreateBody, "create", deploy, region_of=lambda b: b.location_code)

    @router.get("/instances")
    async def list_instances(request: Request, status: str | None = None) -> Response:
        def effect(_: CallPlan) -> Any:
            rows = [instance_json(engine, m) for m in engine.live(NAME)
                    if m.status in _STATUS]  # not deleted ones (terminating is already discontinued)
            if status == "discontinued":  # deleted ones only on request
                rows = [instance_json(engine, m) for m in engine.machines.values()
                        if m.facade == NAME and m.status not in _STATUS]
            return [r for r in rows if status in (None, "", r["status"])]
        return await call(request, "list", effect)

    def machine(instance_id: str) -> Machine:
        m = engine.machines.get(instance_id)
        if m is None or m.facade != NAME:
            raise NotFound(INVALID_ID)
        return m

    @router.get("/instances/{instance_id}")
    async def get_instance(request: Request, instance_id: str) -> Response:
        return await call(request, "get", lambda _: instance_json(engine, machine(instance_id)))

    def act(body: ActionBody, _: CallPlan) -> None:
        if body.action != "delete":
            known = body.action in ("start", "shutdown", "hibernate", "restore")
            raise Invalid(f"action {body.action!r} is not supported by this simulation" if known
                          else "Invalid action")
        machines = [machine(i) for i in ids_of(body.id)]
        for m in machines:  # every instance may be deleted, or none is
            if m.status not in _STATUS:
                raise Forbidden(DISCONTINUED)
            if m.status == PENDING:
                raise Forbidden(PROVISIONING)
        ours = {m.id for m in machines}
        named = body.volume_ids or []
        for vid in named:
            if store("volumes").get(vid, {}).get("instance_id") not in ours:
                raise Invalid("Invalid volume id")
        for m in machines:
            engine.terminate(NAME, m.id)
        for vid, vol in list(store("volumes").items()):
            if vol["instance_id"] in ours:
                if vid in named:
                    delete_volume(vid, body.delete_permanently)
                else:  # kept, detached (and billed)
                    vol.update(instance_id=None, status="detached")
        engine.save()

    @router.put("/instances")
    async def instance_action(request: Request) -> Response:
        return await with_body(request, ActionBody, "terminate", act, status=202)

    return router


def side_resources(engine: Engine) -> list[dict[str, str]]:
    st = state(engine)
    kinds = (("ssh_keys", "ssh-key"), ("scripts", "startup-script"), ("volumes", "volume"))
    return [{"kind": kind, "id": row["id"], "name": row["name"]} for store_name, kind in kinds
            for row in st[store_name].values()]


FACADE = Facade(
    name=NAME, prefix="/verda/v1", display_name="Verda (simulated)", build_router=build_router,
    credentials=credentials, login_user="root", regions=REGIONS, instance_types=INSTANCE_TYPES,
    # Hostnames: required, not unique [unconfirmed], letters, digits and hyphens (dstack keeps ≤ 60).
    names=NameRule(required=True, unique=False, max_length=60, pattern=r"[A-Za-z0-9][A-Za-z0-9-]*",
                   hint="hostname must be 1-60 characters of letters, digits and hyphens"),
    machine_id=lambda: str(uuid.uuid4()), preinstalled={"k3s": k3s.SCRIPT}, ssh_port=22,
    side_resources=side_resources,
)

"""DigitalOcean GPU Droplets, simulated: the public API v2 (official OpenAPI, `digitalocean/openapi`,
specification/resources/{droplets,firewalls,tags,sizes,ssh_keys,account}) over the shared engine.
`FACADE` at the bottom declares it. Mounted at `/digitalocean/v2`.

Modelled (research/provider-facts.md B.3):
- Bearer auth (401 `unauthorized`); errors `{"id", "message", "request_id"}`. Every answer carries
  `ratelimit-limit` / `ratelimit-remaining` / `ratelimit-reset` (epoch when the oldest request of the
  hour leaves the window); 5,000 requests per hour and 250 per minute per token; a 429 is
  `{"id": "too_many_requests", "message": "API Rate limit exceeded."}` and has `retry-after` only when
  the per-minute burst limit (or an injected fault) refused it. `GET /account/keys` (the listing) is
  limited to 10 per 60 s on top.
- `POST /droplets` (`name` or `names` ≤ 10) -> 202 `{droplet | droplets, links}`. Capacity AND quota are
  both 422 `unprocessable_entity`, told apart by the message only: "Size is not available in this
  region." / "creating this droplet will exceed your droplet limit". Other refusals are 422 too
  (unknown size, region, image, SSH key, bad name, user data over 64 KiB). Names are NOT unique.
- `GET /droplets` returns only non-GPU droplets unless `type=gpus`; `tag_name` cannot be combined with
  `name` or `type` (422); `name` is an exact, case-insensitive match. Pagination (`per_page` ≤ 200,
  `page`, `links.pages.{first,prev,next,last}`, `meta.total`) on every listing.
- Statuses `new` (booting: no public address yet) -> `active` -> deleted (`DELETE` -> 204, then 404); a
  machine that died shows `off`. The public IPv4 (`networks.v4[type=public]`) is the machine's own
  loopback address; SSH is on 22 there, as root.
- Tags (`POST /tags` 201, idempotent; `DELETE /tags/{name}` untags everything) and cloud firewalls
  (`POST /firewalls` 202, referencing existing tags or droplet ids; firewall names are not unique).
- Account SSH keys by id or MD5 fingerprint (`/account/keys`, `/account/keys/{id|fingerprint}`).

[unconfirmed] and simplified: whether `tag_name` alone lists GPU droplets (here: no, like the
default listing); that `POST /tags` of an existing tag answers 201; the status codes of firewall and
pagination refusals (400 here); that a deleted droplet is 404 at once; `per_page` over 200 is
clamped; a droplet without any SSH key (DigitalOcean would e-mail a root password) is refused.

Firewalls filter what reaches a droplet's simulated Kubernetes API (fakeclouds/digitalocean_account.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import random
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from fakeclouds import k3s
from fakeclouds.catalog import InstanceType
from fakeclouds.common import authorized_body, check_bearer, iso, make_call
from fakeclouds.digitalocean_account import NAME, ingress, side_resources
from fakeclouds.digitalocean_account import droplets as _droplets
from fakeclouds.digitalocean_account import state as _state
from fakeclouds.digitalocean_account import tags_of as _tags_of
from fakeclouds.digitalocean_catalog import (
    IMAGES,
    INSTANCE_TYPES,
    REGIONS,
    SIZES,
    DropletCreate,
    FirewallCreate,
    KeyCreate,
    Rule,
    TagCreate,
    gpu_info,
    image_json,
)
from fakeclouds.engine import TERMINATED, TERMINATING, Engine, Machine
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
from fakeclouds.ratelimit import Limit, identity
from fakeclouds.vendor_errors import retry_after_header, vendor_router

BURST, HOURLY = "burst limit", "hourly limit"  # Limit.what: tells the two 429s apart
RATE_LIMITS = (Limit(calls=250, per_s=60, what=BURST), Limit(calls=5000, per_s=3600, what=HOURLY))
KEY_LISTING_LIMIT = (Limit(calls=10, per_s=60, what=BURST),)  # GET /account/keys only
USER_DATA_MAX = 64 * 1024
PER_PAGE_DEFAULT, PER_PAGE_MAX = 20, 200
CAPACITY_MESSAGE = "Size is not available in this region."
_TAG = re.compile(r"[a-zA-Z0-9_\-:]{1,255}")
_FIREWALL_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9.-]+")
_PORTS = re.compile(r"(\d{1,5})(?:-(\d{1,5}))?|all")
_STATUS = {"pending": "new", "running": "active", "error": "off"}


class BadRequest(Invalid):
    """A refusal DigitalOcean answers 400 `bad_request` (firewalls, tags, paging), not 422."""


class TagError(BadRequest):
    """Tags answer in their own shape: `{"error", "messages", "root_causes"}` [doc tags_bad_request]."""


# A body that cannot be read: 422 unprocessable_entity, but tags and firewalls answer 400 in their shape.
BODY_REFUSALS: dict[type, type[BadRequest]] = {TagCreate: TagError, FirewallCreate: BadRequest}


def error_response(exc: CloudError) -> JSONResponse:
    headers: dict[str, str] = {}
    if isinstance(exc, BadBody) and exc.model in BODY_REFUSALS:
        exc = BODY_REFUSALS[exc.model](exc.message)
    if isinstance(exc, TagError):
        return JSONResponse({"error": exc.message, "messages": None, "root_causes": [exc.message]},
                            status_code=400)
    if isinstance(exc, Unauthorized):
        status, eid, message = 401, "unauthorized", "Unable to authenticate you"
    elif isinstance(exc, NotFound):
        status, eid, message = 404, "not_found", "The resource you were accessing could not be found."
    elif isinstance(exc, NoCapacity):
        status, eid, message = 422, "unprocessable_entity", CAPACITY_MESSAGE
    elif isinstance(exc, QuotaExceeded):
        status, eid = 422, "unprocessable_entity"
        message = "creating this/these droplet(s) will exceed your droplet limit"
    elif isinstance(exc, RateLimit):
        status, eid, message = 429, "too_many_requests", "API Rate limit exceeded."
        if not exc.message.startswith(HOURLY):  # retry-after only on burst-limit 429s [doc]
            headers["retry-after"] = retry_after_header(exc.retry_after)
    elif isinstance(exc, ServerFault):
        status, eid, message = exc.status, "server_error", "Server was unable to give you a response."
    elif isinstance(exc, LostResponse):  # simulation only: the effect happened, the answer did not
        status, eid, message = 504, "gateway_timeout", "Gateway timeout."
    elif isinstance(exc, BadRequest):
        status, eid, message = 400, "bad_request", exc.message
    else:  # Invalid, NameConflict: DigitalOcean refuses a create it cannot do with 422
        status, eid, message = 422, "unprocessable_entity", exc.message
    body = {"id": eid, "message": message, "request_id": str(uuid.uuid4())}
    return JSONResponse(body, status_code=status, headers=headers)


def fingerprint(public_key: str) -> str:
    """The MD5 fingerprint DigitalOcean names keys by: colon-separated hex of the key blob's MD5."""
    parts = public_key.split()
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (IndexError, binascii.Error, ValueError):
        raise Invalid("Key invalid, key should be of the format `type key [comment]`") from None
    digest = hashlib.md5(blob, usedforsecurity=False).hexdigest()
    return ":".join(digest[i:i + 2] for i in range(0, 32, 2))


# --------------------------------------------------------------------------- JSON shapes


def size_json(engine: Engine, t: InstanceType) -> dict[str, Any]:
    price = next(iter(t.prices.values()))
    out: dict[str, Any] = {
        "slug": t.name, "memory": t.memory_gib * 1024, "vcpus": t.vcpus, "disk": t.storage_gib,
        "transfer": 15.0 if t.gpu else 4.0, "price_monthly": round(price * 672, 2), "price_hourly": price,
        # Regions where a create can succeed now: a sold-out region drops out (the size stays available).
        "regions": [r for r in t.prices if engine.in_stock(NAME, t.name, r) > 0],
        "available": True, "description": t.description,
    }
    if t.gpu:
        out["gpu_info"] = gpu_info(t)
    return out


def droplet_json(engine: Engine, m: Machine) -> dict[str, Any]:
    t = SIZES[m.instance_type]
    v4 = []
    if m.status != "pending" and m.address:  # addresses come with boot; a dead droplet keeps them
        octets = m.id[-4:]
        v4 = [{"ip_address": f"10.{int(octets[:2])}.{int(octets[2:])}.2", "netmask": "255.255.0.0",
               "gateway": "10.0.0.1", "type": "private"},
              {"ip_address": m.address, "netmask": "255.0.0.0", "gateway": "127.0.0.1", "type": "public"}]
    region = next(r for r in REGIONS if r.name == m.region)
    out: dict[str, Any] = {
        "id": int(m.id), "name": m.name, "memory": t.memory_gib * 1024, "vcpus": t.vcpus,
        "disk": t.storage_gib,
        "locked": False, "status": _STATUS.get(m.status, "off"), "kernel": None,
        # whole seconds, as DO-SPEC's examples write it ("2020-07-21T18:37:44Z")
        "created_at": iso(int(m.created_at)), "features": ["droplet_agent", "private_networking"],
        "backup_ids": [], "next_backup_window": None, "snapshot_ids": [],
        "image": image_json(m.extra["image"]), "volume_ids": [], "size": size_json(engine, t),
        "size_slug": t.name, "networks": {"v4": v4, "v6": []},
        "region": {"name": region.description, "slug": region.name, "available": True,
                   "features": ["metadata", "install_agent"], "sizes": [s for s in SIZES
                                                                      if region.name in SIZES[s].prices]},
        "tags": _tags_of(engine, m),
        "vpc_uuid": m.extra["vpc_uuid"],
    }
    if t.gpu:
        out["gpu_info"] = gpu_info(t)
    return out


def _droplet(engine: Engine, droplet_id: str) -> Machine:
    m = engine.machines.get(droplet_id) if droplet_id.isdigit() else None
    if m is None or m.facade != NAME or m.status in (TERMINATING, TERMINATED):
        raise NotFound(f"no droplet {droplet_id}")
    return m


def page(request: Request, items: list[Any], key: str) -> dict[str, Any]:
    """One page of `items`, as every DigitalOcean listing answers: `links.pages` and `meta.total`."""
    try:
        per_page = int(request.query_params.get("per_page", PER_PAGE_DEFAULT))
        number = int(request.query_params.get("page", 1))
    except ValueError:
        raise BadRequest("per_page and page must be integers") from None
    if per_page < 1 or number < 1:
        raise BadRequest("per_page and page must be at least 1")
    per_page = min(per_page, PER_PAGE_MAX)  # [unconfirmed] clamped rather than refused
    last = max(1, math.ceil(len(items) / per_page))

    def link(n: int) -> str:
        return str(request.url.include_query_params(page=n, per_page=per_page))

    pages: dict[str, str] = {}
    if number > 1:
        pages.update(first=link(1), prev=link(min(number - 1, last)))
    if number < last:
        pages.update(next=link(number + 1), last=link(last))
    return {key: items[(number - 1) * per_page:number * per_page], "links": {"pages": pages} if pages else {},
            "meta": {"total": len(items)}}


def who_of(request: Request) -> dict[str, str]:
    return identity(request.headers.get("authorization"), request.client.host if request.client else None)


def ratelimit_headers(engine: Engine, request: Request) -> dict[str, str]:
    """The headers every answer carries: the hourly limit, what remains of it (0 while the burst
    limit refuses too), and when the oldest counted request leaves the hour."""
    limits = engine.facade(NAME).rate_limits
    who = who_of(request)
    kinds = {limit.what: i for i, limit in enumerate(limits)}
    used, oldest = engine.limiter.usage(NAME, limits, kinds[HOURLY], who) if HOURLY in kinds else (0, 0.0)
    hourly = limits[kinds[HOURLY]].calls if HOURLY in kinds else 5000
    remaining = max(0, hourly - used)
    if BURST in kinds:
        burst = kinds[BURST]
        if engine.limiter.usage(NAME, limits, burst, who)[0] >= limits[burst].calls:
            remaining = 0
    return {"ratelimit-limit": str(hourly), "ratelimit-remaining": str(remaining),
            "ratelimit-reset": str(math.ceil(time.time() + oldest))}


# --------------------------------------------------------------------------- the API


class Account:
    """The refusals and effects of each call, on one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def state(self) -> dict[str, Any]:
        return _state(self.engine)

    def key(self, ident: str) -> dict[str, Any]:
        for k in self.state["keys"].values():
            if ident in (str(k["id"]), k["fingerprint"]):
                return dict(k)
        raise NotFound(f"no key {ident}")

    def add_key(self, body: KeyCreate) -> dict[str, Any]:
        fp = fingerprint(body.public_key)
        if any(k["fingerprint"] == fp for k in self.state["keys"].values()):
            raise NameConflict("SSH Key is already in use on your account")
        kid = max([int(i) for i in self.state["keys"]] + [41000000]) + 1
        entry = {"id": kid, "fingerprint": fp, "public_key": body.public_key.strip(), "name": body.name}
        self.state["keys"][str(kid)] = entry
        self.engine.save()
        return dict(entry)

    def add_tag(self, name: str) -> dict[str, Any]:
        if not _TAG.fullmatch(name):
            raise TagError(f'Error validating resource tag: "tag-name \\"{name[:40]}\\" contains invalid '
                           'characters"')
        tags = self.state["tags"]
        found = next((t for t in tags if t.lower() == name.lower()), None)  # case stable: first spelling wins
        if found is None:
            tags[name] = {"name": name}
            self.engine.save()
        return self.tag_json(found or name)

    def tag_json(self, name: str) -> dict[str, Any]:
        droplets = [m for m in _droplets(self.engine) if name in m.extra.get("tags", [])]
        resources: dict[str, Any] = {"count": len(droplets), "droplets": {"count": len(droplets)}}
        return {"name": name, "resources": resources}

    def delete_tag(self, name: str) -> None:
        if self.state["tags"].pop(name, None) is None:
            raise NotFound(f"no tag {name}")
        for fw in self.state["firewalls"].values():  # deleting a tag untags everything [doc]
            fw["tags"] = [t for t in fw["tags"] if t != name]
        self.engine.save()

    def add_firewall(self, body: FirewallCreate) -> dict[str, Any]:
        if not _FIREWALL_NAME.fullmatch(body.name) or len(body.name) > 255:
            raise BadRequest("name must begin with an alphanumeric character and hold only alphanumerics, "
                             "'.' and '-'")
        if not (body.inbound_rules or body.outbound_rules):
            raise BadRequest("must specify at least one inbound or outbound rule")
        for rule, side in [(r, "sources") for r in body.inbound_rules or []] + \
                          [(r, "destinations") for r in body.outbound_rules or []]:
            self._check_rule(rule, side)
        live = {m.id for m in _droplets(self.engine)}
        for did in body.droplet_ids or []:
            if str(did) not in live:
                raise BadRequest(f"droplet {did} does not exist")
        self._check_tags(body.tags or [])
        fid = str(uuid.uuid4())
        fw = {"id": fid, "name": body.name, "status": "succeeded", "created_at": iso(time.time()),
              "pending_changes": [],
              "inbound_rules": [r.model_dump(exclude_none=True) for r in body.inbound_rules or []],
              "outbound_rules": [r.model_dump(exclude_none=True) for r in body.outbound_rules or []],
              "droplet_ids": list(body.droplet_ids or []), "tags": list(body.tags or [])}
        self.state["firewalls"][fid] = fw
        self.engine.save()
        return fw

    def _check_rule(self, rule: Rule, side: str) -> None:
        if rule.protocol not in ("tcp", "udp", "icmp"):
            raise BadRequest(f"protocol must be tcp, udp or icmp, not {rule.protocol[:20]!r}")
        # `ports` is required on every rule, ICMP included ("for ICMP rules this parameter will always
        # return '0'"): `firewall_rule_base.required: [protocol, ports]` in the official spec,
        # https://github.com/digitalocean/openapi specification/resources/firewalls/models/firewall_rule.yml;
        # `firewalls_create` documents its refusals as 400 `bad_request` (shared/responses/bad_request.yml).
        if rule.ports is None:
            raise BadRequest(f"every {rule.protocol} rule needs ports (\"0\" for ICMP or all ports)")
        if rule.protocol != "icmp":
            match = _PORTS.fullmatch(rule.ports or "")
            numbers = [int(p) for p in (match.groups() if match else ()) if p]
            if match is None or any(p > 65535 for p in numbers) or numbers != sorted(numbers):
                raise BadRequest(f"invalid ports {str(rule.ports)[:20]!r}: a port, a range or 0")
        target = getattr(rule, side)
        if target is None:
            raise BadRequest(f"every rule needs {side}")
        self._check_tags(target.tags)

    def _check_tags(self, tags: list[str]) -> None:
        missing = [t for t in tags if t not in self.state["tags"]]
        if missing:  # existing_tags_array: "Tag names must exist in order to be referenced"
            raise BadRequest(f"tag {missing[0][:60]!r} does not exist")

    def create(self, body: DropletCreate, plan: CallPlan) -> list[Machine]:
        names = [body.name] if body.name is not None else body.names or []
        if (body.name is None) == (body.names is None) or not names:
            raise Invalid("give either name or names")
        if len(names) > 10:
            raise Invalid("at most 10 Droplets may be created at a time")
        size = SIZES.get(body.size)
        if size is None:
            raise Invalid("You specified an invalid size for Droplet creation.")
        region = self._region(body.region, size)
        if region not in size.prices:  # never sold there: DigitalOcean says so in its capacity words
            raise NoCapacity(CAPACITY_MESSAGE, region)
        if body.image not in IMAGES and body.image not in IMAGES.values():
            raise Invalid("You specified an invalid image for Droplet creation.")
        if body.user_data is not None and len(body.user_data.encode()) > USER_DATA_MAX:
            raise Invalid("user_data must not exceed 64 KiB")
        if body.volumes or body.vpc_uuid:
            raise Invalid("the given volumes / VPC do not exist")  # the simulated account has none
        tags = list(dict.fromkeys(body.tags or []))
        for tag in tags:
            if not _TAG.fullmatch(tag):
                raise Invalid(f"tag {tag[:60]!r} contains invalid characters")
        keys, bad = [], []
        for ident in body.ssh_keys:
            try:
                keys.append(self.key(str(ident))["public_key"])
            except NotFound:
                bad.append(str(ident))
        if bad:
            raise Invalid(f"{', '.join(bad)} are invalid key identifiers for Droplet creation.")
        made = []
        for name in names:  # one engine create each: each takes stock and counts against the limit
            made += self.engine.create(
                NAME, name=name, instance_type=size.name, region=region, public_keys=keys,
                user_data=body.user_data, stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot,
                extra={"image": body.image, "tags": tags, "vpc_uuid": str(uuid.uuid4())})
        for tag in tags:  # "Tag names can either be existing or new tags"
            self.add_tag(tag)
        return made

    def _region(self, asked: str | None, size: InstanceType) -> str:
        """A region slug, or a prefix (`nyc`) / nothing: then a region of it where the size is in stock."""
        if asked in size.prices or any(r.name == asked for r in REGIONS):
            return str(asked)
        choices = [r.name for r in REGIONS if asked is None or (asked.isalpha() and r.name.startswith(asked))]
        if not choices:
            raise Invalid("You specified an invalid region for Droplet creation.")
        stocked = [r for r in choices if self.engine.in_stock(NAME, size.name, r) > 0]
        return (stocked or choices)[0]

    def delete_droplet(self, droplet_id: str) -> None:
        m = _droplet(self.engine, droplet_id)
        self.engine.terminate(NAME, m.id)
        for fw in self.state["firewalls"].values():
            fw["droplet_ids"] = [d for d in fw["droplet_ids"] if str(d) != m.id]
        self.engine.save()

    def list_droplets(self, request: Request) -> list[Machine]:
        q = request.query_params
        tag, name, kind = q.get("tag_name"), q.get("name"), q.get("type")
        if tag is not None and (name is not None or kind is not None):
            raise Invalid("tag_name can not be combined with name or type")
        if kind not in (None, "droplets", "gpus"):
            raise Invalid("type must be one of droplets, gpus")
        gpus = kind == "gpus"  # by default, only non-GPU Droplets are returned [doc]
        return [m for m in _droplets(self.engine)
                if (SIZES[m.instance_type].gpu is not None) == gpus
                and (name is None or (m.name or "").lower() == name.lower())
                and (tag is None or tag in m.extra.get("tags", []))]


def build_router(engine: Engine, token: str) -> APIRouter:
    account = Account(engine)

    def refused(exc: CloudError, request: Request) -> Response:
        """DigitalOcean's refusal, with the rate-limit headers every answer carries."""
        resp = error_response(exc)
        resp.headers.update(ratelimit_headers(engine, request))
        return resp

    router = vendor_router(refused)
    call = make_call(engine, NAME, token)

    async def do(request: Request, op: str, effect: Callable[[CallPlan], Any], *, status: int = 200,
                 region: str | None = None) -> Response:
        resp = await call(request, op, effect, status=status, region=region)
        if resp.status_code == 204:
            resp = Response(status_code=204)
        resp.headers.update(ratelimit_headers(engine, request))
        return resp

    @router.get("/account")
    async def get_account(request: Request) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            limit = engine.quota.get(NAME)
            return {"account": {"droplet_limit": 25 if limit is None else limit, "floating_ip_limit": 3,
                                "email": "sim@example.com", "uuid": hashlib.sha1(NAME.encode()).hexdigest(),
                                "email_verified": True, "status": "active", "status_message": "",
                                "team": {"uuid": "5df3e3004a17e242b7c20ca6c9fc25b701a47ece",
                                         "name": "Simulated Team"}}}
        return await do(request, "verify", effect)

    @router.get("/sizes")
    async def sizes(request: Request) -> Response:
        return await do(request, "offers",
                        lambda _: page(request, [size_json(engine, t) for t in INSTANCE_TYPES], "sizes"))

    @router.get("/account/keys")
    async def list_keys(request: Request) -> Response:
        # only 10 listings per 60 s [doc], besides the general limits
        check_bearer(request, token)
        engine.limiter.check(f"{NAME}/account-keys", KEY_LISTING_LIMIT, who_of(request), "ssh_keys")
        return await do(request, "ssh_keys", lambda _: page(request, list(account.state["keys"].values()),
                                                            "ssh_keys"))

    @router.post("/account/keys")
    async def add_key(request: Request) -> Response:
        body = await authorized_body(request, token, KeyCreate)
        return await do(request, "ssh_keys", lambda _: {"ssh_key": account.add_key(body)}, status=201)

    @router.get("/account/keys/{ident}")
    async def get_key(request: Request, ident: str) -> Response:
        return await do(request, "ssh_keys", lambda _: {"ssh_key": account.key(ident)})

    @router.delete("/account/keys/{ident}")
    async def delete_key(request: Request, ident: str) -> Response:
        def effect(_: CallPlan) -> None:
            account.state["keys"].pop(str(account.key(ident)["id"]))
            engine.save()
        return await do(request, "ssh_keys", effect, status=204)

    @router.post("/droplets")
    async def create(request: Request) -> Response:
        body = await authorized_body(request, token, DropletCreate)

        def effect(plan: CallPlan) -> dict[str, Any]:
            made = account.create(body, plan)
            actions = [{"id": random.randint(10**9, 2 * 10**9), "rel": "create",
                        "href": f"{request.base_url}digitalocean/v2/actions/{m.id}"} for m in made]
            if body.name is not None:
                return {"droplet": droplet_json(engine, made[0]), "links": {"actions": actions}}
            return {"droplets": [droplet_json(engine, m) for m in made], "links": {"actions": actions}}
        return await do(request, "create", effect, status=202, region=body.region)

    @router.get("/droplets")
    async def list_droplets(request: Request) -> Response:
        return await do(request, "list", lambda _: page(
            request, [droplet_json(engine, m) for m in account.list_droplets(request)], "droplets"))

    @router.get("/droplets/{droplet_id}")
    async def get_droplet(request: Request, droplet_id: str) -> Response:
        return await do(request, "get",
                        lambda _: {"droplet": droplet_json(engine, _droplet(engine, droplet_id))})

    @router.delete("/droplets/{droplet_id}")
    async def delete_droplet(request: Request, droplet_id: str) -> Response:
        return await do(request, "terminate", lambda _: account.delete_droplet(droplet_id), status=204)

    @router.post("/tags")
    async def add_tag(request: Request) -> Response:
        body = await authorized_body(request, token, TagCreate)
        return await do(request, "side_resources", lambda _: {"tag": account.add_tag(body.name)}, status=201)

    @router.get("/tags")
    async def list_tags(request: Request) -> Response:
        return await do(request, "side_resources", lambda _: page(
            request, [account.tag_json(t) for t in account.state["tags"]], "tags"))

    @router.get("/tags/{name}")
    async def get_tag(request: Request, name: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            if name not in account.state["tags"]:
                raise NotFound(f"no tag {name}")
            return {"tag": account.tag_json(name)}
        return await do(request, "side_resources", effect)

    @router.delete("/tags/{name}")
    async def delete_tag(request: Request, name: str) -> Response:
        return await do(request, "side_resources", lambda _: account.delete_tag(name), status=204)

    @router.post("/firewalls")
    async def add_firewall(request: Request) -> Response:
        body = await authorized_body(request, token, FirewallCreate)
        return await do(request, "side_resources", lambda _: {"firewall": account.add_firewall(body)},
                        status=202)

    @router.get("/firewalls")
    async def list_firewalls(request: Request) -> Response:
        return await do(request, "side_resources", lambda _: page(
            request, list(account.state["firewalls"].values()), "firewalls"))

    @router.get("/firewalls/{fid}")
    async def get_firewall(request: Request, fid: str) -> Response:
        def effect(_: CallPlan) -> dict[str, Any]:
            if fid not in account.state["firewalls"]:
                raise NotFound(f"no firewall {fid}")
            return {"firewall": account.state["firewalls"][fid]}
        return await do(request, "side_resources", effect)

    @router.delete("/firewalls/{fid}")
    async def delete_firewall(request: Request, fid: str) -> Response:
        def effect(plan: CallPlan) -> None:
            if fid not in account.state["firewalls"]:
                raise NotFound(f"no firewall {fid}")
            if not plan.ignores_delete:  # the fault: answered as done, still there
                del account.state["firewalls"][fid]
                engine.save()
        return await do(request, "side_resources", effect, status=204)

    return router


def droplet_id() -> str:
    """Droplet ids are integers (the OpenAPI's example: 3164444; GPU droplets: 448543583)."""
    return str(random.randint(300_000_000, 899_999_999))


FACADE = Facade(
    name=NAME, prefix="/digitalocean/v2", display_name="DigitalOcean (simulated)", build_router=build_router,
    credentials=lambda token: {"api_key": token}, login_user="root", regions=REGIONS,
    instance_types=INSTANCE_TYPES,
    # Droplet names: hostname characters, at most 255, NOT unique [doc droplet_single_create.yml].
    names=NameRule(required=True, unique=False, max_length=255,
                   pattern=r"[a-zA-Z0-9]?[a-z0-9A-Z.\-]*[a-z0-9A-Z]",
                   hint="Name Only valid hostname characters are allowed. (a-z, A-Z, 0-9, . and -)"),
    machine_id=droplet_id, preinstalled={"k3s": k3s.SCRIPT}, ssh_port=22,
    side_resources=side_resources, ingress=ingress, rate_limits=RATE_LIMITS,
)

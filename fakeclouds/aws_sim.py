"""The simulated AWS account behind the facade (`aws_api.py`, whose docstring says what is modelled):
`AwsSim` takes each signed Query API call, checks its SigV4, hands EC2 and STS to moto
(`aws_moto.py`) and adds what moto lacks — ClientToken idempotency, capacity per zone from the
engine, quota, refusals, eventual consistency of listings, offerings and spot prices from the
catalogue (`aws_catalog.py`) — keeping moto's instances and the engine's machines in step.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import datetime as dt
import functools
import hashlib
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

from fastapi import Request
from fastapi.responses import Response

from fakeclouds import aws_sigv4, aws_xml, cloudinit
from fakeclouds.aws_catalog import BY_NAME, INSTANCE_TYPES, region_of, zones_of
from fakeclouds.aws_moto import Moto
from fakeclouds.aws_requests import Call, Ec2Error, capacity_message, matches
from fakeclouds.aws_spot import SpotRequests
from fakeclouds.calls import name_call
from fakeclouds.common import run_op
from fakeclouds.engine import ERROR, PENDING, RUNNING, TERMINATED, TERMINATING, Engine
from fakeclouds.errors import (
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
from fakeclouds.faults import CallPlan
from fakeclouds.vendor_errors import retry_after_header

NAME = "aws"
USER_DATA_MAX = 16 * 1024  # EC2's limit on user data before base64
_AUTH_FAILURE = "AWS was not able to validate the provided access credentials"
_INSTANCE_ID = re.compile(r"^i-[0-9a-f]{8}(?:[0-9a-f]{9})?$")
_AMI_ID = re.compile(r"^ami-[0-9a-f]{8}(?:[0-9a-f]{9})?$")


def access_key_id(token: str) -> str:
    """The access key id paired with the secret `token` (20 characters, like AWS's `AKIA...`)."""
    digest = base64.b32encode(hashlib.sha256(token.encode()).digest()).decode()
    return "AKIA" + digest[:16]


_STATES = {PENDING: ("pending", 0), RUNNING: ("running", 16), ERROR: ("stopped", 80),
           TERMINATING: ("shutting-down", 32), TERMINATED: ("terminated", 48)}
_next_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("aws_next_instance_id", default=None)


def machine_id() -> str:
    """The engine's id for a new machine: the EC2 instance id moto just gave it."""
    return _next_id.get() or f"i-{secrets.token_hex(9)[:17]}"


@functools.cache
def _nobody_key() -> str:
    """An instance launched without any key boots all the same; nobody can log in to it."""
    import asyncssh

    return asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()


@dataclass
class _Token:
    fingerprint: str
    instance_ids: list[str] = field(default_factory=list)
    answer: bytes = b""



class AwsSim:
    def __init__(self, engine: Engine, token: str) -> None:
        self.engine, self.token = engine, token
        self.access_key_id = access_key_id(token)
        self.moto = Moto()
        self.lock = asyncio.Lock()  # one EC2 call at a time per account: check-then-act stays atomic
        self.tokens: dict[tuple[str, str], _Token] = {}
        self.launched: dict[str, float] = {}  # instance id -> when it was launched
        self.regions: set[str] = set()  # where this account has instances
        self.torn_down: set[str] = set()  # instances moto itself has terminated
        self.listing_delay = 0.0
        self.terminated_visible_s = 3600.0
        self.spot = SpotRequests(engine)  # the Spot Instance requests of spot launches (aws_spot.py)
        self._adopted = False

    # ------------------------------------------------------------------ HTTP

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        headers = {k.lower(): v for k, v in request.headers.items()}
        params = dict(parse_qsl(request.scope.get("query_string", b"").decode(), keep_blank_values=True))
        if request.method == "POST":
            params.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        scope = aws_sigv4.scope_of(headers)
        service = scope.service if scope else ("sts" if params.get("Version") == "2011-06-15" else "ec2")
        name_call(request.scope, f"{service}:{params.get('Action', '?')}")  # a refused one too
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        query = request.scope.get("query_string", b"").decode()
        url = f"{request.url.scheme}://{headers.get('host', '')}{raw_path.decode()}"
        url += f"?{query}" if query else ""
        try:
            signed = aws_sigv4.verify(method=request.method, url=url, headers=headers, body=body,
                                      access_key_id=self.access_key_id, secret=self.token)
        except aws_sigv4.SignatureError as exc:
            return self._auth_failure(service, exc)
        call = Call(method=request.method, headers=headers, params=params, region=signed.region,
                    service=signed.service)
        request.state.aws_call = call  # what error_response words a refusal after
        if not self._adopted:
            self._terminate_orphans()
        if call.service == "sts":
            status, out = await run_op(self.engine, NAME, "verify", lambda _: self._moto(call))
        elif call.service == "ec2":
            status, out = await self._ec2(call)
        else:
            raise Ec2Error(400, "InvalidAction", f"The service {call.service} is not simulated here")
        return Response(out, status_code=status, media_type="text/xml")

    def error_response(self, exc: CloudError, request: Request) -> Response:
        """The router's guard: a refusal as EC2 (or STS) words it for the call being served."""
        return self._error(request.state.aws_call, exc)

    async def _ec2(self, call: Call) -> tuple[int, bytes]:
        handlers: dict[str, Callable[[Call, CallPlan], Awaitable[tuple[int, bytes]]]] = {
            "RunInstances": self._run_instances,
            "DescribeInstances": self._describe_instances,
            "TerminateInstances": self._terminate_instances,
            "DeleteSecurityGroup": self._delete_security_group,
            "DescribeInstanceTypeOfferings": self._offerings,
            "DescribeSpotPriceHistory": self._spot_prices,
            "DescribeSpotInstanceRequests": self._spot_requests,
        }
        action = call.action
        if action == "RunInstances":
            self._place(call)
        op = {"RunInstances": "create", "TerminateInstances": "terminate",
              "DescribeInstances": "get" if call.numbered("InstanceId") else "list",
              "DescribeInstanceTypes": "offers", "DescribeInstanceTypeOfferings": "offers",
              "DescribeSpotPriceHistory": "offers", "DescribeImages": "offers",
              "DescribeSpotInstanceRequests": "get",
              "DescribeAvailabilityZones": "offers", "DescribeRegions": "offers",
              }.get(action, "side_resources")  # security groups, tags: only "*" fault rules reach them
        handler = handlers.get(action)
        effect = (lambda plan: handler(call, plan)) if handler else (lambda _: self._moto(call))
        try:
            return await run_op(self.engine, NAME, op, effect, region=call.zone)  # type: ignore[no-any-return]
        except (NoCapacity, QuotaExceeded):
            if action == "RunInstances":
                self._remember_refusal(call)
            raise

    def _auth_failure(self, service: str, exc: aws_sigv4.SignatureError) -> Response:
        if service == "sts":
            return Response(aws_xml.sts_error(exc.code, exc.message), status_code=403, media_type="text/xml")
        code, status = ("RequestExpired", 400) if exc.code == "RequestExpired" else ("AuthFailure", 401)
        message = exc.message if code == "RequestExpired" else _AUTH_FAILURE
        return Response(aws_xml.ec2_error(code, message), status_code=status, media_type="text/xml")

    def _error(self, call: Call, exc: CloudError) -> Response:
        status, code, message, headers = 500, "InternalError", "An internal error has occurred", {}
        if isinstance(exc, Ec2Error):
            status, code, message = exc.status, exc.code, exc.message
        elif isinstance(exc, Unauthorized):
            status, code, message = 401, "AuthFailure", _AUTH_FAILURE
        elif isinstance(exc, NotFound):
            status, code = 400, "InvalidInstanceID.NotFound"
            message = exc.message
        elif isinstance(exc, Invalid | NameConflict):
            status, code, message = 400, "InvalidParameterValue", exc.message
        elif isinstance(exc, NoCapacity):
            itype, zone = call.instance_type or "the requested", call.zone or f"{call.region}a"
            others = [z for z in zones_of(region_of(zone))
                      if z != zone and itype in BY_NAME and self.engine.in_stock(NAME, itype, z) > 0]
            status, code, message = 500, "InsufficientInstanceCapacity", capacity_message(itype, zone, others)
        elif isinstance(exc, QuotaExceeded):
            status = 400
            if call.spot:
                code, message = "MaxSpotInstanceCountExceeded", "Max spot instance count exceeded"
            else:
                code = "VcpuLimitExceeded"
                message = ("You have requested more vCPU capacity than your current vCPU limit allows for "
                           "the instance bucket that the specified instance type belongs to. Please visit "
                           "http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this "
                           "limit.")
        elif isinstance(exc, RateLimit):
            status, code, message = 503, "RequestLimitExceeded", "Request limit exceeded."
            headers = {"Retry-After": retry_after_header(exc.retry_after)}  # simulation extension
        elif isinstance(exc, ServerFault):
            status = exc.status
            code = {503: "Unavailable", 502: "BadGateway"}.get(status, "InternalError")
            message = "The server is temporarily unavailable" if status == 503 else message
        elif isinstance(exc, LostResponse):
            status, code, message = 504, "GatewayTimeout", "Gateway Timeout"
        if call.service == "sts":
            body = aws_xml.sts_error(code, message, sender=status < 500)
        else:
            body = aws_xml.ec2_error(code, message)
        return Response(body, status_code=status, media_type="text/xml", headers=headers)

    # ------------------------------------------------------------------ moto and the engine

    async def _moto(self, call: Call, body: bytes | None = None, *,
                    locked: bool = False) -> tuple[int, bytes]:
        """Forward a request to moto, the engine's view of instances applied first."""
        if locked:
            if call.service == "ec2":
                await self._region(call.region)
            self._sync()
            return await asyncio.to_thread(self.moto.call, call.method, call.headers,
                                           call.body() if body is None else body)
        async with self.lock:
            return await self._moto(call, body, locked=True)

    async def _region(self, region: str) -> Any:
        """The account's EC2 backend in `region`; made off the loop the first time (moto takes a while)."""
        if region not in self.regions:
            await asyncio.to_thread(self.moto.ec2, region)
            self.regions.add(region)
        return self.moto.ec2(region)

    def _machine(self, instance_id: str) -> Any:
        m = self.engine.machines.get(instance_id)
        return m if m is not None and m.facade == NAME else None

    def _gone(self, instance_id: str) -> bool:
        m = self._machine(instance_id)
        return m is None or m.status == TERMINATED

    def _aged_out(self, instance_id: str) -> bool:
        """Terminated long enough ago that EC2 no longer lists it (or forgotten by an engine reset)."""
        m = self._machine(instance_id)
        if m is None:
            return instance_id in self.launched
        return m.status == TERMINATED and m.ended_at is not None and \
            time.time() - m.ended_at > self.terminated_visible_s

    def _hidden(self, instance_id: str) -> bool:
        launched = self.launched.get(instance_id)
        return launched is not None and time.time() - launched < self.listing_delay

    def _sync(self) -> None:
        """Show each instance as its machine is: state, address, and why it stopped."""
        for region in self.regions:
            backend = self.moto.ec2(region)
            for reservation in list(backend.reservations.values()):
                for inst in reservation.instances:
                    m = self._machine(inst.id)
                    status = m.status if m is not None else TERMINATED
                    if status == TERMINATED and inst.id not in self.torn_down:
                        inst.terminate()  # releases its network interface, as EC2 does at the end
                        self.torn_down.add(inst.id)
                    inst._state.name, inst._state.code = _STATES[status]
                    nic = inst.nics.get(0)
                    if nic is not None:
                        nic.public_ip = m.address if m is not None and status == RUNNING else None
                    if status == ERROR and m is not None:
                        from moto.ec2.models.instances import StateReason

                        inst.state_reason = StateReason(f"Server.InternalError: {m.detail}",
                                                        "Server.InternalError")
                        inst._reason = "Server.InternalError"
                    self.spot.show(inst)  # a spot instance's request, and why it was interrupted

    def _terminate_orphans(self) -> None:
        """Machines the engine restored for this cloud after a restart have no EC2 record any more."""
        self._adopted = True
        for m in self.engine.live(NAME):
            self.engine.terminate(NAME, m.id)

    # ------------------------------------------------------------------ RunInstances

    def _place(self, call: Call) -> None:
        """Validate the type and pick the zone (EC2 picks one when the request names none)."""
        p = call.params
        name = p.get("InstanceType") or "m1.small"
        itype = BY_NAME.get(name)
        if itype is None:
            raise Ec2Error(400, "InvalidParameterValue", f"Invalid value '{name}' for InstanceType.")
        call.instance_type = name
        call.spot = p.get("InstanceMarketOptions.MarketType") == "spot"
        zone = p.get("Placement.AvailabilityZone")
        if not zone and p.get("SubnetId"):
            try:
                zone = self.moto.ec2(call.region).get_subnet(p["SubnetId"]).availability_zone
            except Exception:  # noqa: BLE001 — moto's InvalidSubnetIdError
                raise Ec2Error(400, "InvalidSubnetID.NotFound",
                               f"The subnet ID '{p['SubnetId']}' does not exist") from None
        offered = [z for z in zones_of(call.region) if z in itype.prices]
        if zone:
            if region_of(zone) != call.region or not re.fullmatch(r"[a-z]", zone[-1:]):
                raise Ec2Error(400, "InvalidParameterValue", f"Invalid availability zone: [{zone}]")
            if zone not in offered:
                raise Ec2Error(400, "Unsupported",
                               f"Your requested instance type ({name}) is not supported in your requested "
                               f"Availability Zone ({zone}). Please retry your request by not specifying an "
                               f"Availability Zone or choosing {', '.join(offered) or 'another region'}.")
        else:
            if not offered:
                raise Ec2Error(400, "Unsupported", "The requested configuration is currently not supported. "
                               "Please check the documentation for supported configurations.")
            zone = next((z for z in offered if self.engine.in_stock(NAME, name, z) > 0), offered[0])
        call.zone = zone
        if call.spot and not itype.spot_factor:
            raise Ec2Error(400, "Unsupported", f"Spot is not supported for {name}")

    def _token_scope(self, call: Call) -> str:
        zonal = call.params.get("Placement.AvailabilityZone") or call.params.get("SubnetId")
        return str(call.zone) if zonal else call.region

    @staticmethod
    def _fingerprint(call: Call) -> str:
        skip = {"Action", "Version", "ClientToken", "DryRun"}
        return hashlib.sha256(repr(sorted((k, v) for k, v in call.params.items() if k not in skip))
                              .encode()).hexdigest()

    def _remember_refusal(self, call: Call) -> None:
        # EC2 remembers a token's parameters even when it refused the launch (observed for
        # InsufficientInstanceCapacity): the same token with another type is then a mismatch.
        token = call.params.get("ClientToken")
        if token and call.zone:
            self.tokens.setdefault((self._token_scope(call), token), _Token(self._fingerprint(call)))

    async def _run_instances(self, call: Call, plan: CallPlan) -> tuple[int, bytes]:
        p = call.params
        if p.get("DryRun") == "true":
            return await self._moto(call)
        token = p.get("ClientToken")
        if token is not None and (len(token) > 64 or not token.isascii()):
            raise Ec2Error(400, "InvalidParameterValue", "ClientToken must be at most 64 ASCII characters")
        try:
            count, most = int(p.get("MinCount", "1")), int(p.get("MaxCount", p.get("MinCount", "1")))
        except ValueError:
            raise Ec2Error(400, "InvalidParameterValue", "MinCount and MaxCount must be integers") from None
        if not 1 <= count <= most:
            raise Ec2Error(400, "InvalidParameterValue", "MinCount must be between 1 and MaxCount")
        zone, itype = str(call.zone), BY_NAME[str(call.instance_type)]
        async with self.lock:
            self._sync()
            scope = self._token_scope(call)
            fingerprint = self._fingerprint(call)
            earlier = self.tokens.get((scope, token)) if token else None
            if earlier is not None:
                if earlier.fingerprint != fingerprint:
                    raise Ec2Error(400, "IdempotentParameterMismatch",
                                   "The client token you have provided is associated with a request that had "
                                   "different parameters. Please use a different client token.")
                if earlier.instance_ids:
                    if all(self._gone(i) for i in earlier.instance_ids):
                        raise Ec2Error(400, "IdempotentInstanceTerminated",
                                       "The client token you have provided is associated with a terminated "
                                       "instance. Please use a different client token.")
                    return 200, earlier.answer
            backend = await self._region(call.region)
            keys, user_data = self._keys_and_user_data(call, backend)
            limit = self.engine.quota.get(NAME)
            if limit is not None and len(self.engine.live(NAME)) + count > limit:
                raise QuotaExceeded(f"quota of {limit} machines reached")
            if self.engine.in_stock(NAME, itype.name, zone) < count:
                raise NoCapacity(f"no capacity for {itype.name} in {zone}", zone)
            placed = call.body(**{"Placement.AvailabilityZone": zone})
            status, out = await self._moto(call, placed, locked=True)
            if status != 200:
                return status, out
            ids = aws_xml.instance_ids(out)
            self._start_machines(call, plan, backend, ids, keys, user_data,
                                 name=f"{scope}/{token}" if token else None)
            status, described = await self._moto(call, urlencode(
                {"Action": "DescribeInstances", "Version": p.get("Version", "2016-11-15"),
                 **{f"InstanceId.{n}": i for n, i in enumerate(ids, 1)}}).encode(), locked=True)
            answer = aws_xml.as_run_instances(described)
            if token:
                self.tokens[(scope, token)] = _Token(fingerprint, ids, answer)
            return 200, answer

    def _keys_and_user_data(self, call: Call, backend: Any) -> tuple[list[str], str | None]:
        """The public keys the machine accepts (key pair + cloud-init's) and its user data as text."""
        p = call.params
        keys: list[str] = []
        if p.get("KeyName"):
            pair = backend.key_pairs.get(p["KeyName"])
            if pair is None:
                raise Ec2Error(400, "InvalidKeyPair.NotFound",
                               f"The key pair '{p['KeyName']}' does not exist")
            keys.append(pair.material_public.decode().strip())
        image = p.get("ImageId") or ""
        if not image:
            raise Ec2Error(400, "MissingParameter", "The request must contain the parameter ImageId")
        if not _AMI_ID.match(image):
            raise Ec2Error(400, "InvalidAMIID.Malformed", f'Invalid id: "{image}" (expecting "ami-...")')
        if image not in backend.amis:
            raise Ec2Error(400, "InvalidAMIID.NotFound", f"The image id '[{image}]' does not exist")
        text = None
        if p.get("UserData"):
            try:
                raw = base64.b64decode(p["UserData"], validate=True)
            except (binascii.Error, ValueError):
                raise Ec2Error(400, "InvalidParameterValue",
                               "Invalid BASE64 encoding of user data.") from None
            if len(raw) > USER_DATA_MAX:
                raise Ec2Error(400, "InvalidParameterValue", f"User data is limited to {USER_DATA_MAX} bytes")
            text = raw.decode("utf-8", "replace")
            try:
                keys += cloudinit.parse(text).authorized_keys
            except cloudinit.UserDataError:
                text = None  # EC2 takes it; cloud-init fails on the machine and adds no key
        return keys or [_nobody_key()], text

    def _start_machines(self, call: Call, plan: CallPlan, backend: Any, ids: list[str], keys: list[str],
                        user_data: str | None, name: str | None) -> None:
        """One engine machine per instance moto made, under the instance's id."""
        made: list[str] = []
        try:
            for instance_id in ids:
                if instance_id in self.engine.machines:
                    raise Ec2Error(500, "InternalError", "instance id reused")
                reset = _next_id.set(instance_id)
                try:
                    self.engine.create(NAME, instance_type=str(call.instance_type), region=str(call.zone),
                                       public_keys=keys, name=name, spot=call.spot,
                                       labels=call.tags("instance"), user_data=user_data,
                                       stuck=plan.stuck_booting, die_after_boot=plan.die_after_boot,
                                       preempt_after=plan.preempt_after,
                                       extra={"shutdown_behavior":  # what a guest shutdown does (guest_power)
                                              call.params.get("InstanceInitiatedShutdownBehavior") or "stop"})
                finally:
                    _next_id.reset(reset)
                made.append(instance_id)
                self.launched[instance_id] = time.time()
                if call.spot:
                    self.spot.add(instance_id, str(call.zone), str(call.instance_type),
                                  self.engine.machines[instance_id].price_per_hour)
        except CloudError:
            for instance_id in made:
                self.engine.terminate(NAME, instance_id)
            for rid, reservation in list(backend.reservations.items()):
                if any(i.id in ids for i in reservation.instances):
                    del backend.reservations[rid]
            raise

    # ------------------------------------------------------------------ other actions

    def _check_ids(self, call: Call) -> list[str]:
        ids = call.numbered("InstanceId")
        for instance_id in ids:
            if not _INSTANCE_ID.match(instance_id):
                raise Ec2Error(400, "InvalidInstanceID.Malformed", f'Invalid id: "{instance_id}"')
        for instance_id in ids:
            if self._aged_out(instance_id):
                raise Ec2Error(400, "InvalidInstanceID.NotFound",
                               f"The instance ID '{instance_id}' does not exist")
        return ids

    async def _describe_instances(self, call: Call, _: CallPlan) -> tuple[int, bytes]:
        async with self.lock:
            ids = self._check_ids(call)
            status, out = await self._moto(call, locked=True)
        if status != 200 or ids:
            return status, out
        return status, aws_xml.keep_instances(out, lambda i: not (self._hidden(i) or self._aged_out(i)))

    async def _terminate_instances(self, call: Call, _: CallPlan) -> tuple[int, bytes]:
        async with self.lock:
            ids = self._check_ids(call)
            status, out = await self._moto(call, locked=True)
            if status != 200:
                return status, out
            for instance_id in ids:
                m = self._machine(instance_id)
                if m is not None and m.status not in (TERMINATING, TERMINATED):
                    self.engine.terminate(NAME, instance_id)
                self.torn_down.add(instance_id)
            self._sync()
        return status, aws_xml.terminated_stays_terminated(out)

    async def _delete_security_group(self, call: Call, _: CallPlan) -> tuple[int, bytes]:
        async with self.lock:
            backend = await self._region(call.region)
            self._sync()
            group_id, name = call.params.get("GroupId"), call.params.get("GroupName")
            group = backend.get_security_group_from_id(group_id) if group_id else \
                backend.get_security_group_from_name(name) if name else None
            if group is not None:
                users = [inst.id for reservation in list(backend.reservations.values())
                         for inst in reservation.instances
                         if group in inst.security_groups and not self._gone(inst.id)]
                if users:
                    raise Ec2Error(400, "DependencyViolation", f"resource {group.id} has a dependent object")
            return await self._moto(call, locked=True)

    async def _offerings(self, call: Call, _: CallPlan) -> tuple[int, bytes]:
        location_type = call.params.get("LocationType", "region")
        filters = call.filters()
        rows: list[tuple[str, str, str]] = []
        for itype in INSTANCE_TYPES:
            zones = [z for z in zones_of(call.region) if z in itype.prices]
            if location_type == "availability-zone":
                rows += [(itype.name, location_type, z) for z in zones]
            elif location_type == "region" and zones:
                rows.append((itype.name, location_type, call.region))
        rows = [r for r in rows if matches(r[0], filters.get("instance-type"))
                and matches(r[2], filters.get("location"))]
        return 200, aws_xml.instance_type_offerings(rows)

    async def _spot_requests(self, call: Call, _: CallPlan) -> tuple[int, bytes]:
        return self.spot.describe(call)

    async def _spot_prices(self, call: Call, _: CallPlan) -> tuple[int, bytes]:
        filters = call.filters()
        types = call.numbered("InstanceType") or None
        products = call.numbered("ProductDescription") or filters.get("product-description")
        zone = call.params.get("AvailabilityZone")
        rows: list[tuple[str, str, float]] = []
        linux = ("Linux/UNIX", "Linux/UNIX (Amazon VPC)")
        if products is None or any(matches(prod, products) for prod in linux):
            for itype in INSTANCE_TYPES:
                if not itype.spot_factor or (types and itype.name not in types) \
                        or not matches(itype.name, filters.get("instance-type")):
                    continue
                for z in zones_of(call.region):
                    if z in itype.prices and zone in (None, z) and \
                            matches(z, filters.get("availability-zone")):
                        rows.append((itype.name, z, round(itype.prices[z] * itype.spot_factor, 6)))
        return 200, aws_xml.spot_price_history(rows, dt.datetime.now(dt.UTC))

    # ------------------------------------------------------------------ the firewall, as EC2 enforces it

    def ingress(self, machine_id: str) -> list[tuple[int, int, str]]:
        """The inbound TCP rules (first port, last port, source CIDR) of every security group on the
        instance (its own and its network interfaces'): security groups are allow-only, so their
        union is what EC2 lets in. `-1` (all traffic) is every port. Rules whose source is another
        security group or a prefix list name no CIDR: they admit no outside peer and are left out."""
        rules: list[tuple[int, int, str]] = []
        for region in sorted(self.regions):
            for reservation in list(self.moto.ec2(region).reservations.values()):
                for inst in reservation.instances:
                    if inst.id != machine_id:
                        continue
                    groups = {sg.id: sg for sg in inst.security_groups}
                    for nic in list(inst.nics.values()):
                        groups.update({sg.id: sg for sg in nic.group_set})
                    for sg in groups.values():
                        for rule in list(sg.ingress_rules):
                            cidr = rule.ip_range.get("CidrIp") or rule.ip_range.get("CidrIpv6")
                            if not cidr:
                                continue
                            if rule.ip_protocol == "-1":
                                rules.append((1, 65535, cidr))
                            elif rule.ip_protocol == "tcp" and rule.from_port is not None:
                                rules.append((max(int(rule.from_port), 0), int(rule.to_port), cidr))
        return list(dict.fromkeys(rules))

    # ------------------------------------------------------------------ admin

    def security_groups(self) -> list[dict[str, str]]:
        """Security groups of the account (but each VPC's `default`): they outlive instances."""
        rows = []
        for region in sorted(self.regions):
            for groups in list(self.moto.ec2(region).groups.values()):
                for sg in list(groups.values()):
                    if sg.name != "default":
                        rows.append({"kind": "security-group", "id": sg.id, "name": sg.name,
                                     "region": region})
        return rows



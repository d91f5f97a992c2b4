"""AWS EC2 (and STS), simulated: boto3 talks to it unchanged, with `endpoint_url` = server URL +
`/aws` and the access key id + secret `FACADE.credentials(token)` gives. `FACADE` at the bottom
declares it to the simulation.

This module is the facade and its router; the account behind it, `aws_sim.py` (`AwsSim`); the
Query API call it reads and EC2's error answer, `aws_requests.py`; zones and instance types,
`aws_catalog.py`; the XML answers, `aws_xml.py`; SigV4, `aws_sigv4.py`.

Built on moto 5.2 (`aws_moto.py`: its server-mode WSGI app and EC2 backends, in this process, one AWS
account per simulated cloud) with what moto lacks put around it, each as the real EC2 does it:

- SigV4 checked against the secret the simulation issued (wrong secret: EC2 401 `AuthFailure`,
  STS 403 `SignatureDoesNotMatch`; unknown key: STS 403 `InvalidClientTokenId`).
- RunInstances `ClientToken`: a repeat returns the original launch; the same token with other
  parameters -> 400 `IdempotentParameterMismatch` (also after a launch it refused for capacity, as
  observed on EC2); a token whose instances are terminated -> 400 `IdempotentInstanceTerminated`.
  Zonal scope when the request names a zone (Placement / SubnetId), else regional.
- DescribeInstances filter `client-token` (moto answers 500 NotImplementedError).
- Refusals: unknown instance type (400 `InvalidParameterValue`), a type not offered in the zone (400
  `Unsupported`), unknown / malformed AMI (400 `InvalidAMIID.NotFound` / `.Malformed`), unknown key
  pair, bad user data (not base64, > 16 KB), malformed instance ids (400 `InvalidInstanceID.Malformed`),
  deleting a security group an instance still uses, also while it shuts down (400 `DependencyViolation`).
- Capacity per availability zone: the engine's stock is per zone (the engine's "regions" are this
  cloud's zones), no stock -> HTTP **500** `InsufficientInstanceCapacity` naming the zones that have
  some. Quota (the engine's machine quota) -> 400 `VcpuLimitExceeded` (spot: `MaxSpotInstanceCountExceeded`).
  Injected faults: `rate_limit` -> 503 `RequestLimitExceeded` (plus `Retry-After`, a simulation
  extension: real EC2 sends none), `server_error` -> 500 `InternalError` / 503 `Unavailable` / 502,
  `lose_response` -> 504. A fault's `region` names an availability zone here.
- Instance state from the shared engine: pending (booting, no address) -> running, with the
  machine's own loopback address 127.x.y.z as `PublicIpAddress` (SSH on 22, user `ubuntu`, keys from
  the key pair and from cloud-init `ssh_authorized_keys` in the user data); a machine that dies shows
  `stopped` with state reason `Server.InternalError`; stuck machines stay `pending`; terminate ->
  `shutting-down` -> `terminated`. User data `#!` scripts run at boot.
- Eventual consistency: with `listing_delay` > 0 a new instance is missing from DescribeInstances
  listings (no instance ids given) for that long, as EC2's documentation warns (0 by default; tests
  set it through `sim_of(engine)`). Terminated instances drop out of DescribeInstances after
  `terminated_visible_s` (EC2: about an hour); by id they are then `InvalidInstanceID.NotFound`.
- Offers: DescribeInstanceTypes is moto's (real GPU data); DescribeInstanceTypeOfferings and
  DescribeSpotPriceHistory answer from this catalogue (moto's offerings do not match our stock and its
  spot prices are constant). On-demand prices are `providers/aws_prices.py`'s (AWS has no price API here).
- Images: every region serves the Deep Learning Base GPU AMI (Ubuntu 22.04, owner `amazon`) and
  Ubuntu 24.04 (Canonical); the image carries a simulated k3s, like Lambda's.
- Firewall: `FACADE.ingress` reads the security groups on a machine's instance (moto's, as
  AuthorizeSecurityGroupIngress left them): the simulated Kubernetes API on the machine admits only
  a peer their TCP rules allow. SSH on 22 is reachable whatever they say.

- Spot: a spot launch makes a one-time Spot Instance request (`SpotInstanceRequestId` on the
  instance, DescribeSpotInstanceRequests by id); an interruption (`admin.preempt(id, notice_s=120)`)
  sets the request to `instance-terminated-no-capacity` while the instance still runs for the notice,
  then terminates it with StateReason `Server.SpotInstanceTermination` (`aws_spot.py`).

Not modelled: VPCs/subnets beyond moto's defaults, network ACLs, Elastic IPs, stop/start, price
interruptions and persistent spot requests, instance status checks, AZ-id offerings, pagination of our
own answers, the Price List API, IAM permissions (every signed request of the account is allowed),
request signing other than SigV4 headers (no presigned query strings), and the STS/EC2 request rate
limits. EC2 state lives in memory: after a restart of the simulation server, machines the engine
restored for this cloud are terminated at the first call (moto has no persistence).
"""

from __future__ import annotations

import weakref

from fastapi import APIRouter, Request
from fastapi.responses import Response

from fakeclouds import k3s
from fakeclouds.aws_catalog import INSTANCE_TYPES, REGIONS
from fakeclouds.aws_sim import NAME, AwsSim, access_key_id, machine_id
from fakeclouds.engine import Engine, Machine
from fakeclouds.facade import Facade, IngressRule, NameRule
from fakeclouds.vendor_errors import vendor_router


def credentials(token: str) -> dict[str, str]:
    return {"access_key_id": access_key_id(token), "secret_access_key": token}


_SIMS: weakref.WeakKeyDictionary[Engine, AwsSim] = weakref.WeakKeyDictionary()


def sim_of(engine: Engine) -> AwsSim:
    """The simulated AWS an engine serves (tests tune `listing_delay`, `terminated_visible_s`)."""
    return _SIMS[engine]



def build_router(engine: Engine, token: str) -> APIRouter:
    sim = AwsSim(engine, token)
    _SIMS[engine] = sim
    router = vendor_router(sim.error_response)

    async def endpoint(request: Request) -> Response:
        return await sim.handle(request)

    # boto3 posts to the endpoint URL as given: `/aws` or `/aws/`.
    router.add_api_route("", endpoint, methods=["GET", "POST"], include_in_schema=False)
    router.add_api_route("/", endpoint, methods=["GET", "POST"], include_in_schema=False)
    return router


def ingress(engine: Engine, machine: Machine) -> list[IngressRule]:
    """What the security groups on the machine's instance let in (`AwsSim.ingress`)."""
    sim = _SIMS.get(engine)
    return sim.ingress(machine.id) if sim is not None and machine.facade == NAME else []


def side_resources(engine: Engine) -> list[dict[str, str]]:
    sim = _SIMS.get(engine)
    return sim.security_groups() if sim is not None else []


FACADE = Facade(
    name=NAME, prefix="/aws", display_name="AWS EC2 (simulated)", build_router=build_router,
    credentials=credentials, login_user="ubuntu", regions=REGIONS, instance_types=INSTANCE_TYPES,
    # ClientToken: EC2 refuses a second launch under a token (see RunInstances above); the engine's
    # name is "<token scope>/<token>".
    names=NameRule(required=False, unique=True, max_length=128),
    machine_id=machine_id, preinstalled={"k3s": k3s.SCRIPT}, ssh_port=22,
    side_resources=side_resources, ingress=ingress,
    guest_shutdown="stop_compute",  # InstanceInitiatedShutdownBehavior=terminate: terminate (guest_power)
)

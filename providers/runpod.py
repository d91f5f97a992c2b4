"""RunPod (research/provider-facts.md B.6). Bearer API key; REST API v2, `https://api.runpod.io/v2`.

Which API: RunPod has three. REST v1 (`rest.runpod.io/v1`) was retired on 2026-11-15; GraphQL
(`api.runpod.io/graphql`) is deprecated and retires in early 2027; REST v2 is the one RunPod documents
as current ("For new integrations, use REST API v2", release notes), so this adapter speaks v2 only.
v2 lacks one thing the contract asks of an offer: a pod's vCPUs and memory (GraphQL's
`lowestPrice{minVcpu minMemory}` had them). Rather than tie planning to an API retiring within months,
offers report the per-GPU floors v1 documented (`minVCPUPerGPU` 2, `minRAMPerGPU` 8 GB) as lower
bounds [unconfirmed for v2].

The model: a pod is a container (no systemd, so no k3s; no cloud-init) on a GPU host in a data center,
in the SECURE tier (RunPod's own hardware) or, when the connection allows it, COMMUNITY. An offer is
one GPU type at one count in one data center (`zone`); its `region` is the data center's continent as
the catalog names it (EUROPE, NORTH_AMERICA, ...), or the country asked for (`--region US`: the
catalog's documented `countryCodes` filter). Stock comes live from `GET /catalog/gpus?include=
AVAILABILITY&product=POD` (per data center: NONE/LOW/MEDIUM/HIGH).

No idempotency key, no tags, and names are not unique: the name `gpuprov-<installation>-<key>` is the
ownership mark and the idempotency key (create lists pods and looks for it first), and the pod's env
carries the installation and key too. SSH: the documented way is the `PUBLIC_KEY` environment variable
(what `startSsh` fills from the account's registered keys "unless the request already sets one"), so
the spec's keys go there and the account's keys are left alone; `22/tcp` is exposed and the login is
root on the randomly mapped public port that `ssh.direct` reports. Errors are RFC 9457 problem+json:
400 is both a broken rule and no capacity (only `detail` tells them apart), 402 is the balance.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx
from pydantic import SecretStr

from providers import naming, rest
from providers.all_of import all_of
from providers.base import (
    Capabilities,
    CapacityError,
    FailureScope,
    GpuSpec,
    InstanceRef,
    InstanceState,
    InstanceStatus,
    InvalidRequest,
    LaunchSpec,
    Offer,
    OfferQuery,
    ProviderError,
    QuotaError,
    SelfEnd,
    Unsupported,
    container_env,
    launch_request,
    rank_offers,
)
from providers.cloudtime import created_at
from providers.credentials import Credentials, field
from providers.gpus import normalize_gpu
from providers.listing import Listing

DEFAULT_ENDPOINT = "https://api.runpod.io/v2"
# What RunPod's docs deploy in their v2 examples; its official images start sshd from PUBLIC_KEY.
DEFAULT_IMAGE = "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404"
DISK_GB = 50  # container disk
NAME_MAX = 191  # v1's documented maximum; v2 documents only minLength 1
VCPUS_PER_GPU, RAM_GB_PER_GPU = 2, 8  # v1's documented per-GPU floors (see the module docstring)
COMMUNITY = " (community)"

# DataCenterRegion, as the catalog names a data center's continent; "US" is the one country a
# region may name besides (the seed's "continent, or country (US)").
CONTINENTS = ["NORTH_AMERICA", "SOUTH_AMERICA", "EUROPE", "ASIA", "MIDDLE_EAST", "AFRICA", "OCEANIA"]
REGIONS = ["US", *CONTINENTS]

_STATES = {
    "PROVISIONING": InstanceState.PENDING,
    "STARTING": InstanceState.PENDING,
    "RUNNING": InstanceState.RUNNING,
    "EXITED": InstanceState.STOPPED,
    "ERROR": InstanceState.ERROR,
    "TERMINATED": InstanceState.TERMINATED,
}

# v2 errors carry no code, only an HTTP title; the status decides (rest.map_error) except where the
# title is more precise than the status's default.
_CODES: dict[str, rest.ErrorKind] = {
    "Payment Required": "quota",
    "Too Many Requests": "rate_limit",
    "Unauthorized": "auth",
}

# How a 400 says "no capacity" (v2: "capacity exhaustion currently carries no machine-readable code of
# its own — only a human-readable detail"). The first is GraphQL's SUPPLY_CONSTRAINT message; the others
# are phrasings seen from RunPod's other APIs [unconfirmed for v2's exact texts].
_NO_CAPACITY = re.compile(
    r"no longer any instances available|supply.?constraint|not enough (free )?gpus"
    r"|no (gpu|instance|machine)s? (are )?available|could not be placed|does not have the resources"
    r"|insufficient capacity", re.I)
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}")  # a Docker reference's characters, no spaces
_COUNTRY = re.compile(r"[A-Z]{2}")
_TYPE = re.compile(r"(\d+)x (.+?)( \(community\))?")


class RunPodCredentials(Credentials):
    """An API key, and whether Community Cloud hosts (third-party hardware, cheaper) may be used."""

    api_key: SecretStr = field("API Key", "secret", min_length=1)
    include_community: bool = field(
        "Include Community Cloud", "toggle", default=False,
        help="Also launch on Community Cloud hosts (third-party hardware); Secure Cloud only when off.")


def pod_name(installation_id: str, key: str) -> str:
    """`gpuprov-<installation>-<key>`, at most NAME_MAX chars (providers/naming.py)."""
    return naming.owned_name(installation_id, key, NAME_MAX, what="a RunPod pod name")


def instance_type(gpu_id: str, count: int, cloud: str) -> str:
    """`2x NVIDIA L40S`, or `2x NVIDIA L40S (community)`: the GPU type id, count and tier of an offer."""
    return f"{count}x {gpu_id}{COMMUNITY if cloud == 'COMMUNITY' else ''}"


def parse_instance_type(text: str) -> tuple[str, int, str]:
    """(gpu id, count, cloud) of `instance_type(...)`; InvalidRequest for anything else."""
    m = _TYPE.fullmatch(text)
    if not m or int(m.group(1)) < 1:
        raise InvalidRequest(f"runpod: {rest.clean(text, 80)!r} is not a RunPod offer")
    return m.group(2), int(m.group(1)), "COMMUNITY" if m.group(3) else "SECURE"


def problem_fields(resp: httpx.Response) -> tuple[str, str]:
    """(title, detail) of an RFC 9457 problem, cleaned and bounded; a body of any other shape is
    described, never quoted."""
    try:
        body = resp.json()
    except ValueError:
        return "", rest.describe_body(resp)
    if not isinstance(body, dict):
        return "", rest.describe_body(resp)
    title, detail, errors = body.get("title"), body.get("detail"), body.get("errors")
    title = rest.clean(title, rest.MAX_CODE) if isinstance(title, str) else ""
    detail = rest.clean(detail) if isinstance(detail, str) else ""
    if isinstance(errors, list) and errors and isinstance(errors[0], str):
        detail = rest.clean(f"{detail} ({'; '.join(e for e in errors[:3] if isinstance(e, str))})")
    if not title and not detail:
        return "", rest.describe_body(resp)
    return title, detail


class RunPodProvider(naming.FoundByName, rest.RestCloudProvider):
    id: ClassVar[str] = "runpod"
    credentials_model: ClassVar[type[RunPodCredentials]] = RunPodCredentials
    default_endpoint: ClassVar[str] = DEFAULT_ENDPOINT
    # v2's OpenAPI `servers` (api.runpod.io); rest.runpod.io served v1 until its retirement.
    api_hosts: ClassVar[tuple[str, ...]] = ("api.runpod.io",)
    error_codes: ClassVar[Mapping[str, rest.ErrorKind]] = _CODES
    listing: ClassVar[Listing] = Listing(
        tagline="Per-second billing GPU pods",
        how_to_connect=("In the RunPod console open Settings → API Keys → Create API Key (read/write). Turn "
                        "on Include Community Cloud to add cheaper, less reliable Community Cloud offers "
                        "alongside Secure Cloud."),
    )
    capabilities: ClassVar[Capabilities] = Capabilities(
        display_name="RunPod",
        k3s="none",
        k3s_reason="RunPod pods are containers without systemd: k3s cannot run there (skipped)",
        k8s_api=False,
        ports=False,
        ports_reason="--port: RunPod pods are containers whose ports RunPod maps to random public ports "
                     "(or its HTTP proxy); there is no firewall to open a fixed port",
        spot=False,  # v2 has no interruptible pods (v1's `interruptible` retired with v1)
        custom_image=True,  # --image is the container image
        image_pattern=_IMAGE.pattern,
        image_form="runpod: --image must be a container image reference (e.g. repo/name:tag)",
        login_user="root",
        side_resources=[],
        regions=REGIONS,
        default_regions=[],  # anywhere
        # No idempotency token: a create whose answer was lost may still land this long after it was
        # sent (the request timeout is 30 s; the margin covers a slow scheduler). [guess]
        create_in_flight_s=90.0,
        boot_timeout_s=1200.0,  # image pulls of multi-GB containers take minutes
        self_end=SelfEnd(
            method="api",
            how=("runpodctl remove pod $RUNPOD_POD_ID with the RUNPOD_API_KEY RunPod sets in every pod, "
                 "scoped to that pod (and runpodctl is preinstalled); a stopped pod still bills its disk"),
            source="https://docs.runpod.io/pods/templates/environment-variables",
            command=(f"RUNPOD_API_KEY={container_env('RUNPOD_API_KEY')} "
                     f"runpodctl remove pod {container_env('RUNPOD_POD_ID')}"),
        ),
    )

    # ------------------------------------------------------------------ plumbing

    def _error(self, resp: httpx.Response, scope: FailureScope | str | None, *,
               creating: bool) -> ProviderError:
        title, detail = problem_fields(resp)
        status = resp.status_code
        if creating and status == 400 and _NO_CAPACITY.search(detail):
            return CapacityError(f"{self.id}: no capacity: {detail}", scope=scope or self.id)
        if status == 402:  # insufficient balance: no candidate on this account will succeed
            return QuotaError(f"{self.id}: {detail or 'insufficient balance'}", scope=self.id)
        if creating and status == 403:
            # Documented for create: "Your account cannot access the requested pool. Skip this candidate."
            return QuotaError(f"{self.id}: no access to this pool: {detail}", scope=scope or self.id)
        return rest.map_error(provider=self.id, code=title, message=detail, status=status, scope=scope,
                              codes=_CODES, retry_after=resp.headers.get("Retry-After"))

    async def _call(self, method: str, path: str, *, scope: FailureScope | str | None = None,
                    allow: tuple[int, ...] = (), **kwargs: Any) -> httpx.Response:
        # Every status comes back from rest.request (transport errors are still mapped there) so that
        # errors are read as problem+json here.
        resp = await rest.request(self._http(), method, path, provider=self.id, allow=range(100, 600),
                                  **kwargs)
        if resp.is_success or resp.status_code in allow:
            return resp
        raise self._error(resp, scope, creating=method == "POST" and path == "/pods")

    async def _get(self, path: str, **kwargs: Any) -> Any:
        return self._json(await self._call("GET", path, **kwargs))

    def _name(self, key: str) -> str:
        return pod_name(self.installation_id, key)

    def _ref(self, pod: dict[str, Any], key: str | None = None) -> InstanceRef:
        env = pod.get("env")
        env = env if isinstance(env, dict) else {}
        key = key or str(env.get("GPUPROV_KEY") or str(pod.get("name")).removeprefix(self._prefix))
        return InstanceRef(provider=self.id, instance_id=str(pod["id"]), key=key,
                           region=pod.get("dataCenterId") or None,
                           created_at=created_at(pod.get("createdAt")))  # v2 Pod: date-time

    async def _pods(self) -> list[dict[str, Any]]:
        body = await self._get("/pods")
        with rest.parsing(self.id, "pods"):
            pods = body["pods"]
            if not isinstance(pods, list):
                raise TypeError("pods is not a list")
        return [p for p in pods if isinstance(p, dict) and p.get("status") != "TERMINATED"]

    _machines = _pods  # what naming.FoundByName lists and matches names in

    # ------------------------------------------------------------------ primitives

    async def verify(self) -> str:
        # v2 has no "who am I"; the account's SSH-key list is its cheapest authenticated read. The
        # identity is a fingerprint of the key, never the key.
        await self._get("/account/ssh-keys")
        digest = hashlib.sha256(str(self.credentials.reveal()["api_key"]).encode()).hexdigest()[:12]
        return f"RunPod API key {digest}"

    def _clouds(self) -> list[str]:
        community = isinstance(self.credentials, RunPodCredentials) and self.credentials.include_community
        return ["SECURE", "COMMUNITY"] if community else ["SECURE"]

    async def offers(self, query: OfferQuery) -> list[Offer]:
        if query.spot is True:
            return []  # no interruptible pods in v2
        region = query.region
        country = region if region and _COUNTRY.fullmatch(region) else None
        if region and not country and region not in CONTINENTS:
            return []
        count = query.gpu_count or 1
        params: dict[str, Any] = {"include": "AVAILABILITY", "product": "POD", "count": count}
        if country:
            params["countryCodes"] = country
        answers = await all_of(
            self._get("/catalog/datacenters"),
            *(self._get("/catalog/gpus", params={**params, "cloud": cloud}) for cloud in self._clouds()))
        out: list[Offer] = []
        with rest.parsing(self.id, "catalog"):
            continent = {str(dc["id"]): str(dc.get("region")) for dc in answers[0]["dataCenters"]}
            for cloud, body in zip(self._clouds(), answers[1:], strict=True):
                for gpu in body["gpus"]:
                    out += self._offers_of(gpu, count, cloud, continent, country)
        if region and not country:
            out = [o for o in out if o.region == region]
        return rank_offers(out, query)

    def _offers_of(self, gpu: dict[str, Any], count: int, cloud: str, continent: dict[str, str],
                   country: str | None) -> list[Offer]:
        tier = cloud.lower()
        price = gpu["price"].get(tier)
        if not gpu.get(tier) or not price or int((gpu.get("maxCount") or {}).get(tier) or 0) < count:
            return []
        name, memory = normalize_gpu(gpu.get("name") or gpu["id"])
        spec = GpuSpec(name=name or normalize_gpu(gpu["id"])[0], count=count,
                       memory_gib=float(gpu.get("memory") or memory or 0) or None)
        out = []
        for dc in gpu.get("dataCenters") or []:
            # A data center outside the known continents (UNKNOWN) cannot be asked for by region.
            region = country or continent.get(str(dc["id"]))
            if region not in REGIONS:
                continue
            out.append(Offer(
                provider=self.id, instance_type=instance_type(str(gpu["id"]), count, cloud), gpu=spec,
                vcpus=VCPUS_PER_GPU * count, memory_gib=float(RAM_GB_PER_GPU * count), region=region,
                zone=str(dc["id"]), price_per_hour=round(float(price) * count, 4), spot=False,
                available=dc.get("availability") not in (None, "NONE")))
        return out

    def _check(self, offer: Offer, spec: LaunchSpec) -> tuple[str, int, str]:
        if spec.k3s or spec.user_data:
            raise Unsupported("RunPod pods are containers: no cloud-init user data, no k3s at boot")
        gpu_id, count, cloud = parse_instance_type(offer.instance_type)
        if cloud not in self._clouds():
            raise InvalidRequest("runpod: this connection does not include Community Cloud")
        if not offer.zone:
            raise InvalidRequest("runpod: the offer names no data center")
        return gpu_id, count, cloud

    async def _find_or_launch(self, offer: Offer, spec: LaunchSpec) -> InstanceRef:
        gpu_id, count, cloud = self._check(offer, spec)
        name = self._name(spec.key)
        found = [] if spec.unsent else await self._by_name(name)
        if found:
            with rest.parsing(self.id, "pod"):
                return self._ref(found[0], key=spec.key)
        body = {
            "name": name,
            "image": spec.image or DEFAULT_IMAGE,
            "gpu": {"id": gpu_id, "count": count},
            "cloud": cloud,
            "dataCenterIds": [offer.zone],
            "disk": DISK_GB,
            "ports": ["22/tcp"],  # ssh.direct needs it; the proxy carries no SFTP or forwarding
            "startSsh": True,
            # The image's sshd authorizes PUBLIC_KEY's lines; set here, startSsh leaves it as it is.
            "env": {"PUBLIC_KEY": "\n".join(k.strip() for k in spec.ssh_public_keys),
                    "GPUPROV_INSTALLATION": self.installation_id, "GPUPROV_KEY": spec.key},
        }
        scope = FailureScope(provider=self.id, region=offer.region, zone=offer.zone,
                             instance_type=offer.instance_type)
        with launch_request():  # the send is recorded as it leaves (providers/base.py)
            resp = await self._call("POST", "/pods", json=body, scope=scope)
        pod = self._json(resp)
        with rest.parsing(self.id, "pod"):
            return InstanceRef(provider=self.id, instance_id=str(pod["id"]), key=spec.key,
                               region=offer.region, created_at=created_at(pod.get("createdAt")))

    async def get(self, ref: InstanceRef) -> InstanceStatus | None:
        resp = await self._call("GET", f"/pods/{ref.instance_id}", allow=(404,))
        if resp.status_code == 404:
            return None
        pod = self._json(resp)
        with rest.parsing(self.id, "pod"):
            return self._status(ref, pod)

    def _status(self, ref: InstanceRef, pod: dict[str, Any]) -> InstanceStatus:
        """One pod object, as GET /pods/{id} and the GET /pods listing both return it."""
        status = str(pod["status"])
        state = _STATES.get(status, InstanceState.ERROR)
        host, port, user = self._ssh(pod)
        detail = status
        if state == InstanceState.RUNNING and host is None:
            # The container is up but 22/tcp has no public port yet: not reachable, so not running.
            state, detail = InstanceState.PENDING, "RUNNING (SSH port not mapped yet)"
        gpu = pod.get("gpu") or {}
        return InstanceStatus(
            ref=ref, state=state, host=host, ssh_port=port or 22, ssh_user=user,
            instance_type=instance_type(str(gpu["id"]), int(gpu.get("count") or 1), str(pod.get("cloud")))
            if gpu.get("id") else None,
            detail=detail)

    def _ssh(self, pod: dict[str, Any]) -> tuple[str | None, int | None, str]:
        """The direct SSH endpoint (host, mapped port, user): `ssh.direct`, else runtime's 22/tcp mapping."""
        direct = (pod.get("ssh") or {}).get("direct")
        if isinstance(direct, dict) and direct.get("host") and direct.get("port"):
            return str(direct["host"]), int(direct["port"]), str(direct.get("username") or "root")
        for p in (pod.get("runtime") or {}).get("ports") or []:
            if p.get("private") == 22 and p.get("type") == "tcp" and p.get("ip") and p.get("public"):
                return str(p["ip"]), int(p["public"]), "root"
        return None, None, self.capabilities.login_user

    async def terminate(self, ref: InstanceRef) -> None:
        # 204 when deleted; 404 when it is already gone (success).
        await self._call("DELETE", f"/pods/{ref.instance_id}", allow=(404,))



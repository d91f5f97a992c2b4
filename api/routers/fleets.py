"""SSH / on-prem fleets: hosts gpuprov logs in to with a pasted private key. Saving one (POST, PUT)
starts FleetProbeWorkflow, which logs in to each host and stores what it found; GET shows each
host's last answer. The key is sealed at once, stored encrypted and never returned or logged.

Host keys are trusted on first use (providers/host_keys.py): the first successful probe pins each
host's (and the bastion's) SSH host key, shown as `host_key_fingerprint`; from then on a host
presenting another key is refused, its reason "host key changed: got SHA256:…, expected SHA256:…".
PUT keeps the pins of the hosts it keeps (and the bastion's while its host and port stay).
After checking the change is legitimate (a reinstalled host), `POST /fleets/{id}/trust` naming
the hosts (and/or `bastion: true`) forgets their pins and probes again: the next answer is pinned."""

from __future__ import annotations

import ipaddress
import logging
import re
from typing import Annotated, Any

import asyncssh
from fastapi import APIRouter, HTTPException, status
from pydantic import BaseModel, Field, field_validator
from sqlmodel import select

from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, SessionDep, in_thread, open_session
from api.errors import shown
from api.fields import Name, Strict, Timestamp, aware
from api.pagination import Keyset, Page, PageDep
from api.temporal import WorkflowUnavailable
from messages import workflows as wf
from messages.fleet import FleetProbeRequest
from messages.ids import fleet_probe_workflow_id
from providers.fleet_addresses import AddressRefused, FleetAddresses
from providers.host_keys import fingerprint
from store import fleets, ids, instances
from store.models import Fleet, FleetHost

log = logging.getLogger(__name__)
router = APIRouter(prefix="/fleets", tags=["fleets"])

KEYSET = Keyset("fleets", Fleet.created_at, Fleet.id, descending=False)
MAX_KEY = 20_000  # characters: an RSA-8192 OpenSSH key is well under this
MAX_HOSTS = 256
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def parse_host(value: str) -> str:
    """A host name (RFC 1123 labels) or an IP address; anything else (spaces, shell characters,
    user@, :port) is refused. Returned as given (IPs in their canonical form)."""
    text = value.strip()
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    name = text[:-1] if text.endswith(".") else text
    if not name or len(name) > 253 or not all(_LABEL.match(label) for label in name.split(".")):
        raise ValueError("a host must be a host name or an IP address")
    return name


def parse_private_key(text: str, field: str) -> str:
    """The OpenSSH/PEM text if it is an unencrypted private key; ValueError naming `field`, never
    quoting the text."""
    try:
        asyncssh.import_private_key(text)
    except asyncssh.KeyEncryptionError:
        raise ValueError(f"{field} is passphrase-protected: paste an unencrypted key") from None
    except (asyncssh.KeyImportError, ValueError, TypeError):
        raise ValueError(f"{field} is not an SSH private key") from None
    return text.strip() + "\n"


Host = Annotated[str, Field(min_length=1, max_length=253)]
Port = Annotated[int, Field(ge=1, le=65535)]
User = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")]
PrivateKey = Annotated[str, Field(max_length=MAX_KEY, description=(
    "an OpenSSH private key, pasted; stored encrypted, never returned"))]


class BastionIn(Strict):
    host: Host
    port: Port = 22
    user: User | None = Field(None, description="default: the fleet's user")
    private_key: PrivateKey | None = Field(None, description="default: the fleet's key")

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return parse_host(value)

    @field_validator("private_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        return parse_private_key(value, "bastion.private_key") if value and value.strip() else None


class FleetIn(Strict):
    name: Name
    user: User = "ubuntu"
    port: Port = 22
    private_key: PrivateKey | None = Field(
        None, description="required to create; on PUT, blank or missing keeps the saved key")
    hosts: list[Host] = Field(min_length=1, max_length=MAX_HOSTS)
    bastion: BastionIn | None = None

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, values: list[str]) -> list[str]:
        hosts = [parse_host(v) for v in values]
        if len(set(hosts)) != len(hosts):
            raise ValueError("hosts must not repeat")
        return hosts

    @field_validator("private_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        return parse_private_key(value, "private_key") if value and value.strip() else None


class BastionOut(BaseModel):
    host: str
    port: int
    user: str
    own_key: bool  # a key of its own, else the fleet's
    host_key_fingerprint: str | None  # its pinned host key; null: not pinned yet


class FleetHostOut(BaseModel):
    host: str
    probed_at: Timestamp | None  # null: not probed yet
    reachable: bool | None
    reason: str | None  # why it is not reachable
    gpu_vendor: str | None
    gpu_name: str | None
    gpu_count: int | None
    gpu_memory_gb: int | None
    gpu_summary: str | None  # "2× H100 (80GB) · 160GB total"
    docker: bool | None
    sudo: bool | None  # passwordless
    tcp_forwarding: bool | None
    host_key_fingerprint: str | None  # "SHA256:…" of the pinned host key; null: not pinned yet
    host_key_pinned_at: Timestamp | None

    @classmethod
    def of(cls, h: FleetHost) -> FleetHostOut:
        return cls(host=h.host, probed_at=h.probed_at, reachable=h.reachable, reason=h.reason,
                   gpu_vendor=h.gpu_vendor, gpu_name=h.gpu_name, gpu_count=h.gpu_count,
                   gpu_memory_gb=h.gpu_memory_gb, gpu_summary=h.gpu_summary, docker=h.docker, sudo=h.sudo,
                   tcp_forwarding=h.tcp_forwarding, host_key_fingerprint=fingerprint(h.host_key),
                   host_key_pinned_at=aware(h.host_key_pinned_at))


class FleetOut(BaseModel):
    id: str
    name: str
    user: str
    port: int
    hosts: list[FleetHostOut]
    bastion: BastionOut | None
    created_at: Timestamp | None

    @classmethod
    def of(cls, row: Fleet, hosts: list[FleetHost]) -> FleetOut:
        bastion = None
        if row.bastion_host:
            bastion = BastionOut(host=row.bastion_host, port=row.bastion_port or 22,
                                 user=row.bastion_user or row.user, own_key=row.bastion_secret is not None,
                                 host_key_fingerprint=fingerprint(row.bastion_host_key))
        return cls(id=row.id, name=row.name, user=row.user, port=row.port,
                   hosts=[FleetHostOut.of(h) for h in hosts], bastion=bastion, created_at=row.created_at)


class TrustIn(Strict):
    hosts: list[Host] = Field(default_factory=list, max_length=MAX_HOSTS,
                              description="hosts (as listed in the fleet) whose new host key to accept")
    bastion: bool = Field(False, description="accept the bastion's new host key too")

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, values: list[str]) -> list[str]:
        return [parse_host(v) for v in values]


class FleetRemoval(BaseModel):
    id: str
    deleted: bool


# --------------------------------------------------------------------------- database work (sync)


def check_addresses(addresses: FleetAddresses, body: FleetIn) -> None:
    """HTTP 422 when a host or the bastion is an address a fleet may not have (loopback,
    link-local, a metadata service, this installation's own services...: providers/fleet_addresses.py).
    Names reached directly are resolved here, each address checked; nothing is dialled. Hosts behind
    a bastion are the bastion's to resolve: their names are not looked up here."""
    try:
        if body.bastion is not None:
            addresses.check(body.bastion.host, body.bastion.port)
        addresses.check_all(body.hosts, body.port, resolve=body.bastion is None)
    except AddressRefused as e:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(e)) from None


def _out(deps: AppDeps, project: str, fleet_id: str) -> FleetOut | None:
    with open_session(deps) as session:
        row = fleets.get_fleet(session, project, fleet_id)
        return None if row is None else FleetOut.of(row, list(fleets.hosts_of(session, row.id)))


def _save(deps: AppDeps, project: str, fleet_id: str, body: FleetIn, *, create: bool,
          probe_id: str) -> FleetOut | None:
    with open_session(deps) as session:
        if not create and fleets.get_fleet(session, project, fleet_id) is None:
            return None
        bastion = None
        if body.bastion is not None:
            b = body.bastion
            bastion = fleets.Bastion(host=b.host, port=b.port, user=b.user or body.user,
                                     private_key=b.private_key)
        row = fleets.save_fleet(session, deps.box, fleet_id=fleet_id, project=project, name=body.name,
                                user=body.user, port=body.port, hosts=body.hosts,
                                private_key=body.private_key, bastion=bastion, new_host_id=ids.new_id,
                                probe_id=probe_id)
        return FleetOut.of(row, list(fleets.hosts_of(session, row.id)))


def _trust(deps: AppDeps, project: str, fleet_id: str, body: TrustIn, probe_id: str) -> FleetOut | None:
    """None: no such fleet; HTTP 422 naming hosts not in it."""
    with open_session(deps) as session:
        row = fleets.get_fleet(session, project, fleet_id)
        if row is None:
            return None
        if body.bastion and not row.bastion_host:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "this fleet has no bastion")
        unknown = fleets.forget_host_keys(session, row, body.hosts, bastion=body.bastion, probe_id=probe_id)
        if unknown:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                                f"not hosts of this fleet: {', '.join(shown(h) for h in unknown)}")
        return FleetOut.of(row, list(fleets.hosts_of(session, row.id)))


def forget_fleet(deps: AppDeps, project: str, fleet_id: str) -> bool:
    """Drop the project's fleet `fleet_id` (False: no such fleet here); no host is contacted."""
    with open_session(deps) as session:
        if fleets.get_fleet(session, project, fleet_id) is None:
            return False
        # Allocations on its hosts are freed with the fleet's key: without the fleet, `down` could
        # not remove their keys, k3s and claims. They go first.
        live = [i.id for i in instances.live_instances(session, fleet_id)]
        if live:
            raise HTTPException(status.HTTP_409_CONFLICT,
                                f"fleet {fleet_id} has live allocations ({', '.join(live)}): `gpuprov down` "
                                "them first (removing a fleet touches no host; only their teardown frees "
                                "the hosts they hold)")
        fleets.delete_fleet(session, fleet_id)
        return True


async def _probe(deps: AppDeps, fleet_id: str, probe_id: str) -> None:
    """Start this save's probe (the fleet's latest: an older one still running records nothing
    more). Temporal unreachable: the configuration is saved anyway, the probe just did not start (the
    hosts keep their last answer); logged, not an error."""
    try:
        request = FleetProbeRequest(fleet_id=fleet_id, probe_id=probe_id)
        await deps.workflows.start(wf.FLEET_PROBE, request,
                                   workflow_id=fleet_probe_workflow_id(fleet_id, probe_id))
    except WorkflowUnavailable as e:
        log.warning("fleet %s saved, probe not started: %s", fleet_id, e)


# --------------------------------------------------------------------------- routes

NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "unknown fleet"}}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=FleetOut,
             responses={422: {"description": "bad request (a host, an address a fleet may not have, "
                                             "the key...)"}})
async def create_fleet(body: FleetIn, deps: DepsDep, caller: CallerDep) -> FleetOut:
    """Save an SSH fleet and start probing its hosts (GET shows each host's answer once in)."""
    if body.private_key is None:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "private_key is required")
    await in_thread(check_addresses, deps.fleet_addresses, body)
    fleet_id, probe_id = ids.new_id(), ids.new_id()
    out = await in_thread(_save, deps, caller.project, fleet_id, body, create=True, probe_id=probe_id)
    assert out is not None
    log.info("fleet %s saved (%d hosts)", fleet_id, len(out.hosts))
    await _probe(deps, fleet_id, probe_id)
    return out


@router.get("", response_model=Page[FleetOut])
def list_fleets(session: SessionDep, caller: CallerDep, page: PageDep) -> Page[FleetOut]:
    """The project's fleets, oldest first, each host with its last probe answer. Never a key."""
    rows, following = KEYSET.fetch(session, select(Fleet).where(Fleet.project == caller.project), page)
    return Page(items=[FleetOut.of(f, list(fleets.hosts_of(session, f.id))) for f in rows],
                next_cursor=following)


@router.get("/{fleet_id}", response_model=FleetOut, responses=NOT_FOUND)
async def get_fleet(fleet_id: str, deps: DepsDep, caller: CallerDep) -> FleetOut:
    out = await in_thread(_out, deps, caller.project, fleet_id)
    if out is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no fleet {shown(fleet_id)}")
    return out


@router.put("/{fleet_id}", response_model=FleetOut,
            responses={**NOT_FOUND, 422: {
                "description": "bad request (a host, an address a fleet may not have, the key...)"}})
async def update_fleet(fleet_id: str, body: FleetIn, deps: DepsDep, caller: CallerDep) -> FleetOut:
    """Replace the configuration (a blank or missing private_key keeps the saved one; hosts kept
    keep their last answer) and probe again."""
    await in_thread(check_addresses, deps.fleet_addresses, body)
    probe_id = ids.new_id()
    out = await in_thread(_save, deps, caller.project, fleet_id, body, create=False, probe_id=probe_id)
    if out is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no fleet {shown(fleet_id)}")
    log.info("fleet %s updated (%d hosts)", fleet_id, len(out.hosts))
    await _probe(deps, fleet_id, probe_id)
    return out


@router.post("/{fleet_id}/trust", response_model=FleetOut,
             responses={**NOT_FOUND, 422: {"description": "a host not in the fleet, or nothing named"}})
async def trust_host_keys(fleet_id: str, body: TrustIn, deps: DepsDep, caller: CallerDep) -> FleetOut:
    """Accept the named hosts' (and/or the bastion's) new SSH host keys: their pins are forgotten
    and the fleet is probed again, which pins what they present now. Only after checking the
    change is legitimate: a changed key is also what a machine in the middle shows."""
    if not body.hosts and not body.bastion:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "name hosts, or bastion: true")
    probe_id = ids.new_id()
    out = await in_thread(_trust, deps, caller.project, fleet_id, body, probe_id)
    if out is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no fleet {shown(fleet_id)}")
    log.info("fleet %s: host keys re-trusted (%d hosts%s)", fleet_id, len(body.hosts),
             ", bastion" if body.bastion else "")
    await _probe(deps, fleet_id, probe_id)
    return out


@router.delete("/{fleet_id}", response_model=FleetRemoval,
               responses={**NOT_FOUND, 409: {"description": "allocations still live on its hosts"}})
async def delete_fleet(fleet_id: str, deps: DepsDep, caller: CallerDep) -> FleetRemoval:
    """Forget the fleet: its configuration and probe answers go; no host is contacted or changed."""
    if not await in_thread(forget_fleet, deps, caller.project, fleet_id):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no fleet {shown(fleet_id)}")
    log.info("fleet %s deleted", fleet_id)
    return FleetRemoval(id=fleet_id, deleted=True)

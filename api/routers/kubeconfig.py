"""An instance's Kubernetes API credentials: `GET /instances/{id}/kubeconfig` and who fetched them.

The kubeconfig carries k3s's admin client certificate — cluster-admin on that machine. It is read
from the machine over gpuprov's one SSH path (activities/machine_ssh.py: the host key pinned at the
first login, a fleet host through its bastion) each time it is asked for, by this API process and
not by a workflow, so it is never in a workflow history; it is never stored or logged, and the
answer says `Cache-Control: no-store`. Each hand-out is recorded (`kubeconfig_fetches`: which token,
from where, when), and `GET /instances/{id}/kubeconfig-fetches` lists them.

Where it points (providers/kubeconfig.py): a cloud with *direct* access, the machine's address
(the create opened 6443 to `k8s_api_from`); otherwise 127.0.0.1:6443, the local end of `gpuprov
tunnel`, which rewrites the port it listens on.
"""

from __future__ import annotations

import uuid
from typing import Literal

import asyncssh
from fastapi import APIRouter, HTTPException, Request, Response, status
from pydantic import BaseModel
from sqlmodel import col, select
from temporalio.exceptions import ApplicationError

from activities import machine_ssh
from activities.deps import ActivityDeps
from api.auth import CallerDep
from api.deps import AppDeps, DepsDep, SessionDep, in_thread, open_session
from api.errors import shown
from api.fields import Timestamp
from messages.enums import AllocationStatus
from providers import kubeconfig, registry
from store import instances
from store.models import Instance, KubeconfigFetch

router = APIRouter(prefix="/instances", tags=["instances"])

READ_KUBECONFIG = "k3s kubectl config view --raw"
OPENED_NOTE = "Kubernetes API (6443) opened at create to"  # workflows/allocation.py's note


class KubeconfigOut(BaseModel):
    instance_id: str
    access: Literal["direct", "tunnel"]
    server: str  # where the kubeconfig points: the machine (direct) or 127.0.0.1:6443 (the tunnel's end)
    kubeconfig: str  # YAML; its client certificate is cluster-admin: keep it as you would a password
    note: str | None = None


class KubeconfigFetchOut(BaseModel):
    id: str
    principal: str
    client_address: str | None
    access: str
    fetched_at: Timestamp


def _ssh_deps(deps: AppDeps) -> ActivityDeps:
    """The SSH path's dependencies, built once per API process (its key decrypted once)."""
    if deps.machine_access is None:
        deps.machine_access = ActivityDeps(engine=deps.engine, box=deps.box,
                                           installation_id=deps.installation_id,
                                           fleet_addresses=deps.fleet_addresses)
    return deps.machine_access


def _visible(deps: AppDeps, project: str, instance_id: str) -> Instance:
    with open_session(deps) as session:
        row = instances.get_instance(session, instance_id)
    if row is None or row.project != project:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no instance {shown(instance_id)}")
    return row


async def _read_from_machine(deps: AppDeps, row: Instance) -> str:
    """k3s's kubeconfig, read over the pinned SSH path. HTTPException with the reason otherwise."""
    assert row.ssh_host is not None
    access = _ssh_deps(deps)
    try:
        r = await machine_ssh.route(access, row.ssh_host, allocation_id=row.id)
        async with machine_ssh.connect(access, row.ssh_host, row.ssh_port or 22, row.ssh_user or "root", r,
                                       15) as conn:
            result = await conn.run(READ_KUBECONFIG, check=False)
    except ApplicationError as e:  # the host key changed, or the fleet's address rules refuse it
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"instance {row.id}: {e.message}") from None
    except (OSError, asyncssh.Error, TimeoutError) as e:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY,
                            f"instance {row.id}: cannot reach it over SSH: {type(e).__name__}: {e}") from None
    if result.exit_status == 127:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"instance {row.id}: k3s is not installed there (allocated without k3s?)")
    if result.exit_status != 0:
        err = str(result.stderr or "")[-300:].strip()
        raise HTTPException(status.HTTP_502_BAD_GATEWAY,
                            f"instance {row.id}: k3s did not give its kubeconfig "
                            f"(exit {result.exit_status}): {shown(err)}")
    return str(result.stdout or "")


def _record(deps: AppDeps, fetch: KubeconfigFetch) -> None:
    with open_session(deps) as session:
        session.add(fetch)
        session.commit()


@router.get("/{instance_id}/kubeconfig", response_model=KubeconfigOut,
            responses={404: {"description": "unknown instance"},
                       409: {"description": "the cloud has no Kubernetes access, or the instance is "
                                            "not ready or runs no k3s"},
                       502: {"description": "the machine could not be read over SSH"}})
async def get_kubeconfig(instance_id: str, deps: DepsDep, caller: CallerDep, request: Request,
                         response: Response) -> KubeconfigOut:
    """A kubeconfig for the instance's k3s, read from the machine now: cluster-admin, so every fetch
    is recorded. Direct-access clouds: it points at the machine's address (reachable from the
    networks the allocation's `k8s_api_from` named); others: at 127.0.0.1:6443, for `gpuprov tunnel`."""
    row = await in_thread(_visible, deps, caller.project, instance_id)
    try:
        caps = registry.capabilities(row.provider)
        access = kubeconfig.access_of(caps)
    except kubeconfig.NoK8sAccess as e:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"{caps.display_name} has no Kubernetes API access: {e}") from None
    except KeyError:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"instance {instance_id}: its cloud {shown(row.provider)} "
                            "is not installed here") from None
    if row.status != AllocationStatus.READY or not row.ssh_host:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"instance {instance_id} is {row.status}: "
                            "a kubeconfig is read from a ready machine")
    raw = await _read_from_machine(deps, row)
    server = kubeconfig.server_url(row.ssh_host if access == "direct" else "127.0.0.1")
    try:
        text = kubeconfig.pointed_at(raw, server, f"gpuprov-{row.id}")
    except kubeconfig.KubeconfigError as e:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"instance {instance_id}: {e}") from None
    note = None
    if access == "tunnel":
        note = "reached through SSH only: `gpuprov tunnel` forwards a local port and points this at it"
    elif OPENED_NOTE not in (row.note or ""):
        note = ("6443 was opened to no network at create (k8s_api_from empty, or an allocation older than "
                "the option): `gpuprov tunnel` reaches it through SSH")
    await in_thread(_record, deps, KubeconfigFetch(
        id=uuid.uuid4().hex, instance_id=row.id, project=row.project,
        principal="admin" if caller.admin else f"project:{caller.project}",
        client_address=request.client.host if request.client else None, access=access))
    response.headers["Cache-Control"] = "no-store"
    return KubeconfigOut(instance_id=row.id, access=access, server=server, kubeconfig=text, note=note)


@router.get("/{instance_id}/kubeconfig-fetches", response_model=list[KubeconfigFetchOut],
            responses={404: {"description": "unknown instance"}})
def list_kubeconfig_fetches(instance_id: str, session: SessionDep,
                            caller: CallerDep) -> list[KubeconfigFetchOut]:
    """Who was handed this instance's kubeconfig, newest first (the last 100)."""
    row = instances.get_instance(session, instance_id)
    if row is None or row.project != caller.project:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no instance {shown(instance_id)}")
    rows = session.exec(select(KubeconfigFetch).where(KubeconfigFetch.instance_id == instance_id)
                        .order_by(col(KubeconfigFetch.fetched_at).desc()).limit(100)).all()
    return [KubeconfigFetchOut(id=f.id, principal=f.principal, client_address=f.client_address,
                               access=f.access, fetched_at=f.fetched_at) for f in rows]

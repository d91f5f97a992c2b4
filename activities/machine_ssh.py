"""The one SSH path to a machine gpuprov runs: every activity that logs in to a cloud machine or a
fleet host (the allocation's SSH steps, jobs, idle samples; the fleet probe and adapter use
providers/ssh_login.py directly) goes through `route` and `connect` here.

- A fleet host: through the fleet's bastion when it has one, its host key (and the bastion's) as the
  fleet's probe pinned them (fleet_host.host_key, fleet.bastion_host_key), dialling the address the
  installation's fleet address check allowed (providers/fleet_addresses.py), as the adapter does.
- A cloud machine: trust on first use, per machine. The first successful login (SET_UP_MACHINE's
  first step, or WAIT_SSH in runs from before it, normally) records the host key the machine
  presented on its Instance row (`host_key`, with the machine it was pinned for:
  `host_key_machine`); every later connection to that machine (k3s, the GPU check, a job, an idle
  sample) accepts only that key. Another attempt of the allocation (another machine)
  pins afresh.

A key other than the pinned one is refused before authentication — nothing is sent to the host —
and raised as a non-retryable ApplicationError (ErrorKind.HOST_KEY_CHANGED) naming both
fingerprints: asking again cannot help until a person looks.

Activities find the route themselves (from the allocation id, or the SshTarget's `via`), so no
workflow passes anything new and old histories replay unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import asyncssh
from temporalio.exceptions import ApplicationError

from activities.deps import ActivityDeps
from activities.errors import provider_errors
from messages.allocation import CloudTarget
from messages.enums import ErrorKind
from providers import registry
from providers.fleet_addresses import AddressRefused, FleetAddresses, checked_login
from providers.host_keys import fingerprint
from providers.ssh_fleet import SshFleetProvider
from providers.ssh_login import Bastion, HostLogin, LoginFailed, Seen, login
from store.db import session_scope
from store.host_keys import machine_of, pinned_key
from store.models import Instance, utcnow


@dataclass(frozen=True)
class Route:
    """How one machine is reached and which host key it must show."""

    bastion: Bastion | None = None
    host_key: str | None = None  # the pinned key (OpenSSH line); None: trust on first use
    pin_on: tuple[str, str] | None = None  # (allocation id, machine): record the key seen there
    # A fleet host's: the addresses its fleet may reach (providers/fleet_addresses.py); the login
    # dials the address this checked, as the fleet adapter's own logins do. None: a cloud machine.
    addresses: FleetAddresses | None = None


def _load(deps: ActivityDeps, allocation_id: str) -> Instance | None:
    with session_scope(deps.engine) as session:
        return session.get(Instance, allocation_id)


def _record_pin(deps: ActivityDeps, allocation_id: str, machine: str, seen: str) -> str | None:
    """Pin `seen` on the row for `machine` unless a pin for that machine is there already; the pin
    now in force (None: no row)."""
    with session_scope(deps.engine) as session:
        row = session.get(Instance, allocation_id)
        if row is None:
            return None
        if row.host_key and row.host_key_machine == machine:
            return row.host_key  # pinned meanwhile (another connection to the same machine)
        row.host_key, row.host_key_machine, row.host_key_pinned_at = seen, machine, utcnow()
        session.add(row)
        session.commit()
        return seen


async def route(deps: ActivityDeps, host: str, *, allocation_id: str | None = None,
                via: CloudTarget | None = None) -> Route:
    """The route to `host`: a fleet's (named by `via`, or by the allocation's row) or a cloud
    machine's pin on its allocation's row. No allocation known: direct, trust on first use."""
    row = await deps.blocking(_load, deps, allocation_id) if allocation_id else None
    if via is None and row is not None and registry.is_fleet(row.provider):
        via = CloudTarget(cloud=row.provider, connection_id=row.connection_id)
    if via is not None and registry.is_fleet(via.cloud):
        with provider_errors():
            p = await deps.provider(via)
        if isinstance(p, SshFleetProvider):
            bastion, host_key = p.ssh_route(host)
            return Route(bastion=bastion, host_key=host_key, addresses=p.addresses)
    if row is None:
        return Route()
    pinned = pinned_key(row)
    return Route(host_key=pinned) if pinned else Route(pin_on=(row.id, machine_of(row)))


def key_changed_error(host: str, reason: str) -> ApplicationError:
    return ApplicationError(f"{host}: {reason}; nothing was sent to it", type=ErrorKind.HOST_KEY_CHANGED,
                            non_retryable=True)


@asynccontextmanager
async def connect(deps: ActivityDeps, host: str, port: int, user: str, r: Route,
                  timeout_s: float = 10.0) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """A connection to the machine with the installation's key, by `r`, closed on exit. A changed
    host key: `key_changed_error` (non-retryable); any other login failure raises as a direct
    asyncssh login's would (OSError, asyncssh.Error, TimeoutError)."""
    key = await deps.blocking(deps.private_key)
    target = HostLogin(host, port, user, key, r.bastion, r.host_key)
    if r.addresses is not None:
        try:  # resolved once, off the loop; refused before anything is dialled
            target = await asyncio.to_thread(checked_login, r.addresses, target)
        except AddressRefused as e:
            raise ApplicationError(f"{host}: {e}", type=ErrorKind.AUTH, non_retryable=True) from None
    seen = Seen()
    try:
        async with login(target, timeout_s, seen) as conn:
            if r.pin_on is not None and seen.host_key is not None:
                allocation_id, machine = r.pin_on
                pinned = await deps.blocking(_record_pin, deps, allocation_id, machine, seen.host_key)
                if pinned is not None and pinned != seen.host_key:
                    raise key_changed_error(host, f"host key changed: got {fingerprint(seen.host_key)}, "
                                                  f"expected {fingerprint(pinned)}")
            yield conn
    except LoginFailed as e:
        if e.key_changed:
            raise key_changed_error(host, e.reason) from None
        raise e.cause from None

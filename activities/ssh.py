"""SSH activities: log in with the installation's key, install k3s, look for GPUs — as three
activities (runs from before FEWER_TRIPS_PATCH, workflows/allocation.py) or as one."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import shlex
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncssh
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import lease, machine_ssh
from activities.deps import ActivityDeps, heartbeating
from activities.k3s_setup import k3s_script
from messages import activities as acts
from messages.activities import MachineSetup, SshTarget
from messages.allocation import GpuInfo
from messages.enums import AllocationStatus, ErrorKind, Phase
from store import instances
from store.db import session_scope
from store.models import Instance

NVIDIA_SMI = ("nvidia-smi --query-gpu=index,name,memory.total,uuid,driver_version "
              "--format=csv,noheader,nounits")

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*")


def machine_address(host: str) -> str:
    """`host` as k3s's --tls-san takes it: an IP address (normalised) or a DNS name; ValueError else."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        if _HOSTNAME.fullmatch(host):
            return host.lower()
    raise ValueError(f"not an address or host name: {host!r}")


def _na(value: str) -> str | None:
    value = value.strip()
    return None if value in ("", "N/A", "[N/A]", "[Not Supported]") else value


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """Parse NVIDIA_SMI output; unsupported fields become None."""
    gpus: list[GpuInfo] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 5:
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        index, name, memory, uuid, driver = fields[:5]
        mem = _na(memory)
        gpus.append(GpuInfo(index=int(index), name=name, memory_mib=int(float(mem)) if mem else None,
                            uuid=_na(uuid), driver_version=_na(driver)))
    return gpus


def authorize_keys_command(keys: list[str]) -> str:
    """A shell command adding each of `keys` to the login user's authorized_keys once (a retry adds
    nothing twice). Each key is an OpenSSH line the API re-serialised from a parsed key, and is
    still passed quoted, never spliced into the command."""
    lines = [f"{{ grep -qxF {shlex.quote(k.strip())} ~/.ssh/authorized_keys 2>/dev/null || "
             f"printf '%s\\n' {shlex.quote(k.strip())} >> ~/.ssh/authorized_keys; }}" for k in keys]
    return " && ".join(["umask 077", "mkdir -p ~/.ssh", *lines])


class SshActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    def _row(self, allocation_id: str) -> Instance | None:
        if not allocation_id:
            return None
        with session_scope(self.deps.engine) as session:
            return session.get(Instance, allocation_id)

    async def _run(self, t: SshTarget, command: str, *, keep: bool) -> asyncssh.SSHCompletedProcess:
        """Run `command` on the machine by the one SSH path (activities/machine_ssh.py): a fleet
        host through its bastion with its pinned key; a cloud machine pinned at its first login
        (WAIT_SSH) and held to that key afterwards. An allocation's steps share one connection
        (activities/ssh_sessions.py): `keep` holds it for the next step; the last step closes it."""
        async def login() -> AsyncIterator[asyncssh.SSHClientConnection]:
            r = await machine_ssh.route(self.deps, t.host, allocation_id=t.allocation_id or None, via=t.via)
            async with machine_ssh.connect(self.deps, t.host, t.port, t.user, r, 10) as conn:
                yield conn

        opener = asynccontextmanager(login)
        if not t.allocation_id:  # nothing to share it with
            async with opener() as conn:
                return await conn.run(command, check=False)
        key = (t.allocation_id, t.host, t.port, t.user)
        return await self.deps.ssh_sessions.run(key, opener, command, keep=keep)

    @activity.defn(name=acts.WAIT_SSH.name)
    async def wait_ssh(self, t: SshTarget) -> None:
        """Return once a login with the installation's key runs a command — and, where the cloud
        leaves the user's keys to gpuprov (`t.authorize_keys`), has added them."""
        await self.deps.write_marks(t)
        await self._wait_ssh(t)

    @activity.defn(name=acts.INSTALL_K3S.name)
    async def install_k3s(self, t: SshTarget) -> None:
        await self.deps.write_marks(t)
        await self._install_k3s(t)

    @activity.defn(name=acts.PROBE_GPUS.name)
    async def probe_gpus(self, t: SshTarget) -> list[GpuInfo]:
        """The GPUs nvidia-smi sees. No nvidia-smi is a fact ([]), not a failure."""
        await self.deps.write_marks(t)
        return await self._probe_gpus(t)

    @activity.defn(name=acts.SET_UP_MACHINE.name)
    async def set_up_machine(self, t: MachineSetup) -> list[GpuInfo]:
        """WAIT_SSH, INSTALL_K3S (when asked) and PROBE_GPUS as one activity on one login: each
        round trip between them (a workflow task, an activity dispatch: ~20-25 ms on the dev box)
        was orchestration overhead (bench (a)). Each step's phase is
        marked as the step starts, as the workflow marked it for the separate activities; the
        workflow's own phase stays `ssh` until this returns."""
        await self.deps.write_marks(t)
        await self._wait_ssh(t)
        await self._mark(t, Phase.SSH, Phase.K3S)
        if t.install_k3s:
            await self._install_k3s(t)
        await self._mark(t, Phase.K3S, Phase.GPU_CHECK)
        return await self._probe_gpus(t)

    async def _mark(self, t: SshTarget, after: Phase, phase: Phase) -> None:
        """Mark `phase` if the row still shows `after` (this activity's previous step): a teardown
        its workflow began meanwhile (this activity's cancel not yet seen) is not undone."""
        provisioning = AllocationStatus.PROVISIONING.value

        def write() -> None:
            with session_scope(self.deps.engine) as session:
                instances.mark_phases(session, t.allocation_id, [(provisioning, phase.value)],
                                      after=(provisioning, after.value))
        if t.allocation_id:
            await self.deps.blocking(write)

    async def _wait_ssh(self, t: SshTarget) -> None:
        command = authorize_keys_command(t.authorize_keys) if t.authorize_keys else "true"
        while True:
            try:
                # bounded, and heartbeating meanwhile: a slow handshake on a loaded host is not a dead worker
                async with asyncio.timeout(30):
                    result = await heartbeating(self._run(t, command, keep=True), 1.0, "waiting for ssh")
                if result.exit_status == 0:
                    return
            except (OSError, asyncssh.Error, TimeoutError):
                pass  # not up yet, or keys not installed yet
            await asyncio.sleep(t.poll_interval_s)

    async def _install_k3s(self, t: SshTarget) -> None:
        try:  # the address goes into the script (quoted too): an address, nothing else
            san = machine_address(t.host)
        except ValueError as e:
            raise ApplicationError(str(e), type=ErrorKind.K3S_FAILED, non_retryable=True) from None
        script = k3s_script(self.deps.k3s_install_url, tls_san=san)
        result = await heartbeating(self._run(t, f"bash -c {shlex.quote(script)}", keep=True), 1.0, "k3s")
        if result.exit_status != 0:
            raise ApplicationError(f"k3s install failed (exit {result.exit_status}): "
                                   f"{str(result.stderr or '')[-500:]}", type=ErrorKind.K3S_FAILED)

    async def _probe_gpus(self, t: SshTarget) -> list[GpuInfo]:
        # The last SSH step before ready: the allocation's connection is closed after it. The
        # machine's lease is written first, in the same command (activities/lease.py).
        renew = lease.command_at_ready(await self.deps.blocking(self._row, t.allocation_id))
        result = await heartbeating(self._run(t, renew + NVIDIA_SMI, keep=False), 1.0, "nvidia-smi")
        if result.exit_status == 127:
            return []
        if result.exit_status != 0:
            output = str(result.stderr or result.stdout or "")[-500:]
            raise ApplicationError(f"nvidia-smi failed (exit {result.exit_status}): {output}",
                                   type=ErrorKind.GPU_CHECK_FAILED)
        try:
            return parse_nvidia_smi(str(result.stdout or ""))
        except ValueError as e:
            raise ApplicationError(str(e), type=ErrorKind.GPU_CHECK_FAILED, non_retryable=True) from None

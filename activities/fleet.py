"""SSH fleet activities: list a fleet's hosts, and probe one host — log in with the fleet's key
(through its bastion when it has one), look for GPUs, check the host requirements — and store
the answer. The key is read sealed from the database here, by fleet id, and opened only in memory."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import asyncssh
from temporalio import activity

from activities.deps import ActivityDeps
from messages import activities as acts
from messages.fleet import FleetHostIds, FleetHostInput, FleetProbeRequest, HostProbe
from providers.fleet_addresses import AddressRefused, checked_login
from providers.ssh_login import Bastion, HostLogin, LoginFailed, Seen, failure_reason, login
from store import fleets
from store.db import session_scope
from store.models import Fleet, FleetHost
from store.secrets import SecretError

NVIDIA_SMI = "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits"
HL_SMI = "hl-smi --query-aip=name,memory.total --format=csv,noheader,nounits"
ROCM_SMI = "rocm-smi --showproductname --showmeminfo vram --json"
COMMAND_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int | None


# Vendor and brand words: "NVIDIA H100" -> "H100", "AMD Instinct MI300X" -> "MI300X".
_VENDOR = re.compile(r"^(NVIDIA|AMD(\s+Instinct)?|Habana Labs|Habana|Intel)\s+", re.IGNORECASE)
# Memory sizes and form factors: the summary gives the memory itself ("H100 80GB HBM3" -> "H100").
_NOISE = re.compile(r"^(\d+\s*GB|HBM\d*e?|PCIe|SXM\d*|NVL|OAM)$", re.IGNORECASE)


def _short(name: str) -> str:
    """`NVIDIA H100 80GB HBM3` -> `H100`; `NVIDIA A100-SXM4-80GB` -> `A100`."""
    words = ["-".join(p for p in w.split("-") if not _NOISE.match(p)) for w in _VENDOR.sub("", name).split()]
    return " ".join(w for w in words if w and not _NOISE.match(w)) or name.strip()


def _gb(mib: int | None) -> int | None:
    return None if mib is None else round(mib / 1024)


def summarize(gpus: list[Gpu]) -> str:
    """`2× H100 (80GB) · 160GB total`; kinds joined with ` + `; `no GPU` for none."""
    if not gpus:
        return "no GPU"
    kinds = Counter((_short(g.name), _gb(g.memory_mib)) for g in gpus)
    parts = [f"{n}× {name}" + (f" ({gb}GB)" if gb is not None else "") for (name, gb), n in kinds.items()]
    total = sum(_gb(g.memory_mib) or 0 for g in gpus)
    return " + ".join(parts) + (f" · {total}GB total" if total else "")


def parse_csv_gpus(text: str) -> list[Gpu]:
    """`name, memory MiB` lines (nvidia-smi / hl-smi with noheader,nounits)."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, memory = line.rpartition(",")
        try:
            mib: int | None = int(float(memory.strip()))
        except ValueError:
            mib = None
        gpus.append(Gpu(name=(name or memory).strip(), memory_mib=mib))
    return gpus


def parse_rocm_smi(text: str) -> list[Gpu]:
    """rocm-smi --json: {"card0": {"Card series": ..., "VRAM Total Memory (B)": ...}, ...}."""
    data: dict[str, Any] = json.loads(text)
    gpus = []
    for card, fields in sorted(data.items()):
        if not card.startswith("card") or not isinstance(fields, dict):
            continue
        name = str(fields.get("Card series") or fields.get("Card model") or "AMD GPU")
        total = fields.get("VRAM Total Memory (B)")
        gpus.append(Gpu(name=name, memory_mib=int(total) // (1024 * 1024) if total else None))
    return gpus


class FleetActivities:
    def __init__(self, deps: ActivityDeps) -> None:
        self.deps = deps

    def _host_ids(self, fleet_id: str) -> list[str]:
        with session_scope(self.deps.engine) as session:
            return [h.id for h in fleets.hosts_of(session, fleet_id)]

    @activity.defn(name=acts.FLEET_HOSTS.name)
    async def fleet_hosts(self, req: FleetProbeRequest) -> FleetHostIds:
        """The fleet's host ids (none once the fleet is deleted)."""
        return FleetHostIds(host_ids=await self.deps.blocking(self._host_ids, req.fleet_id))

    def _target(self, inp: FleetHostInput) -> HostLogin | None:
        """The host's address and the opened keys; None when the fleet or host is gone."""
        with session_scope(self.deps.engine) as session:
            fleet, host = session.get(Fleet, inp.fleet_id), session.get(FleetHost, inp.host_id)
            if fleet is None or host is None or host.fleet_id != fleet.id:
                return None
            key = asyncssh.import_private_key(self.deps.box.open_text(fleet.secret))
            bastion = None
            if fleet.bastion_host:
                bkey = (asyncssh.import_private_key(self.deps.box.open_text(fleet.bastion_secret))
                        if fleet.bastion_secret else key)
                bastion = Bastion(fleet.bastion_host, fleet.bastion_port or 22,
                                  fleet.bastion_user or fleet.user, bkey, host_key=fleet.bastion_host_key)
            return HostLogin(host=host.host, port=fleet.port, user=fleet.user, key=key, bastion=bastion,
                             host_key=host.host_key)

    def _record(self, probe: HostProbe, probe_id: str) -> None:
        with session_scope(self.deps.engine) as session:
            fleets.record_probe(session, probe, probe_id)

    @activity.defn(name=acts.PROBE_FLEET_HOST.name)
    async def probe_fleet_host(self, inp: FleetHostInput) -> HostProbe:
        """Log in and look; an unreachable host is an answer (with the reason), not a failure.
        The answer is stored on the host's row and returned."""
        try:
            target = await self.deps.blocking(self._target, inp)
        except (SecretError, asyncssh.KeyImportError) as e:  # never the key itself, only why
            probe = HostProbe(host_id=inp.host_id, reachable=False,
                              reason=f"the saved key cannot be used: {type(e).__name__}")
            await self.deps.blocking(self._record, probe, inp.probe_id)
            return probe
        if target is None:
            return HostProbe(host_id=inp.host_id, reachable=False, reason="removed from the fleet")
        try:  # resolved once, here; the login dials the addresses checked, never the names again
            target = await self.deps.blocking(checked_login, self.deps.fleet_addresses, target)
        except AddressRefused as e:
            probe = HostProbe(host_id=inp.host_id, reachable=False, reason=str(e))
        else:
            probe = await probe_host(inp.host_id, target, inp.connect_timeout_s)
        await self.deps.blocking(self._record, probe, inp.probe_id)
        return probe


async def probe_host(host_id: str, t: HostLogin, timeout_s: float) -> HostProbe:
    # Host keys: trust on first use, then only the pinned key (providers/host_keys.py, ssh_login.py).
    seen = Seen()
    try:
        async with login(t, timeout_s, seen) as conn:
            try:
                found = await _inspect(host_id, conn, t.port)
                return found.model_copy(update={"host_key": seen.host_key,
                                                "bastion_host_key": seen.bastion_host_key})
            except (OSError, asyncssh.Error, TimeoutError) as e:
                return HostProbe(host_id=host_id, reachable=False, reason=failure_reason(e, "while checking"))
    except LoginFailed as e:
        return HostProbe(host_id=host_id, reachable=False, reason=e.reason,
                         bastion_host_key=seen.bastion_host_key)


async def _run(conn: asyncssh.SSHClientConnection, command: str) -> asyncssh.SSHCompletedProcess:
    async with asyncio.timeout(COMMAND_TIMEOUT_S):
        return await conn.run(command, check=False)


async def _ok(conn: asyncssh.SSHClientConnection, command: str) -> bool:
    return (await _run(conn, command)).exit_status == 0


async def _gpus(conn: asyncssh.SSHClientConnection) -> tuple[str | None, list[Gpu]]:
    smi = await _run(conn, NVIDIA_SMI)
    if smi.exit_status == 0 and str(smi.stdout or "").strip():
        return "nvidia", parse_csv_gpus(str(smi.stdout))
    if await _ok(conn, "test -e /dev/kfd"):
        rocm = await _run(conn, ROCM_SMI)
        gpus: list[Gpu] = []
        if rocm.exit_status == 0:
            with contextlib.suppress(ValueError):
                gpus = parse_rocm_smi(str(rocm.stdout or ""))
        return "amd", gpus
    hl = await _run(conn, HL_SMI)
    if hl.exit_status == 0 and str(hl.stdout or "").strip():
        return "gaudi", parse_csv_gpus(str(hl.stdout))
    if await _ok(conn, "test -d /dev/accel && ls /dev/accel | grep -q accel"):
        return "gaudi", []
    return None, []


async def _tcp_forwarding(conn: asyncssh.SSHClientConnection, port: int) -> bool:
    """Try a direct-tcpip channel to the host's own sshd: refused by policy means forwarding is off;
    opened, or failing only to reach the target, means the server forwards."""
    try:
        async with asyncio.timeout(COMMAND_TIMEOUT_S):
            _, writer = await conn.open_connection("localhost", port)
    except asyncssh.ChannelOpenError as e:
        return e.code != asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED
    writer.close()
    return True


async def _inspect(host_id: str, conn: asyncssh.SSHClientConnection, port: int) -> HostProbe:
    vendor, gpus = await _gpus(conn)
    kinds = {(_short(g.name), g.memory_mib) for g in gpus}
    name, mib = next(iter(kinds)) if len(kinds) == 1 else (None, None)
    return HostProbe(
        host_id=host_id, reachable=True, gpu_vendor=vendor, gpu_name=name, gpu_count=len(gpus),
        gpu_memory_gb=_gb(mib),
        gpu_summary=summarize(gpus) if gpus or not vendor else f"{vendor} GPUs (not counted)",
        docker=await _ok(conn, "command -v docker >/dev/null 2>&1"),
        sudo=await _ok(conn, "sudo -n true >/dev/null 2>&1"),
        tcp_forwarding=await _tcp_forwarding(conn, port))
